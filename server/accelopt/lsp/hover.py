"""The hover card of a kernel: where it stands against the roofline, in Markdown."""

from __future__ import annotations

from accelopt.lsp.engine import ProfileOutcome
from accelopt.profiling.evaluation import Evaluation
from accelopt.profiling.profile import BOUND_WORDS, Profile, bound_in_words

PROFILING = "profiling…"

BOUND_LABELS = BOUND_WORDS  # the engine's wording (profiling/profile.py)
# Markdown hard line break: keeps the headline figures on consecutive lines without the
# paragraph spacing that made the card taller than VS Code lets a hover be.
_BREAK = "  \n"
_SNIPPET_CHARS = 60  # a costliest line longer than this would wrap and push the others out of view


bound_label = bound_in_words


def format_time(ms: float) -> str:
    if ms >= 1.0:
        return f"{ms:.3g} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.3g} µs"
    return f"{ms * 1e6:.3g} ns"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def pending_markdown(name: str) -> str:
    return f"**`{name}`** · {PROFILING}\n\nThe first profile of this version runs in the background."


def code_span(text: str) -> str:
    """`text` as inline code, shortened to fit one line of the card."""
    if len(text) > _SNIPPET_CHARS:
        text = text[: _SNIPPET_CHARS - 1].rstrip() + "…"
    # a backtick in the code itself needs a longer fence (and spaces, which Markdown strips)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def profile_markdown(name: str, profile: Profile) -> str:
    """Header, headline figures, engines and the three costliest lines: short enough that VS Code
    shows the whole card without a scrollbar (the costliest lines are the actionable part)."""
    busy = sorted(
        [
            ("Tensor", profile.tensor_engine_active_time_percent),
            ("Vector", profile.vector_engine_active_time_percent),
            ("Scalar", profile.scalar_engine_active_time_percent),
            ("GpSimd", profile.gpsimd_engine_active_time_percent),
            ("DMA", profile.dma_active_time_percent),
        ],
        key=lambda pair: -pair[1],  # the busiest engine first: it is the one that explains the bound
    )
    headline = [
        f"**{format_time(profile.latency_ms)}** · {profile.percent_of_peak:.0%} of peak "
        f"(roofline {format_time(profile.peak_latency_ms)}) · {bound_label(profile.bound)}",
        f"HBM traffic: {format_bytes(profile.hbm_read_bytes)} read · "
        f"{format_bytes(profile.hbm_write_bytes)} written",
        "Engines busy: " + " · ".join(f"{engine} {share:.0%}" for engine, share in busy),
    ]
    assumed = f" · {profile.nki_api}" if profile.nki_api else ""  # which NKI rules were applied
    rows = [f"**`{name}`** · {profile.label}{assumed}", "", _BREAK.join(headline)]
    if profile.lines:
        rows += ["", "Costliest lines:"]  # an ordered list starting at 1 may follow a paragraph line
        for rank, cost in enumerate(profile.lines[:3], start=1):
            snippet = cost.text.strip()
            code = f" {code_span(snippet)}" if snippet else ""
            rows.append(f"{rank}. line {cost.line} · {cost.fraction:.0%} · {format_time(cost.time_ms)}{code}")
    return "\n".join(rows)


def size_words(evaluation: Evaluation) -> str:
    """'full size', or 'timed at full size, checked at small' for a split evaluation."""
    if evaluation.checked_size and evaluation.checked_size != evaluation.timed_size:
        return f"timed at {evaluation.timed_size} size, checked at {evaluation.checked_size}"
    return f"{evaluation.timed_size} size"


def outcome_markdown(name: str, outcome: ProfileOutcome) -> str:
    if outcome.task_problem is not None:
        return f"**`{name}`** · not profiled: {outcome.task_problem.message}"
    if outcome.error is not None:
        return f"**`{name}`** · profiling failed: {outcome.error}"
    evaluation = outcome.evaluation
    assert evaluation is not None
    # What the user should know about the run (host code left out, a warning in the reference).
    notes = "".join(f"\n\n*Note: {note}*" for note in evaluation.notes)
    if evaluation.profile is not None and evaluation.status in ("ok", "incorrect"):
        card = profile_markdown(name, evaluation.profile)
        if evaluation.timed_size:  # which of the reference module's sizes the figures are for
            header, _, rest = card.partition("\n")
            card = f"{header} · {size_words(evaluation)}\n{rest}"
        return card + notes
    where = f" (line {evaluation.line})" if evaluation.line else ""
    return f"**`{name}`** · {evaluation.status}{where}: {evaluation.message}" + notes
