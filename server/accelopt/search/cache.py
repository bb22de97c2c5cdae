"""Evaluations keyed by what determines them, so an identical candidate is never evaluated twice.

The key is the kernel's normalized source hash (comments and blank lines do not count), the
task, the backend and the hardware. Concurrent requests for one key share a single evaluation.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.task import Task


def task_fingerprint(task: Task) -> str:
    """A stable digest of everything a task says."""
    return hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]


class EvaluationCache:
    def __init__(self) -> None:
        self._done: dict[tuple[str, ...], Evaluation] = {}
        self._running: dict[tuple[str, ...], asyncio.Future[Evaluation]] = {}
        self.hits = 0

    @staticmethod
    def key(kernel: KernelSource, task: Task, backend: str, hardware: str) -> tuple[str, ...]:
        return (kernel.normalized_hash(), task_fingerprint(task), backend, hardware)

    def put(self, key: tuple[str, ...], evaluation: Evaluation) -> None:
        self._done[key] = evaluation

    def get(self, key: tuple[str, ...]) -> Evaluation | None:
        return self._done.get(key)

    async def get_or_evaluate(
        self, key: tuple[str, ...], evaluate: Callable[[], Awaitable[Evaluation]]
    ) -> tuple[Evaluation, bool]:
        """The evaluation for `key` and whether it came from the cache. A cancelled evaluation
        is not cached, so a later request runs it again."""
        if key in self._done:
            self.hits += 1
            return self._done[key], True
        if key in self._running:
            self.hits += 1
            return await asyncio.shield(self._running[key]), True
        future: asyncio.Future[Evaluation] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            result = await evaluate()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # marked as retrieved: asyncio stays quiet when nobody waits
            raise
        finally:
            self._running.pop(key, None)
        self._done[key] = result
        future.set_result(result)
        return result, False

    def __len__(self) -> int:
        return len(self._done)
