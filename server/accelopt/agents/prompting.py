"""Turning agent requests into chat messages from the templates in `agents/prompts/`.

Templates use `$name` placeholders (string.Template), so kernel code with braces passes through
untouched. The profile's fields are listed in an order that varies with the request's seed:
the N planner calls for one kernel see the same facts in different orders, which spreads their
proposals (a model tends to act on whatever it reads first).
"""

from __future__ import annotations

import random
from functools import cache
from importlib import resources
from string import Template

from accelopt.agents.window import Trim
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience
from accelopt.search.roles import ExecuteRequest, FixRequest, PlanRequest, SummarizeRequest
from accelopt.search.speedup_words import speedup_words

Messages = list[dict[str, str]]

# A planner may write a long plan; the executor and fixer see at most this much of it (a plan is
# one step, and a runaway description would crowd the kernel out of a small window).
PLAN_TEXT_CHARS = 1500


@cache
def template(name: str) -> Template:
    return Template(
        resources.files("accelopt.agents").joinpath("prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")
    )


def _render(name: str, **values: object) -> str:
    return template(name).safe_substitute({k: str(v) for k, v in values.items()}).strip() + "\n"


def _shared() -> dict[str, str]:
    return {"nki_facts": _render("nki_facts"), "glossary": _render("profile_glossary")}


def _format_value(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


# The fields a trimmed profile keeps: what says most about where the time goes.
_TELLING_FIELDS = (
    "latency_ms",
    "percent_of_peak",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "spill_save_bytes",
    "tensor_active_percent",
    "vector_active_percent",
    "scalar_active_percent",
)


def profile_text(profile: Profile | None, seed: int, keep: int | None = None) -> str:
    if profile is None:
        return "(no profile available)"
    items: list[tuple[str, float | str]] = list(profile.summary_fields().items())
    if keep is not None:
        telling = [(k, v) for k, v in items if k in _TELLING_FIELDS]
        items = telling[: max(keep - 1, 0)]
    fields = [*items, ("bound", profile.bound)]
    random.Random(seed).shuffle(fields)
    return "\n".join(f"- {k}: {v if isinstance(v, str) else _format_value(v)}" for k, v in fields)


def costly_lines(profile: Profile | None, limit: int = 5) -> str:
    if profile is None or not profile.lines or limit <= 0:
        return "(not available)"
    return "\n".join(
        f"- line {c.line} ({100 * c.fraction:.0f}% of engine time): {c.text.strip()}"
        for c in profile.lines[:limit]
    )


def lessons_text(experiences: list[Experience]) -> str:
    if not experiences:
        return "Past lessons: none yet."
    parts = ["Past lessons from the optimization memory (id, outcome, lesson):"]
    for exp in experiences:
        if exp.failure:
            outcome = f"failed: {_one_line(exp.failure, 120)}"
        else:
            outcome = f"{'helped' if exp.positive else 'hurt'}, {speedup_words(exp.speedup)}"
        parts.append(f"- lesson {exp.id} ({outcome}, {exp.kernel_family or exp.task}): {exp.lesson.title}")
        if exp.lesson.plan:
            parts.append(f"  {exp.lesson.plan}")
        if exp.lesson.before and exp.lesson.after:
            parts.append(f"  before: {_one_line(exp.lesson.before)}\n  after:  {_one_line(exp.lesson.after)}")
    return "\n".join(parts)


def _one_line(snippet: str, limit: int = 240) -> str:
    text = " | ".join(line.strip() for line in snippet.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _label(profile: Profile | None) -> str:
    return profile.label if profile else "no profile"


def _capped(text: str, limit: int = PLAN_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kept(experiences: list[Experience], trim: Trim) -> list[Experience]:
    return experiences if trim.lessons is None else experiences[: trim.lessons]


def planner_messages(request: PlanRequest, proposal: int, trim: Trim = Trim()) -> Messages:
    user = _render(
        "planner_user",
        kernel_name=request.kernel.name,
        path=request.kernel.path or "<editor>",
        source=request.kernel.text.rstrip(),
        profile_label=_label(request.profile),
        profile=profile_text(request.profile, request.seed, trim.profile_fields),
        lines=costly_lines(request.profile, trim.costly_lines),
        lessons=lessons_text(_kept(request.experiences, trim)),
        proposal=proposal,
    )
    return [{"role": "system", "content": _render("planner", **_shared())}, {"role": "user", "content": user}]


def executor_messages(request: ExecuteRequest, variant: int, trim: Trim = Trim()) -> Messages:
    user = _render(
        "executor_user",
        kernel_name=request.kernel.name,
        source=request.kernel.text.rstrip(),
        profile_label=_label(request.profile),
        profile=profile_text(request.profile, request.seed, trim.profile_fields),
        plan_title=request.plan.title,
        plan_description=_capped(request.plan.description),
        variant=variant,
        samples=request.samples,
    )
    system = _render("executor", kernel_name=request.kernel.name, **_shared())
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def fixer_messages(request: FixRequest, trim: Trim = Trim()) -> Messages:
    del trim  # the fixer's prompt holds only what it must: two kernels, the plan and the error
    user = _render(
        "fixer_user",
        original=request.original.text.rstrip(),
        plan_title=request.plan.title,
        plan_description=_capped(request.plan.description),
        source=request.kernel.text.rstrip(),
        status=request.status,
        where=f" at line {request.line}" if request.line else "",
        message=request.message or "(no message)",
    )
    system = _render("fixer", kernel_name=request.kernel.name, **_shared())
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def summarizer_messages(request: SummarizeRequest, trim: Trim = Trim()) -> Messages:
    slow, fast = request.slow_profile, request.fast_profile
    user = _render(
        "summarizer_user",
        plan_title=request.plan.title,
        plan_description=request.plan.description,
        profile_label=_label(fast or slow),
        slow_latency=f"{slow.latency_ms:.4g}" if slow else "?",
        fast_latency=f"{fast.latency_ms:.4g}" if fast else "?",
        # A failed candidate carries a sentinel speedup; show the failure, not a made-up figure.
        speedup="n/a" if request.failure else f"{request.speedup:.3f}",
        verdict=_summary_verdict(request),
        slow=request.slow.text.rstrip(),
        fast=request.fast.text.rstrip(),
        profile_diff=profile_diff(slow, fast) if trim.profile_fields is None else "(left out to fit the window)",
    )
    return [{"role": "system", "content": _render("summarizer")}, {"role": "user", "content": user}]


def _summary_verdict(request: SummarizeRequest) -> str:
    if request.failure:
        return f"the new kernel failed: {request.failure}"
    return "it helped" if request.speedup > 1 else "it hurt"


def profile_diff(before: Profile | None, after: Profile | None) -> str:
    if before is None or after is None:
        return "(not available)"
    a, b = before.summary_fields(), after.summary_fields()
    changed = [f"- {k}: {_format_value(a[k])} -> {_format_value(b[k])}" for k in a if a[k] != b[k]]
    return "\n".join(changed) or "(no field changed)"
