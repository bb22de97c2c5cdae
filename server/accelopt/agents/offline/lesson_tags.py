"""The variant tags of a lesson: which parameters the measured kernel was written with
(`variant=factor:4`) and whether it was rejected (`result=failed`). Written by the summarizer,
read by the planner (evidence.py) and the executor (variants.py)."""

from __future__ import annotations

import re

from accelopt.agents.offline.rewrites.base import Params

_VARIANT_TAG = re.compile(r"\bvariant=(\S+)")
_FAILED_TAG = re.compile(r"\bresult=failed\b")


def variant_tag(params: Params) -> str:
    """`factor:4` / `engine:gpsimd` / '' for no parameters (no spaces: it is one tag)."""
    return ",".join(f"{key}:{params[key]}" for key in sorted(params))


def variant_in_text(text: str) -> dict[str, str] | None:
    """The variant a lesson was tagged with, values as text (None when untagged)."""
    match = _VARIANT_TAG.search(text)
    if match is None:
        return None
    found: dict[str, str] = {}
    for part in match.group(1).rstrip(":.").split(","):
        key, _, value = part.partition(":")
        if key:
            found[key] = value
    return found


def failed_in_text(text: str) -> bool:
    return _FAILED_TAG.search(text) is not None


def _as_text(params: Params) -> dict[str, str]:
    return {key: str(value) for key, value in params.items()}


def speaks_about(lesson_variant: dict[str, str], failed: bool, params: Params) -> bool:
    """Whether a lesson about `lesson_variant` is evidence about `params`: the same variant, or
    -- for a failure -- the same variant with a factor at least as large."""
    mine = _as_text(params)
    if lesson_variant == mine:
        return True
    if not failed or lesson_variant.keys() != mine.keys() or "factor" not in mine:
        return False
    if any(lesson_variant[k] != mine[k] for k in mine if k != "factor"):
        return False
    try:
        return int(mine["factor"]) >= int(lesson_variant["factor"])
    except ValueError:
        return False
