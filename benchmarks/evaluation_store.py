"""A backend that remembers its evaluations in a SQLite file, for re-running a benchmark.

`search_quality.py --evaluation-store FILE` wraps the simulator backend in this store: a kernel
judged once (same normalized source, same task, same options, same backend) is answered from
the file in later runs instead of being simulated again. The benchmark counts evaluations as
distinct kernels the search wrote, never as backend calls, so the figures are the same with or
without the store; only the wall time changes (a full-size evaluation costs 5-60 s here, and a
beam+memory run shares most of its kernels with the beam run it is compared with).

Evaluations that depend on the machine's load rather than on the kernel (a timeout) are not
kept: the next run judges such a kernel again.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.search.cache import task_fingerprint

if TYPE_CHECKING:
    from accelopt.profiling.task import Task

# Outcomes that say more about the machine than about the kernel.
_NOT_KEPT = frozenset({"timeout"})


class StoredEvaluations:
    """`inner`, answered from `path` for kernels it has already judged."""

    def __init__(self, inner: Backend, path: str | Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.hits = 0
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS evaluations (key TEXT PRIMARY KEY, data TEXT NOT NULL)"
        )

    def key(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> str:
        parts = (self.name, kernel.normalized_hash(), task_fingerprint(task), options.model_dump_json())
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        key = self.key(kernel, task, options)
        with self._lock:
            row = self._conn.execute("SELECT data FROM evaluations WHERE key = ?", (key,)).fetchone()
        if row is not None:
            self.hits += 1
            return Evaluation.model_validate_json(row[0])
        evaluation = await self.inner.evaluate(kernel, task, options)
        if evaluation.status not in _NOT_KEPT:
            with self._lock:
                self._conn.execute(
                    "INSERT OR REPLACE INTO evaluations (key, data) VALUES (?, ?)",
                    (key, evaluation.model_dump_json()),
                )
        return evaluation

    async def aclose(self) -> None:
        with self._lock:
            self._conn.close()
        await self.inner.aclose()
