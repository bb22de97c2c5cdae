"""The engine's models as the tools report them: `Profile` -> `ProfileReport`, `Evaluation` ->
diagnostics and a correctness verdict. Pure translation (units and words), no new figures."""

from __future__ import annotations

from accelopt.mcp.kernels import source_line
from accelopt.mcp.models import Correctness, Diagnostic, EngineBusy, LineCostInfo, ProfileReport
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.profile import Profile, bound_in_words
from accelopt.profiling.task import Task

COSTLIEST_LINES = 5
# Statuses that are a fault of the kernel's code at a line (a diagnostic), not of its numbers.
_DIAGNOSED = {"syntax_error", "compile_error", "runtime_error", "rejected", "timeout"}


def _us(ms: float) -> float:
    return round(ms * 1e3, 4)


def _percent(fraction: float) -> float:
    return round(100 * fraction, 2)


def profile_report(profile: Profile) -> ProfileReport:
    busy = EngineBusy(
        tensor_percent=_percent(profile.tensor_engine_active_time_percent),
        vector_percent=_percent(profile.vector_engine_active_time_percent),
        scalar_percent=_percent(profile.scalar_engine_active_time_percent),
        gpsimd_percent=_percent(profile.gpsimd_engine_active_time_percent),
        dma_percent=_percent(profile.dma_active_time_percent),
    )
    lines = [
        LineCostInfo(
            line=cost.line,
            source=cost.text.strip(),
            busy_us=_us(cost.time_ms),
            share_percent=_percent(cost.fraction),
            engines_us={engine: _us(ms) for engine, ms in sorted(cost.engines.items(), key=lambda kv: -kv[1])},
        )
        for cost in profile.lines[:COSTLIEST_LINES]
    ]
    bound = bound_in_words(profile.bound)
    summary = (
        f"{_us(profile.latency_ms):g} µs ({profile.label}), {_percent(profile.percent_of_peak):g}% of the "
        f"roofline peak ({_us(profile.peak_latency_ms):g} µs); {bound}"
    )
    if lines:
        summary += f"; costliest line {lines[0].line} ({lines[0].share_percent:g}% of engine time)"
    return ProfileReport(
        backend_label=profile.label,
        latency_us=_us(profile.latency_ms),
        roofline_peak_latency_us=_us(profile.peak_latency_ms),
        percent_of_peak=_percent(profile.percent_of_peak),
        bound=bound,
        roofline_bound=bound_in_words(profile.roofline_bound) if profile.roofline_bound else None,
        engine_busy=busy,
        hbm_read_bytes=profile.hbm_read_bytes,
        hbm_write_bytes=profile.hbm_write_bytes,
        instructions=profile.instruction_count,
        dma_transfers=profile.dma_transfer_count,
        costliest_lines=lines,
        summary=summary,
    )


def correctness(evaluation: Evaluation, task: Task, checked: bool) -> Correctness:
    if task.kind == "reference":
        against = f"reference module {task.reference_path}"
    else:
        against = "the kernel itself on its declared inputs (its own oracle: only NaNs and unwritten outputs fail)"
    ran = evaluation.status in ("ok", "incorrect")
    return Correctness(
        checked=checked,
        correct=(evaluation.status == "ok") if checked and ran else None,
        seeds=len(evaluation.seeds) if checked else 0,
        max_relative_error=evaluation.max_error if checked else None,
        tolerance=task.tolerance if checked else None,
        reference=against,
    )


def diagnostics(evaluation: Evaluation, kernel: KernelSource) -> list[Diagnostic]:
    """The evaluation's failure at its line. The emulator stops at the first broken rule, so
    there is at most one: fix it and check again."""
    if evaluation.status not in _DIAGNOSED:
        return []
    return [
        Diagnostic(
            line=evaluation.line,
            severity="warning" if evaluation.status == "timeout" else "error",
            code=evaluation.error_code or evaluation.status,
            message=evaluation.message,
            source=source_line(kernel.text, evaluation.line),
        )
    ]


def backend_label(backend: str, hardware: str) -> str:
    """The label of figures from `backend` when no profile carries one (a failed run)."""
    return f"{'simulated' if backend == 'simulator' else 'measured'} on {hardware}"
