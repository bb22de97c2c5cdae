"""The one place the language server reaches into the engine.

Everything here is a thin adapter: building a `Task` for a kernel in a document, profiling it
trace-only on a backend, and the backends' lifetimes. Kernel code never runs in this process:
`Backend.evaluate` runs it in sandboxed worker processes; `task_for_kernel` only reads the
directive (and the reference module's path) beside the kernel, so it runs in a thread to keep
file reads off the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from accelopt.lsp.config import ServerSettings
from accelopt.lsp.loop_thread import LoopThread
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.backend import Backend
    from accelopt.profiling.task import Task

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
    elapsed_s: float = 0.0


def build_task(kernel: KernelSource, size: str) -> Task:
    """Raises TaskError when the kernel has no reference/inputs directive."""
    from accelopt.profiling.task import task_for_kernel

    return task_for_kernel(kernel, None, size=size)


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


class Engine:
    """Profiles for hover, lens and diagnostics, run on a loop thread of their own (see
    loop_thread.py) with backends that live there. Searches get their own threads and backends
    (optimize.py), so a running search never starves a hover of workers either."""

    def __init__(self) -> None:
        self._thread: LoopThread | None = None
        self._backends: dict[tuple[str, int], Backend] = {}  # touched only on the profile thread

    async def profile(self, kernel: KernelSource, settings: ServerSettings) -> ProfileOutcome:
        """Trace-only emulation + timing of one kernel: never raises."""
        if self._thread is None:
            self._thread = LoopThread("accelopt-profiles")
        return await self._thread.run(self._profile(kernel, settings))

    async def _profile(self, kernel: KernelSource, settings: ServerSettings) -> ProfileOutcome:
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
            hardware=settings.hardware,
            seeds=1,
            timeout_s=settings.profile_timeout_s,
            check_correctness=False,
        )
        key = (settings.backend, settings.profile_workers)
        if key not in self._backends:
            self._backends[key] = make_backend(settings, settings.profile_workers)
        try:
            evaluation = await self._backends[key].evaluate(kernel, task, options)
        except Exception as exc:
            log.exception("profiling %s failed", kernel.name)
            return ProfileOutcome(
                kernel_name=kernel.name,
                error=f"{type(exc).__name__}: {exc}",
                elapsed_s=time.perf_counter() - started,
            )
        return ProfileOutcome(
            kernel_name=kernel.name, evaluation=evaluation, elapsed_s=time.perf_counter() - started
        )

    async def _close_backends(self) -> None:
        backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            await close_backend(backend)

    async def aclose(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            try:
                await asyncio.wait_for(thread.run(self._close_backends()), 10)
            except Exception:
                log.exception("closing the profile backends failed")
            await thread.stop()
