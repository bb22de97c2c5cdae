"""The engine timeline of one kernel, for the editor's timeline view: the kernel as it is in the
editor now, profiled (trace-only, in the sandbox, through the profile process) with its
schedule kept. A thin adapter: the schedule itself is `profiling.schedule_view`."""

from __future__ import annotations

from accelopt.lsp.config import ServerSettings
from accelopt.lsp.profile_process import ProfileProcess
from accelopt.lsp.protocol import TimelineLine, TimelineResult
from accelopt.profiling.evaluation import KernelSource


async def timeline_of(kernel: KernelSource, settings: ServerSettings, profiles: ProfileProcess) -> TimelineResult:
    outcome = await profiles.profile(kernel, settings, with_schedule=True)
    evaluation = outcome.evaluation
    if outcome.task_problem is not None:
        return TimelineResult(kernel_name=kernel.name, message=outcome.task_problem.message)
    if evaluation is None or outcome.error:
        return TimelineResult(kernel_name=kernel.name, message=outcome.error or "the kernel could not be profiled")
    if outcome.schedule is None:
        where = f" (line {evaluation.line})" if evaluation.line else ""
        reason = evaluation.message or f"the {settings.backend} backend gave no instruction schedule"
        return TimelineResult(kernel_name=kernel.name, message=f"{evaluation.status}{where}: {reason}")
    lines = [
        TimelineLine(line=cost.line, fraction=cost.fraction, text=cost.text.strip())
        for cost in (evaluation.profile.lines if evaluation.profile else [])
    ]
    return TimelineResult(kernel_name=kernel.name, schedule=outcome.schedule, lines=lines)
