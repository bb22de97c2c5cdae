"""Searches started by `optimize_kernel`: each runs the engine's beam search (`run_search`) in a
task of its own, so a tool call that is cancelled only *asks* it to stop (the search's own cancel
event) and the search still winds down with its ranking, which `get_search` and `get_candidate`
read afterwards. Same agents, backend, memory and budgets as `accelopt optimize`.

Searches live in this process only (a restarted server starts with none); the lessons they
learn go to the optimization memory, which persists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from accelopt.mcp.edits import unified_diff
from accelopt.mcp.kernels import KernelInputError
from accelopt.mcp.models import CandidateSummary, OptimizeResult
from accelopt.mcp.reports import backend_label
from accelopt.mcp.settings import McpSettings
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import bound_in_words
from accelopt.profiling.task import Task
from accelopt.search.candidate import Candidate
from accelopt.search.config import SearchConfig
from accelopt.search.events import Finished, SearchEvent

log = logging.getLogger(__name__)

# The share of the first iteration's progress that judging the original kernel stands for.
_BASELINE_SHARE = 0.05
# The share of an iteration its planned evaluations stand for; fixes and extra samples beyond the
# plan move the bar on without ever reaching the next iteration before its IterationEvent.
_PLANNED_SHARE = 0.9


# The last part of the bar, left for the search's wind-down (lessons, final ranking), so that its
# end is always a notification of its own, saying how it finished.
_WIND_DOWN_SHARE = 0.01


def _iteration_share(evaluated: int, planned: int) -> float:
    """Strictly increasing in `evaluated`, below 1 however many evaluations an iteration takes."""
    planned = max(planned, 1)
    if evaluated <= planned:
        return _PLANNED_SHARE * evaluated / planned
    return _PLANNED_SHARE + (1 - _PLANNED_SHARE) * (1 - planned / evaluated)


Progress = tuple[float, float, str]  # progress, total, message: an MCP progress notification


class UnknownSearch(KernelInputError):
    """No search (or candidate) by that id in this server."""


@dataclass
class SearchRun:
    id: str
    kernel: KernelSource
    config: SearchConfig
    agents: str
    backend: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    baseline_id: str | None = None
    ranking: list[str] = field(default_factory=list)  # the search's ranking: candidate ids, fastest first
    finished: Finished | None = None
    failure: str | None = None
    lessons: int = 0
    iteration: int = 0
    beam_size: int = 1
    # candidates judged (they move the progress bar, against the iteration's planned count) and,
    # among them, evaluations the backend really ran: a duplicate of an earlier kernel or an
    # agent's failure costs none, and the figure must never exceed the Finished event's
    judged: int = 0
    judged_before_iteration: int = 0
    evaluated: int = 0
    best_speedup: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    _listeners: list[asyncio.Queue[Progress | None]] = field(default_factory=list)
    _reported: float | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    # -- following the search -----------------------------------------------------------------

    def follow(self) -> AsyncIterator[Progress]:
        """The search's progress from this call on, one step per event that moved it, until it
        ends. Each step is taken when its event is folded in, so a slow reader still sees every
        one; the queue is registered here, not at the first iteration, so none is missed."""
        queue: asyncio.Queue[Progress | None] = asyncio.Queue()
        if not self.running:
            queue.put_nowait(None)
        else:
            self._listeners.append(queue)
        return self._drain(queue)

    async def _drain(self, queue: asyncio.Queue[Progress | None]) -> AsyncIterator[Progress]:
        try:
            while (step := await queue.get()) is not None:
                yield step
        finally:
            if queue in self._listeners:
                self._listeners.remove(queue)

    def apply(self, event: SearchEvent) -> None:
        if event.kind == "started":
            self.baseline_id = event.baseline.id
            self.candidates[event.baseline.id] = event.baseline
        elif event.kind == "candidate":
            candidate = event.candidate
            self.candidates[candidate.id] = candidate
            self.ranking = event.ranking
            if candidate.status != "pending":
                self.judged += 1
                if candidate.status != "agent_error" and candidate.duplicate_of is None:
                    self.evaluated += 1
            if (
                candidate.id in self.ranking
                and candidate.id != self.baseline_id
                and (candidate.speedup or 0.0) > 1.0
            ):
                self.best_speedup = max(self.best_speedup or 0.0, candidate.speedup or 0.0)
        elif event.kind == "iteration":
            self.iteration = event.iteration
            self.beam_size = max(1, len(event.beam))
            self.judged_before_iteration = self.judged
            self.evaluated = max(self.evaluated, event.evaluations)
        elif event.kind == "lesson":
            self.lessons += 1
        elif event.kind == "finished":
            self.finished = event
            for item in event.ranked:
                self.candidates[item.candidate.id] = item.candidate
            self.ranking = [item.candidate.id for item in event.ranked]
        step = self.progress()
        if step is not None:
            for queue in self._listeners:
                queue.put_nowait(step)

    def close_listeners(self) -> None:
        for queue in self._listeners:
            queue.put_nowait(None)

    def progress(self) -> Progress | None:
        """(progress, total, message) in iterations, or None when the progress has not moved
        since the last call (MCP progress must increase with every notification)."""
        total = float(max(self.config.iterations, 1))
        if self.finished is not None:
            done = total
        else:
            planned = self.beam_size * self.config.plans_per_kernel * self.config.samples_per_plan
            judged = 0.0 if self.baseline_id is None or self.iteration > 0 else _BASELINE_SHARE
            within = judged + (1 - judged) * _iteration_share(
                self.judged - self.judged_before_iteration, planned
            )
            done = min(self.iteration + within, total - _WIND_DOWN_SHARE)
        if self._reported is not None and done <= self._reported:
            return None
        self._reported = done
        current = min(self.iteration + 1, self.config.iterations)
        stage = (
            f"finished ({self.finished.reason})"
            if self.finished is not None
            else "evaluating the original kernel"
            if self.baseline_id is None
            else f"iteration {current} of {self.config.iterations}"
        )
        best = f"best {self.best_speedup:.2f}x faster" if self.best_speedup else "no faster kernel yet"
        message = f"search {self.id}: {stage} · {best} · {self.evaluated} evaluated"
        if self.cancel.is_set() and self.finished is None:
            message += " · stopping"
        return done, total, message

    # -- results ------------------------------------------------------------------------------

    def ranked(self) -> list[Candidate]:
        """The search's own ranking (the latest an event carried; the final one once finished),
        without the original kernel."""
        return [
            self.candidates[cid] for cid in self.ranking if cid != self.baseline_id and cid in self.candidates
        ]

    def rank_of(self, candidate_id: str) -> int | None:
        return next((i for i, c in enumerate(self.ranked(), start=1) if c.id == candidate_id), None)

    def candidate(self, candidate_id: str) -> Candidate:
        if candidate_id == "best":
            ranked = self.ranked()
            if not ranked:
                raise UnknownSearch(f"search {self.id} has no correct candidate faster than the original yet")
            return ranked[0]
        found = self.candidates.get(candidate_id)
        if found is None:
            known = ", ".join(c.id for c in self.ranked()[:10]) or "none ranked yet"
            raise UnknownSearch(f"search {self.id} has no candidate '{candidate_id}' (ranked: {known})")
        return found

    def result(self, max_candidates: int) -> OptimizeResult:
        baseline = self.candidates.get(self.baseline_id or "")
        label = backend_label(self.backend, self.config.hardware)
        if baseline is not None and baseline.profile is not None:
            label = baseline.profile.label
        summaries = [
            self._summary(rank, c, label) for rank, c in enumerate(self.ranked()[:max_candidates], 1)
        ]
        finished = self.finished
        reason = finished.reason if finished is not None else "running"
        message = finished.message if finished is not None else ""
        if self.failure:
            reason, message = "error", self.failure
        return OptimizeResult(
            search_id=self.id,
            kernel_name=self.kernel.name,
            path=self.kernel.path,
            running=self.running,
            reason=reason,
            message=message,
            agents=self.agents,
            backend_label=label,
            baseline_latency_us=round(baseline.latency_ms * 1e3, 4)
            if baseline and baseline.latency_ms
            else None,
            baseline_percent_of_peak=(
                round(100 * baseline.percent_of_peak, 2)
                if baseline and baseline.percent_of_peak is not None
                else None
            ),
            best_speedup=self.best_speedup,
            evaluations=finished.evaluations if finished is not None else self.evaluated,
            wall_time_s=round(
                finished.wall_time_s if finished is not None else time.monotonic() - self.started_at, 3
            ),
            lessons_learned=self.lessons,
            candidates=summaries,
            note=(
                "Nothing was written to disk. To adopt a candidate, read it with get_candidate "
                "(its text, diff and line edits) and apply the edit to the file yourself."
            ),
        )

    def _summary(self, rank: int, candidate: Candidate, label: str) -> CandidateSummary:
        profile = candidate.profile
        return CandidateSummary(
            rank=rank,
            id=candidate.id,
            speedup=round(candidate.speedup or 0.0, 4),
            latency_us=round((candidate.latency_ms or 0.0) * 1e3, 4),
            percent_of_peak=(
                round(100 * candidate.percent_of_peak, 2) if candidate.percent_of_peak is not None else None
            ),
            bound=bound_in_words(profile.bound) if profile is not None else None,
            title=candidate.plan.title if candidate.plan else "",
            rationale=[plan.title for plan in candidate.rationale],
            diff=unified_diff(self.kernel.text, candidate.kernel.text, self.kernel.path),
            backend_label=profile.label if profile is not None else label,
        )


class Searches:
    """The searches of this server, newest last; finished ones beyond `kept` are forgotten."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self._runs: OrderedDict[str, SearchRun] = OrderedDict()

    def get(self, search_id: str | None) -> SearchRun:
        if search_id is None:
            if not self._runs:
                raise UnknownSearch("no search has been started in this server yet")
            return next(reversed(self._runs.values()))
        run = self._runs.get(search_id)
        if run is None:
            known = ", ".join(self._runs) or "none"
            raise UnknownSearch(f"no search '{search_id}' in this server (searches: {known})")
        return run

    async def start(
        self, kernel: KernelSource, task: Task, config: SearchConfig, agents_kind: str
    ) -> SearchRun:
        """Refused (KernelInputError) when the agents or the backend cannot be made."""
        from accelopt.agents.factory import AgentsUnavailable, make_agents
        from accelopt.profiling.ray_backend import backend_for

        try:
            agents = make_agents(self.settings.run.llm, kind=agents_kind, seed=config.seed)  # type: ignore[arg-type]
        except AgentsUnavailable as exc:
            raise KernelInputError(str(exc)) from exc
        try:
            backend = backend_for(
                self.settings.run.backend,
                max_workers=config.max_concurrent_evaluations,
                ray=self.settings.run.ray,
            )
        except (ValueError, RuntimeError) as exc:
            raise KernelInputError(f"backend {self.settings.run.backend!r}: {exc}") from exc
        search_id = config.search_id or uuid.uuid4().hex[:12]
        config = config.model_copy(update={"search_id": search_id})
        run = SearchRun(id=search_id, kernel=kernel, config=config, agents=agents.name, backend=backend.name)
        self._runs[search_id] = run
        self._forget_old()
        run.task = asyncio.create_task(
            self._drive(run, task, agents, backend), name=f"mcp-search-{search_id}"
        )
        return run

    async def _drive(self, run: SearchRun, task: Task, agents: Any, backend: Any) -> None:
        from accelopt.agents.factory import aclose_agents
        from accelopt.search.beam import run_search

        memory = self._open_memory()
        try:
            async for event in run_search(
                run.kernel, task, agents, backend, run.config, memory=memory, cancel=run.cancel
            ):
                run.apply(event)
        except Exception as exc:  # a defect: the tool call still answers, with what there is
            log.exception("search %s failed", run.id)
            run.failure = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                with contextlib.suppress(Exception):
                    await backend.aclose()
                with contextlib.suppress(Exception):
                    await aclose_agents(agents)
                if memory is not None:
                    memory.close()
            finally:
                run.close_listeners()

    def _open_memory(self) -> Any:
        if not self.settings.use_memory:
            return None
        from accelopt.search.memory import Memory, MemoryUnavailable

        try:
            return Memory(self.settings.run.memory)
        except (MemoryUnavailable, OSError) as exc:
            log.warning("optimization memory unavailable, searching without it: %s", exc)
            return None

    def _forget_old(self) -> None:
        finished = [key for key, run in self._runs.items() if not run.running]
        while len(self._runs) > self.settings.kept_searches and finished:
            self._runs.pop(finished.pop(0), None)

    async def aclose(self) -> None:
        running = [run for run in self._runs.values() if run.running]
        for run in running:
            run.cancel.set()
        await asyncio.gather(*(run.task for run in running if run.task is not None), return_exceptions=True)
