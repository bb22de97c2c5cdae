"""The one place the language server reaches into the engine.

Everything here is a thin adapter: building a `Task` for a kernel in a document, profiling it
trace-only on a backend, and the backends' lifetimes. It runs in the server's child processes
(profile_process.py, search_process.py), which import it; it imports neither. Kernel code never runs in the server (or
in the profile/search processes): `Backend.evaluate` runs it in sandboxed worker processes;
`task_for_kernel` only reads the directive (and the reference module's text) beside the kernel.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from accelopt.lsp.config import ServerSettings, hardware_for
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.schedule_view import Schedule

if TYPE_CHECKING:
    from accelopt.profiling.backend import Backend
    from accelopt.profiling.task import Size, Task

log = logging.getLogger(__name__)


class TaskProblem(BaseModel):
    """The kernel's task cannot be built (a TaskError): no inputs declared, or a bad directive."""

    message: str
    line: int | None = None  # 1-based, when the task knows it
    directive: str | None = Field(
        None, description="when no directive exists: the `# accelopt: inputs ...` line to insert"
    )


class ProfileOutcome(BaseModel):
    """What the editor knows about one kernel of one document version."""

    kernel_name: str
    evaluation: Evaluation | None = None
    task_problem: TaskProblem | None = None
    error: str | None = None  # the engine itself failed (a bug, not the kernel's fault)
    transient: bool = False  # the failure was the profile process's, not this kernel's: ask again
    elapsed_s: float = 0.0
    schedule: Schedule | None = Field(None, description="the engine timeline, when it was asked for")


def build_task(kernel: KernelSource, size: Size) -> Task:
    """Raises TaskError when the kernel has no reference/inputs directive."""
    from accelopt.profiling.task import task_for_kernel

    return task_for_kernel(kernel, None, size=size)


def warm_task_imports() -> None:
    """Import what `build_task` needs (numpy among it: about a second, more on a loaded machine)
    so that the first search does not pay for it between the click and its first candidate."""
    import accelopt.profiling.task  # noqa: F401


def task_problem_from(error: Exception, kernel: KernelSource) -> TaskProblem:
    from accelopt.profiling.inputs import DirectiveError, find_directive, suggest_inputs_directive

    directive: str | None = None
    try:
        if find_directive(kernel.text, kernel.name) is None:
            directive = suggest_inputs_directive(kernel)
    except DirectiveError:
        pass  # a directive is there but malformed: the message says what to fix
    return TaskProblem(
        message=getattr(error, "message", None) or str(error),
        line=getattr(error, "line", None),
        directive=directive,
    )


def make_backend(settings: ServerSettings, workers: int) -> Backend:
    """A backend bound to the event loop that calls this (backends keep loop-bound state)."""
    from accelopt.profiling.backends import get_backend

    return get_backend(settings.backend, max_workers=workers)


async def close_backend(backend: Backend) -> None:
    try:
        result = backend.aclose()
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("closing a backend failed")


async def profile_kernel(
    kernel: KernelSource,
    settings: ServerSettings,
    backends: dict[tuple[str, int], Backend],
    *,
    with_schedule: bool = False,
) -> ProfileOutcome:
    """Trace-only emulation + timing of one kernel; never raises. `backends` caches the backends
    (by name and worker count) of the process this runs in (the profile process). With
    `with_schedule`, the outcome also carries the engine timeline (for the timeline view)."""
    started = time.perf_counter()
    try:
        task = await asyncio.to_thread(build_task, kernel, settings.input_size)
    except Exception as exc:
        from accelopt.profiling.task import TaskError

        if isinstance(exc, TaskError):
            outcome = ProfileOutcome(kernel_name=kernel.name, task_problem=task_problem_from(exc, kernel))
        else:
            log.exception("building the task for %s failed", kernel.name)
            outcome = ProfileOutcome(kernel_name=kernel.name, error=f"{type(exc).__name__}: {exc}")
        outcome.elapsed_s = time.perf_counter() - started
        return outcome
    options = EvaluationOptions(
        hardware=hardware_for(settings, kernel.text),
        seeds=1,
        timeout_s=settings.profile_timeout_s,
        check_correctness=False,
    )
    key = (settings.backend, settings.profile_workers)
    if key not in backends:
        backends[key] = make_backend(settings, settings.profile_workers)
    schedule: Schedule | None = None
    try:
        backend = backends[key]
        detailed = getattr(backend, "evaluate_detailed", None)
        if with_schedule and detailed is not None:
            run = await detailed(kernel, task, options)
            evaluation = run.evaluation
            if run.timeline is not None:
                from accelopt.profiling.schedule_view import schedule_of

                schedule = schedule_of(run.timeline, evaluation.profile, kernel.name)
        else:
            evaluation = await backend.evaluate(kernel, task, options)
    except Exception as exc:
        log.exception("profiling %s failed", kernel.name)
        return ProfileOutcome(
            kernel_name=kernel.name,
            error=f"{type(exc).__name__}: {exc}",
            elapsed_s=time.perf_counter() - started,
        )
    return ProfileOutcome(
        kernel_name=kernel.name, evaluation=evaluation, elapsed_s=time.perf_counter() - started, schedule=schedule
    )

