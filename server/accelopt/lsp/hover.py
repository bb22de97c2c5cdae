"""The hover card of a kernel: where it stands against the roofline, in Markdown."""

from __future__ import annotations

from accelopt.lsp.engine import ProfileOutcome
from accelopt.profiling.profile import Profile

PROFILING = "profiling…"

_BOUND_NAMES = {
    "hbm": "HBM bandwidth",
    "tensor": "Tensor Engine",
    "vector": "Vector/Scalar engines",
    "latency": "latency (too little work to fill the machine)",
}


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


def profile_markdown(name: str, profile: Profile) -> str:
    busy = [
        ("Tensor", profile.tensor_engine_active_time_percent),
        ("Vector", profile.vector_engine_active_time_percent),
        ("Scalar", profile.scalar_engine_active_time_percent),
        ("GpSimd", profile.gpsimd_engine_active_time_percent),
        ("DMA", profile.dma_active_time_percent),
    ]
    rows = [
        f"**`{name}`** · {profile.label} ({profile.backend} backend)",
        "",
        "| | |",
        "|---|---|",
        f"| latency | {format_time(profile.latency_ms)} |",
        f"| roofline peak | {format_time(profile.peak_latency_ms)} |",
        f"| percent of peak | {profile.percent_of_peak:.0%} |",
        f"| bound | {profile.bound} ({_BOUND_NAMES.get(profile.bound, profile.bound)}) |",
        f"| HBM traffic | {format_bytes(profile.hbm_read_bytes)} read · "
        f"{format_bytes(profile.hbm_write_bytes)} written |",
        "",
        "Engines busy: " + " · ".join(f"{engine} {share:.0%}" for engine, share in busy),
    ]
    if profile.lines:
        rows += ["", "Costliest lines:", ""]
        for rank, cost in enumerate(profile.lines[:3], start=1):
            snippet = cost.text.strip()
            code = f" `{snippet}`" if snippet else ""
            rows.append(f"{rank}. line {cost.line} — {cost.fraction:.0%} ({format_time(cost.time_ms)}){code}")
    return "\n".join(rows)


def outcome_markdown(name: str, outcome: ProfileOutcome) -> str:
    if outcome.task_problem is not None:
        return f"**`{name}`** · not profiled: {outcome.task_problem.message}"
    if outcome.error is not None:
        return f"**`{name}`** · profiling failed: {outcome.error}"
    evaluation = outcome.evaluation
    assert evaluation is not None
    if evaluation.profile is not None and evaluation.status in ("ok", "incorrect"):
        return profile_markdown(name, evaluation.profile)
    where = f" (line {evaluation.line})" if evaluation.line else ""
    return f"**`{name}`** · {evaluation.status}{where}: {evaluation.message}"
