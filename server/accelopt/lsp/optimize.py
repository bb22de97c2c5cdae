"""Search sessions: one running (or finished) AccelOpt search per kernel, as the editor sees it.

A session owns an asyncio task that reads the SearchEvents of a search running in a child
process (search_process.py: the server's loop never shares the interpreter with search work)
and turns them into work-done progress, `accelopt/searchState` and `accelopt/candidates` notifications. The request
that started it only awaits the task (shielded), so cancelling the request ($/cancelRequest)
or the progress (window/workDoneProgress/cancel) asks the search to stop, and the session still
winds down cleanly: the search's final ranking, progress `end` and a last notification are sent.

Sessions live in the server's memory only: a restarted server starts with none (the memory DB,
written by the search itself, is the only thing that persists).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from lsprotocol import types

from accelopt.lsp.agents import AgentsRefused, check_agents
from accelopt.lsp.config import ServerSettings, hardware_for
from accelopt.lsp.edits import unified_diff
from accelopt.lsp.engine import build_task
from accelopt.lsp.protocol import (
    CandidateInfo,
    CandidatesNotification,
    OptimizeResult,
    SearchOptions,
    SearchPhase,
    SearchStateNotification,
    SearchTree,
    TreeNode,
)
from accelopt.lsp.search_process import SearchProcesses, search_events
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Candidate
from accelopt.search.config import SearchConfig
from accelopt.search.events import (
    CandidateEvent,
    CostEvent,
    Finished,
    IterationEvent,
    PlannerNotice,
    SearchEvent,
    Started,
)

log = logging.getLogger(__name__)

CANDIDATES = "accelopt/candidates"
SEARCH_STATE = "accelopt/searchState"
CANCEL_GRACE_S = 20.0  # how long a cancelled search may take to hand back its ranking before a kill


class SearchHost(Protocol):
    """What a session needs from the server (kept narrow so sessions are testable on their own)."""

    def notify(self, method: str, payload: dict[str, Any]) -> None: ...

    def search_progress(self, token: str | int, value: Any) -> None: ...

    def search_changed(self, uri: str) -> None: ...


class SearchRefused(Exception):
    """A search that cannot start (another search on the kernel, no inputs, ...): told to the user."""


def search_config(
    settings: ServerSettings, options: SearchOptions, search_id: str, kernel_text: str = ""
) -> SearchConfig:
    """The engine's SearchConfig: the configuration file's [search] (when the settings name one),
    overlaid by the editor's search settings, overlaid by the request's options."""
    from accelopt.agents.run_config import ConfigError, load_run_config

    try:
        base = (
            load_run_config(settings.agents.config_file).search
            if settings.agents.config_file
            else SearchConfig()
        )
    except ConfigError as exc:
        raise SearchRefused(str(exc)) from exc
    defaults = settings.search

    def pick(name: str) -> Any:
        requested = getattr(options, name)
        return requested if requested is not None else getattr(defaults, name)

    fields: dict[str, Any] = {
        "beam_width": pick("beam_width"),
        "plans_per_kernel": pick("plans_per_candidate"),
        "samples_per_plan": pick("samples_per_plan"),
        "iterations": pick("iterations"),
        "seed": pick("seed"),
        "seeds": defaults.correctness_seeds,
        "fix_attempts": defaults.fix_attempts,
        "evaluation_timeout_s": defaults.evaluation_timeout_s,
        "max_concurrent_evaluations": defaults.max_concurrent_evaluations,
        # an explicit editor setting, else the config file's, else the kernel's own target
        "hardware": base.hardware
        if settings.hardware == "auto" and "hardware" in base.model_fields_set
        else hardware_for(settings, kernel_text),
        "search_id": search_id,
        # the ranking the events carry must reach past the baseline to the whole list offered
        "ranked_limit": max(settings.max_candidates + 1, base.ranked_limit),
    }
    limits = {
        "max_dollars": pick("budget_usd"),
        "max_evaluations": pick("max_evaluations"),
        "max_wall_time_s": pick("wall_time_s"),
    }
    budget = {**base.budget.model_dump(), **{k: v for k, v in limits.items() if v is not None}}
    chosen = {k: v for k, v in fields.items() if v is not None}
    return SearchConfig.model_validate({**base.model_dump(), **chosen, "budget": budget})


@dataclass
class SearchSession:
    id: str
    uri: str
    kernel_name: str
    start_version: int | None
    start_text: str
    path: str
    backend: str
    hardware: str
    max_candidates: int
    token: str | int | None = None
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    ranking: list[str] = field(default_factory=list)  # the search's, from its latest event
    baseline_id: str | None = None
    rejected: set[str] = field(default_factory=set)
    running: bool = True
    iteration: int = 0
    total_iterations: int = 0
    beam: list[str] = field(default_factory=list)  # the latest iteration's survivors
    best_by_iteration: list[float] = field(default_factory=list)
    best_speedup: float | None = None
    dollars: float = 0.0
    agent_calls: str | None = None
    agent_failures: int = 0
    evaluations: int = 0
    result: OptimizeResult | None = None
    task: asyncio.Task[OptimizeResult] | None = None
    started_at: float = field(default_factory=time.monotonic)
    # told when a cancel is first asked for, so the editor can say "stopping" at once rather
    # than when the search has wound down (which takes as long as its evaluations in flight)
    on_cancel: Callable[[], None] | None = None
    _diffs: dict[str, str] = field(default_factory=dict)

    # -- what the client sees ------------------------------------------------------------------

    def ranked(self) -> list[Candidate]:
        """The search's ranking as the editor offers it: without the baseline (the kernel as it
        is) and the candidates the user rejected."""
        offered = [
            self.candidates[cid]
            for cid in self.ranking
            if cid != self.baseline_id and cid not in self.rejected and cid in self.candidates
        ]
        return offered[: self.max_candidates]

    def info(self, candidate: Candidate, rank: int) -> CandidateInfo:
        if candidate.id not in self._diffs:
            self._diffs[candidate.id] = unified_diff(self.start_text, candidate.kernel.text, self.path)
        return CandidateInfo(
            id=candidate.id,
            rank=rank,
            speedup=candidate.speedup,
            latency_ms=candidate.latency_ms,
            percent_of_peak=candidate.percent_of_peak,
            status=candidate.status,
            title=candidate.plan.title if candidate.plan else "",
            rationale=[plan.title for plan in candidate.rationale],
            text=candidate.kernel.text,
            diff=self._diffs[candidate.id],
            backend=candidate.profile.backend if candidate.profile else self.backend,
            hardware=candidate.profile.hardware if candidate.profile else self.hardware,
        )

    def tree(self) -> SearchTree:
        beam = set(self.beam)
        nodes = [
            TreeNode(
                id=c.id,
                parent_id=c.parent_id,
                iteration=c.iteration,
                title=c.plan.title if c.plan else "baseline",
                status=str(c.status),
                speedup=c.speedup,
                in_beam=c.id in beam,
                duplicate_of=c.duplicate_of,
            )
            for c in self.candidates.values()
            if c.id not in self.rejected
        ]
        return SearchTree(
            search_id=self.id,
            kernel_name=self.kernel_name,
            running=self.running,
            iteration=self.iteration,
            total_iterations=self.total_iterations,
            nodes=nodes,
            best_by_iteration=list(self.best_by_iteration),
        )

    def notification(self) -> CandidatesNotification:
        return CandidatesNotification(
            search_id=self.id,
            uri=self.uri,
            kernel_name=self.kernel_name,
            document_version=self.start_version,
            running=self.running,
            candidates=[self.info(c, rank) for rank, c in enumerate(self.ranked(), start=1)],
        )

    def state(self, state: SearchPhase, message: str = "") -> SearchStateNotification:
        return SearchStateNotification(
            search_id=self.id,
            uri=self.uri,
            kernel_name=self.kernel_name,
            state=state,
            iteration=self.iteration,
            total_iterations=self.total_iterations,
            best_speedup=self.best_speedup,
            dollars=self.dollars,
            message=message,
        )

    @property
    def stopping(self) -> bool:
        """Asked to stop, still winding down."""
        return self.running and self.cancel_event.is_set()

    def iteration_label(self) -> str:
        """The iteration as a person counts it, e.g. "iteration 2 of 16": the one under way while
        running (`iteration` counts the completed ones, as the events do), the last completed
        one once finished. The VS Code client words its progress notification the same way."""
        if self.total_iterations <= 0:
            return "starting"
        current = min(self.iteration + 1, self.total_iterations) if self.running else self.iteration
        return f"iteration {current} of {self.total_iterations}"

    def progress_message(self) -> str:
        best = f"best {self.best_speedup:.2f}×" if self.best_speedup else "no faster kernel yet"
        parts = [self.iteration_label(), best, f"{self.evaluations} evaluated"]
        if self.dollars > 0:  # offline agents cost nothing: "$0.00" would only be noise
            parts.append(f"${self.dollars:.2f}")
        return " · ".join(parts)

    def cancel(self, why: str) -> None:
        if self.running and not self.cancel_event.is_set():
            log.info("search %s: cancel requested (%s)", self.id, why)
            self.cancel_event.set()
            if self.on_cancel is not None:
                self.on_cancel()


class SearchManager:
    def __init__(self, settings: Callable[[], ServerSettings], host: SearchHost) -> None:
        self.processes = SearchProcesses(keep_spare=False)
        self._settings = settings
        self._host = host
        self.sessions: dict[str, SearchSession] = {}

    def running_for(self, uri: str, kernel_name: str) -> SearchSession | None:
        return next(
            (
                s
                for s in self.sessions.values()
                if s.running and s.uri == uri and s.kernel_name == kernel_name
            ),
            None,
        )

    def latest_for(self, uri: str, kernel_name: str) -> SearchSession | None:
        matching = [s for s in self.sessions.values() if s.uri == uri and s.kernel_name == kernel_name]
        return max(matching, key=lambda s: s.started_at) if matching else None

    async def start(
        self,
        *,
        uri: str,
        kernel_name: str,
        text: str,
        version: int | None,
        path: str,
        options: SearchOptions,
        token: str | int | None,
    ) -> SearchSession:
        running = self.running_for(uri, kernel_name)
        if running is not None:
            doing = "is still stopping" if running.stopping else "is already running"
            raise SearchRefused(f"a search on `{kernel_name}` {doing}")
        settings = self._settings()
        kernel = KernelSource(text=text, name=kernel_name, path=path)
        try:
            task = await asyncio.to_thread(build_task, kernel, settings.input_size)
        except Exception as exc:
            raise SearchRefused(
                f"cannot optimize `{kernel_name}`: {getattr(exc, 'message', None) or exc}"
            ) from exc
        search_id = uuid.uuid4().hex[:12]
        config = search_config(settings, options, search_id, text)
        session = SearchSession(
            id=search_id,
            uri=uri,
            kernel_name=kernel_name,
            start_version=version,
            start_text=text,
            path=path,
            backend=settings.backend,
            hardware=config.hardware,
            max_candidates=settings.max_candidates,
            token=token,
            total_iterations=config.iterations,
            on_cancel=lambda: self._host.search_changed(uri),
        )
        agents_mode = options.agents or settings.agents.mode
        try:
            check_agents(settings.agents, agents_mode)
        except AgentsRefused as exc:
            raise SearchRefused(str(exc)) from exc
        from accelopt.lsp.search_job import SearchJob  # Task is imported by now (build_task)

        job = SearchJob(
            kernel=kernel,
            task=task,
            config=config,
            agents=settings.agents,
            agents_mode=agents_mode,
            backend=settings.backend,
            workers=settings.search.max_concurrent_evaluations or 2,
            memory_path=settings.memory_path,
            ray=settings.ray,
        )
        self.sessions[search_id] = session
        child = await self.processes.take()
        events = search_events(job, session.cancel_event, child, grace_s=CANCEL_GRACE_S)
        session.task = asyncio.create_task(self._drive(session, events), name=f"search-{search_id}")
        return session

    async def _drive(self, session: SearchSession, events: AsyncIterator[SearchEvent]) -> OptimizeResult:
        host = self._host
        if session.token is not None:
            host.search_progress(
                session.token,
                types.WorkDoneProgressBegin(
                    title=f"AccelOpt: optimizing {session.kernel_name}",
                    cancellable=True,
                    message="planning",
                    percentage=0,
                ),
            )
        host.notify(SEARCH_STATE, _wire(session.state("started")))
        host.search_changed(session.uri)
        reason, message, finished = "error", "", False
        try:
            async for event in events:
                done = self._apply(session, event)
                if done is not None:
                    (reason, message), finished = done, True
        except asyncio.CancelledError:
            # The server is shutting down: the search process is killed with the consumer.
            if not finished:
                reason, message = "cancelled", "stopped before the search could report"
        except Exception as exc:
            log.exception("search %s failed", session.id)
            if not finished:
                reason, message = "error", f"{type(exc).__name__}: {exc}"
        finally:
            session.running = False
        session.result = OptimizeResult(
            search_id=session.id,
            reason=reason,
            message=message,
            best_speedup=session.best_speedup,
            candidates=len(session.ranked()),
            agent_calls=session.agent_calls,
            agent_failures=session.agent_failures,
        )
        if session.token is not None:
            host.search_progress(
                session.token, types.WorkDoneProgressEnd(message=f"{reason}: {session.progress_message()}")
            )
        host.notify(CANDIDATES, _wire(session.notification()))
        host.notify(SEARCH_STATE, _wire(session.state("finished", f"{reason}. {message}".strip())))
        host.search_changed(session.uri)
        return session.result

    def _apply(self, session: SearchSession, event: SearchEvent) -> tuple[str, str] | None:
        """Fold one SearchEvent into the session and tell the client; returns (reason, message)
        for the Finished event."""
        host = self._host
        if isinstance(event, Started):
            session.baseline_id = event.baseline.id
            session.candidates[event.baseline.id] = event.baseline
        elif isinstance(event, CandidateEvent):
            candidate = event.candidate
            session.candidates[candidate.id] = candidate
            session.ranking = event.ranking
            # evaluations the backend ran: a duplicate of an earlier kernel or an agent's failure
            # costs none (counting them made the figure drop at the Finished event)
            if candidate.status not in ("pending", "agent_error") and candidate.duplicate_of is None:
                session.evaluations += 1
            if (
                candidate.status == "ok"
                and candidate.speedup is not None
                and candidate.id != session.baseline_id
            ):
                session.best_speedup = max(session.best_speedup or 0.0, candidate.speedup)
                host.notify(CANDIDATES, _wire(session.notification()))
            self._report(session)
        elif isinstance(event, IterationEvent):
            session.beam = list(event.beam)
            session.best_by_iteration.append(event.best_speedup)
            session.iteration = event.iteration
            session.total_iterations = event.total_iterations
            session.evaluations = max(session.evaluations, event.evaluations)
            if event.best_speedup and event.best_speedup > 1.0:
                session.best_speedup = max(session.best_speedup or 0.0, event.best_speedup)
            self._report(session)
            host.notify(SEARCH_STATE, _wire(session.state("iteration")))
            host.search_changed(session.uri)
        elif isinstance(event, PlannerNotice):
            # How the planner changed course (the offline catalogue ran dry, the tuner took over):
            # the state line the editor shows, with the search still iterating.
            host.notify(
                SEARCH_STATE, _wire(session.state("iteration", f"{event.candidate_id}: {event.message}"))
            )
        elif isinstance(event, CostEvent):
            session.dollars = event.dollars
        elif isinstance(event, Finished):
            for ranked in event.ranked:
                session.candidates[ranked.candidate.id] = ranked.candidate
            session.ranking = [ranked.candidate.id for ranked in event.ranked]
            session.evaluations = event.evaluations
            if event.endpoint.calls:
                session.agent_calls, session.agent_failures = event.endpoint.describe(), event.endpoint.failed
            return event.reason, event.message
        return None

    def _report(self, session: SearchSession) -> None:
        if session.token is None:
            return
        total = max(session.total_iterations, 1)
        self._host.search_progress(
            session.token,
            types.WorkDoneProgressReport(
                message=session.progress_message(),
                percentage=min(100, int(100 * session.iteration / total)),
                cancellable=True,
            ),
        )

    def cancel_all(self, why: str) -> None:
        for session in self.sessions.values():
            session.cancel(why)

    async def shutdown(self) -> None:
        """Stop every search (the server is going away): ask, then wait a little, then force."""
        for session in self.sessions.values():
            session.on_cancel = None  # no lens refreshes for an editor that is shutting us down
        self.cancel_all("server shutting down")
        tasks = [s.task for s in self.sessions.values() if s.task is not None and not s.task.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5.0)
            for t in pending:
                t.cancel()
        await self.processes.close()


def _wire(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json")
