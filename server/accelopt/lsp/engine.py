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

from pydantic import BaseModel

from accelopt.lsp.config import ServerSettings
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.backend import Backend
    from accelopt.profiling.task import Task

log = logging.getLogger(__name__)


class MissingInputs(BaseModel):
    """The kernel has no way to get inputs (a TaskError): what to tell the user and the fix."""

    message: str
    line: int | None = None  # 1-based, when the task knows it
    directive: str | None = None  # the `# accelopt: inputs ...` line to insert, when one can be guessed


class ProfileOutcome(BaseModel):
    """What the editor knows about one kernel of one document version."""

    kernel_name: str
    evaluation: Evaluation | None = None
    missing_inputs: MissingInputs | None = None
    error: str | None = None  # the engine itself failed (a bug, not the kernel's fault)
    elapsed_s: float = 0.0


def build_task(kernel: KernelSource, size: str) -> Task:
    """Raises TaskError when the kernel has no reference/inputs directive."""
    from accelopt.profiling.task import task_for_kernel

    return task_for_kernel(kernel, None, size=size)


def missing_inputs_from(error: Exception, kernel: KernelSource) -> MissingInputs:
    directive: str | None = None
    try:
        from accelopt.profiling.task import suggest_inputs_directive

        directive = suggest_inputs_directive(kernel)
    except Exception as exc:  # a guess that fails leaves the diagnostic without a quick fix
        log.info("no inputs directive suggested for %s: %s", kernel.name, exc)
    return MissingInputs(
        message=getattr(error, "message", None) or str(error),
        line=getattr(error, "line", None),
        directive=directive,
    )


class Engine:
    """Backends shared by the whole server: one for interactive profiles (hover, lens,
    diagnostics) and one for searches, so a running search never starves a hover."""

    def __init__(self) -> None:
        self._backends: dict[tuple[str, str, int], Backend] = {}

    def backend(self, settings: ServerSettings, purpose: str) -> Backend:
        from accelopt.profiling.backends import get_backend

        workers = (
            settings.profile_workers
            if purpose == "profile"
            else (settings.search.max_concurrent_evaluations or 2)
        )
        key = (purpose, settings.backend, workers)
        if key not in self._backends:
            self._backends[key] = get_backend(settings.backend, max_workers=workers)
        return self._backends[key]

    async def profile(self, kernel: KernelSource, settings: ServerSettings) -> ProfileOutcome:
        """Trace-only emulation + timing of one kernel: never raises."""
        started = time.perf_counter()
        try:
            task = await asyncio.to_thread(build_task, kernel, settings.input_size)
        except Exception as exc:
            if type(exc).__name__ == "TaskError":
                outcome = ProfileOutcome(
                    kernel_name=kernel.name, missing_inputs=missing_inputs_from(exc, kernel)
                )
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
        try:
            evaluation = await self.backend(settings, "profile").evaluate(kernel, task, options)
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

    async def aclose(self) -> None:
        backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            try:
                result = backend.aclose()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("closing a backend failed")
