"""The hardware a kernel runs for: Trainium1/2/3, its NeuronCore generation (what
``nisa.get_nc_version()`` answers) and the kernel's own ``platform_target=``.

The generations follow the ``nki.isa.nc_version`` enum of the NKI API reference: NeuronCore-v2
(gen2) in Trainium1, NeuronCore-v3 (gen3) in Trainium2, NeuronCore-v4 (gen4) in Trainium3.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from accelopt.nki.context import current
from accelopt.nki.errors import NkiError

TARGETS = ("trn1", "trn2", "trn3")


class nc_version(enum.Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


_GENERATION = {"trn1": nc_version.gen2, "trn2": nc_version.gen3, "trn3": nc_version.gen4}


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the hardware the running kernel is emulated for."""
    return _GENERATION[current().target]


def generation(target: str) -> int:
    return _GENERATION[target].value


def _normalise(value: Any) -> str | None:
    text = str(getattr(value, "value", value)).strip().lower()
    for name in TARGETS:
        if name in text:
            return name
    return None


def kernel_target(options: dict[str, Any], requested: str | None, path: str, fn: Callable[..., Any]) -> str:
    """The target of a run: the kernel's ``platform_target=`` (what it is compiled for), else the
    hardware asked for, else Trainium1."""
    declared = options.get("platform_target")
    if declared is not None:
        found = _normalise(declared)
        if found is None:
            raise NkiError(
                "err_unsupported_platform_target",
                f"platform_target={declared!r} is not one of {', '.join(TARGETS)}",
                path,
                fn.__code__.co_firstlineno,
            )
        return found
    if requested is None:
        return "trn1"
    found = _normalise(requested)
    if found is None:
        raise ValueError(f"unknown target {requested!r}; choose one of {', '.join(TARGETS)}")
    return found


def require_generation(api: str, minimum: int, line: int | None = None) -> None:
    """Refuse an instruction the running target's NeuronCore does not have."""
    ctx = current()
    have = generation(ctx.target)
    if have < minimum:
        raise ctx.error(
            "err_unsupported_on_target",
            f"{api} is available only on NeuronCore-v{minimum} (gen{minimum}) and newer; this run "
            f"targets {ctx.target} (NeuronCore-v{have}); pick the hardware with --hardware or "
            "platform_target=",
            line,
        )
