"""The AccelOpt beam search.

One iteration: for each kernel of the beam, the planner proposes N one-step plans (N
independent calls, concurrently); the executor writes K kernels per plan; every kernel is
evaluated by the backend (correctness on the task's seeds, then its profile); failing kernels go
to the fixer up to F times; the summarizer turns the clearest before→after pairs into lessons for
the memory; the next beam is the fastest B correct kernels among parents and children.

Everything streams out as `SearchEvent`s and the last event is always `Finished` with a ranked
list, whether the search completed, hit a budget, stopped early or was cancelled.

Two ways of stopping:
- *soft* (budgets on dollars, tokens and evaluations; repeated agent failures): no new agent call
  or evaluation starts, the ones in flight finish and their results count;
- *hard* (cancellation, wall-time budget): everything in flight is cancelled; the backend kills
  its workers when an evaluation is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.search.budget import Spending
from accelopt.search.cache import EvaluationCache
from accelopt.search.candidate import Candidate, Experience, Plan
from accelopt.search.claims import IterationClaims
from accelopt.search.config import SearchConfig, fixable
from accelopt.search.events import (
    CandidateEvent,
    CostEvent,
    Finished,
    IterationEvent,
    LessonEvent,
    PlannerNotice,
    SearchEvent,
    Started,
    StopReason,
)
from accelopt.search.kernel_text import kernel_family
from accelopt.search.memory import IN_MEMORY, Memory, MemoryUnavailable
from accelopt.search.roles import (
    AgentOutput,
    Agents,
    ExecuteRequest,
    ExecuteResult,
    FixRequest,
    PlanRequest,
    PlanResult,
    SummarizeRequest,
    SummarizeResult,
)
from accelopt.search.selection import Pair, Ranking, is_ranked, next_beam, select_experiences

if TYPE_CHECKING:
    from accelopt.profiling.task import Task

log = logging.getLogger(__name__)

R = TypeVar("R", bound=AgentOutput)
Q = TypeVar("Q", bound=BaseModel)


class _Stopped(Exception):
    """Raised inside a branch of work when the search is stopping: the branch just ends."""


async def run_search(
    kernel: KernelSource,
    task: Task,
    agents: Agents,
    backend: Backend,
    config: SearchConfig,
    memory: Memory | None = None,
    cancel: asyncio.Event | None = None,
) -> AsyncIterator[SearchEvent]:
    """Optimize `kernel` for `task`; see the module docstring. Cancelling the consuming task has
    the same effect as setting `cancel`: the generator still yields the final `Finished`
    (reason "cancelled") and re-raises the cancellation if it is resumed after it."""
    search = _Search(kernel, task, agents, backend, config, memory)
    async for event in search.events(cancel):
        yield event


class _Search:
    def __init__(
        self,
        kernel: KernelSource,
        task: Task,
        agents: Agents,
        backend: Backend,
        config: SearchConfig,
        memory: Memory | None,
    ) -> None:
        self.kernel = kernel
        self.task = task
        self.agents = agents
        self.backend = backend
        self.config = config
        self.search_id = config.search_id or uuid.uuid4().hex[:12]
        self.owns_memory = memory is None
        self.memory = memory if memory is not None else Memory(IN_MEMORY)
        self.family = kernel_family(kernel.name)
        self.task_name = task.name or kernel.name
        self.backend_name = backend.name
        self.spending = Spending(config.budget)
        self.cache = EvaluationCache()
        self.first_with_key: dict[tuple[str, ...], str] = {}
        self.candidates: list[Candidate] = []
        self.ranking = Ranking()
        self._made: dict[str, int] = {}  # candidate id -> its place in creation order
        self.baseline: Candidate | None = None
        self.stop_reason: StopReason | None = None
        self.stop_message = ""
        self.agent_failures_in_a_row = 0
        self._next_id = 0
        self._queue: asyncio.Queue[SearchEvent | None] = asyncio.Queue()
        self._driver: asyncio.Task[None] | None = None
        self._started = False
        self._agent_slots = asyncio.Semaphore(config.max_concurrent_agent_calls)
        self._eval_slots = asyncio.Semaphore(config.max_concurrent_evaluations)
        self._judged: list[str] = []  # kernels judged before the current iteration (PlanRequest.judged)
        self._notices: set[tuple[int, str, str]] = set()  # (iteration, candidate id, message) said
        # Beam kernels whose planner could write nothing new (PlanResult.exhausted on proposal 0),
        # with the planner's reason, per iteration: once every beam kernel is so, the search stops.
        self._dry: dict[int, dict[str, str]] = {}
        self._claims = IterationClaims((), branches=0, first_proposal=0)  # the current iteration's

    # -- the event stream ---------------------------------------------------------------------

    async def events(self, cancel: asyncio.Event | None) -> AsyncIterator[SearchEvent]:
        self._driver = asyncio.create_task(self._drive(), name=f"accelopt-search-{self.search_id}")
        watchers = [asyncio.create_task(self._watch_cancel(cancel))] if cancel is not None else []
        if self.config.budget.max_wall_time_s is not None:
            watchers.append(asyncio.create_task(self._watch_clock(self.config.budget.max_wall_time_s)))
        consumer_cancelled = False
        try:
            while True:
                try:
                    event = await self._queue.get()
                except asyncio.CancelledError:
                    # The consuming task was cancelled: stop everything, then still hand back
                    # the events produced so far and the final ranking.
                    consumer_cancelled = True
                    self._halt("cancelled", "the search was cancelled")
                    await self._wait_driver()
                    continue
                if event is None:
                    break
                yield event
        finally:
            for watcher in watchers:
                watcher.cancel()
            if not self._driver.done():
                self._halt("cancelled", "the search was closed before it finished")
                await self._wait_driver()
            if self.owns_memory:
                self.memory.close()
        if consumer_cancelled:
            raise asyncio.CancelledError

    async def _wait_driver(self) -> None:
        assert self._driver is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._driver)
        # A second cancellation of the consumer while it waited: wait again, the driver is
        # already stopping and only has to finish its clean-up.
        while not self._driver.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._driver)

    async def _watch_cancel(self, cancel: asyncio.Event) -> None:
        await cancel.wait()
        self._halt("cancelled", "the search was cancelled")

    async def _watch_clock(self, limit_s: float) -> None:
        await asyncio.sleep(max(limit_s - self.spending.elapsed_s, 0.0))
        self._halt("budget", f"wall-time budget reached: {limit_s:g} s")

    def _emit(self, event: SearchEvent) -> None:
        self._queue.put_nowait(event)

    def _stop(self, reason: StopReason, message: str) -> None:
        """Soft stop: nothing new starts; work in flight finishes."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_message = reason, message
            log.info("search %s stopping (%s): %s", self.search_id, reason, message)

    def _halt(self, reason: StopReason, message: str) -> None:
        """Hard stop: cancel everything in flight."""
        self._stop(reason, message)
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()

    async def _drive(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            self._stop("cancelled", "the search was cancelled")
        except Exception as exc:  # a defect or a broken backend: still finish with a ranking
            log.exception("search %s failed", self.search_id)
            self._stop("error", f"{type(exc).__name__}: {exc}")
        finally:
            self._emit_started()  # stopped before the baseline was judged: its status is "pending"
            self._emit(self._finished())
            self._queue.put_nowait(None)

    def _emit_started(self) -> None:
        if self._started:
            return
        self._started = True
        baseline = self.baseline or self._new_candidate(None, None, self.kernel, iteration=0)
        self._emit(
            Started(
                search_id=self.search_id,
                kernel_name=self.kernel.name,
                backend=self.backend_name,
                hardware=self.config.hardware,
                agents=self.agents.name,
                baseline=baseline,
                config=self.config,
            )
        )

    def _finished(self) -> Finished:
        reason = self.stop_reason or "completed"
        message = self.stop_message
        endpoint = self.spending.endpoint
        if endpoint.calls and not endpoint.succeeded and reason in ("completed", "early_stop"):
            # Nothing the agents said was usable: that is a failure of the run, not a completion.
            reason, message = "error", f"no agent call succeeded: {endpoint.describe()}"
        return Finished(
            search_id=self.search_id,
            reason=reason,
            message=message,
            ranked=self.ranking.ranked(self.config.ranked_limit),
            evaluations=self.spending.evaluations,
            wall_time_s=self.spending.elapsed_s,
            endpoint=self.spending.endpoint.model_copy(deep=True),
        )

    # -- the loop -----------------------------------------------------------------------------

    async def _loop(self) -> None:
        cfg = self.config
        baseline = self._new_candidate(None, None, self.kernel, iteration=0)
        self.baseline = baseline
        evaluation = await self._run_backend(baseline.kernel, budgeted=False)  # runs whatever the budget
        self._apply(baseline, evaluation)
        baseline.speedup = 1.0 if baseline.status == "ok" else None
        self._remember(baseline, evaluation)
        self._emit_started()
        if not is_ranked(baseline):
            where = f" (line {baseline.line})" if baseline.line else ""
            self._stop(
                "error", f"the baseline kernel does not pass: {baseline.status}{where}: {baseline.message}"
            )
            return

        beam = [baseline]
        best = baseline
        stale = 0
        for iteration in range(1, cfg.iterations + 1):
            if self._limits_reached():
                return
            children, pairs = await self._iteration(iteration, beam)
            dry = self._dry.get(iteration, {})
            if not children and beam and all(c.id in dry for c in beam):
                reasons = "; ".join(f"{c.id}: {dry[c.id]}" for c in beam)
                self._stop("completed", f"no new kernel to judge from any beam kernel ({reasons})")
                return
            beam = next_beam(beam, children, cfg.beam_width)
            if not self.stop_reason:
                await self._learn(children, pairs)
            leader = beam[0]
            improved = (
                leader.latency_ms is not None
                and best.latency_ms is not None
                and leader.latency_ms < best.latency_ms
            )
            best = leader if improved else best
            stale = 0 if improved else stale + 1
            self._emit(
                IterationEvent(
                    search_id=self.search_id,
                    iteration=iteration,
                    total_iterations=cfg.iterations,
                    best_speedup=best.speedup or 1.0,
                    best_percent_of_peak=best.percent_of_peak,
                    beam=[c.id for c in beam],
                    evaluations=self.spending.evaluations,
                )
            )
            self._emit_cost()
            if self.stop_reason:
                return
            if (
                cfg.target_percent_of_peak is not None
                and (best.percent_of_peak or 0.0) >= cfg.target_percent_of_peak
            ):
                self._stop(
                    "target_reached", f"{best.id} reached {100 * (best.percent_of_peak or 0):.1f}% of peak"
                )
                return
            if cfg.patience is not None and stale >= cfg.patience:
                self._stop("early_stop", f"no faster kernel in the last {stale} iteration(s)")
                return
        self._stop("completed", f"{cfg.iterations} iteration(s) done")

    def _limits_reached(self) -> bool:
        if self.stop_reason:
            return True
        why = self.spending.exhausted()
        if why:
            self._stop("budget", why)
        return why is not None

    async def _iteration(self, iteration: int, beam: list[Candidate]) -> tuple[list[Candidate], list[Pair]]:
        # The lessons for every beam kernel are read first, in beam order, so that the branches
        # start in the same best-first order with the memory on or off (a lookup per branch
        # finished in whatever order its thread did, and the order decides which branch's
        # evaluations come first under the budget).
        lookups = await asyncio.to_thread(lambda: [self._experiences_for(parent) for parent in beam])
        self._judged = sorted(
            {
                c.kernel.normalized_hash()
                for c in self.candidates
                if c.status not in ("pending", "agent_error")
            }
        )
        n = self.config.plans_per_kernel
        self._claims = IterationClaims(self.first_with_key, branches=len(beam) * n, first_proposal=n)
        branches = await _gather_all(
            [
                self._expand(iteration, index, parent, experiences)
                for index, (parent, experiences) in enumerate(zip(beam, lookups, strict=True))
            ]
        )
        children = [c for branch in branches for c in branch]
        pairs = [
            Pair(before=self._by_id(c.parent_id), after=c)
            for c in children
            if is_ranked(c) and c.parent_id is not None and c.duplicate_of is None
        ]
        return children, pairs

    async def _expand(
        self, iteration: int, index: int, parent: Candidate, experiences: list[Experience]
    ) -> list[Candidate]:
        branches = await _gather_all(
            [
                self._plan_branch(iteration, index, n, parent, experiences)
                for n in range(self.config.plans_per_kernel)
            ]
        )
        return [c for branch in branches for c in branch]

    def _experiences_for(self, parent: Candidate) -> list[Experience]:
        try:
            return self.memory.select_for_prompt(
                parent.kernel,
                parent.profile,
                limit=self.config.memory_in_prompt,
                hardware=self.config.hardware,
            )
        except (MemoryUnavailable, sqlite3.Error, OSError) as exc:
            log.warning("optimization memory unavailable, planning without it: %s", exc)
            return []

    async def _plan_branch(
        self, iteration: int, index: int, n: int, parent: Candidate, experiences: list[Experience]
    ) -> list[Candidate]:
        slot = index * self.config.plans_per_kernel + n
        try:
            written = await self._propose(iteration, index, n, parent, experiences)
            if isinstance(written, list):
                return written  # the planner had nothing, or the agents failed: recorded as such
            plan, kernels, notes, failures = written
            # Fewer kernels than K, with no error: the plan has fewer variants than samples asked
            # (a single-variant rewrite); the slots left go to this beam kernel's next plans.
            unfilled = self.config.samples_per_plan - len(kernels) - len(failures)
            # Claimed in the iteration's order (claims.py): a kernel an earlier plan wrote is
            # replaced by this beam kernel's next plan.
            await self._claims.wait_turn(slot)
            chosen = await self._claim(iteration, index, parent, experiences, plan, kernels, notes, unfilled)
        except _Stopped:
            return []
        finally:
            self._claims.done(slot)
        try:
            chains = await _gather_all(
                [
                    self._evaluate_and_fix(iteration, parent, chosen_plan, kernel, chosen_notes, experiences)
                    for chosen_plan, kernel, chosen_notes in chosen
                ]
            )
        except _Stopped:
            return []
        return failures + [c for chain in chains for c in chain]

    async def _propose(
        self, iteration: int, index: int, n: int, parent: Candidate, experiences: list[Experience]
    ) -> tuple[Plan, list[tuple[Plan, KernelSource]], list[str], list[Candidate]] | list[Candidate]:
        """Plan `n` for `parent`, the kernels the executor wrote for it (each with the plan it
        realises), the agents' notes and the samples it failed to write; or, when it wrote no
        kernel, the candidates that record why."""
        seed = self._seed(iteration, index, n)
        planned = await self._plan(iteration, parent, experiences, n, seed)
        if planned.exhausted and not planned.plans:
            if n == 0:
                self._dry.setdefault(iteration, {})[parent.id] = planned.notice or "nothing new"
            return []
        if planned.error or not planned.plans:
            failure = self._new_candidate(parent, None, parent.kernel, iteration=iteration)
            self._fail(failure, f"planner: {planned.error or 'no plan in the reply'}", planned.notes)
            return [failure]
        plan = planned.plans[0]
        written = await self._execute(parent, plan, experiences, self.config.samples_per_plan, seed)
        notes = [*planned.notes, *written.notes]
        kernels = written.kernels[: self.config.samples_per_plan]
        # Samples the executor could not write (an LLM call failed) are recorded as failed
        # candidates; an executor that simply has fewer variants to offer is not at fault.
        missing = self.config.samples_per_plan - len(kernels) if written.error else 0
        failures = [
            self._new_candidate(parent, plan, parent.kernel, iteration=iteration) for _ in range(missing)
        ]
        for failure in failures:
            self._fail(failure, f"executor: {written.error or 'no kernel in the reply'}", notes)
        if not kernels and not failures:
            failure = self._new_candidate(parent, plan, parent.kernel, iteration=iteration)
            self._fail(failure, "executor: no kernel in the reply", notes)
            return [failure]
        return plan, [(written.plan_for(i, plan), k) for i, k in enumerate(kernels)], notes, failures

    async def _claim(
        self,
        iteration: int,
        index: int,
        parent: Candidate,
        experiences: list[Experience],
        plan: Plan,
        kernels: list[tuple[Plan, KernelSource]],
        notes: list[str],
        unfilled: int,
    ) -> list[tuple[Plan, KernelSource, list[str]]]:
        """The kernels this branch evaluates: those no earlier plan wrote, then, for each one an
        earlier plan did write and for each of the `unfilled` samples the plan had no variant
        for, a kernel of `parent`'s next plans (until REPLACEMENT_PLANS in a row give none). A
        duplicate left without a replacement is still returned: the cache answers for it, at no
        cost, and it is recorded as a duplicate."""
        chosen: list[tuple[Plan, KernelSource, list[str]]] = []
        duplicates: list[tuple[Plan, KernelSource, list[str]]] = []
        for realised, kernel in kernels:
            target = chosen if self._claims.claim(self._key(kernel)) else duplicates
            target.append((realised, kernel, notes))
        wanted = len(duplicates) + unfilled
        filled = misses = 0
        while wanted and misses < REPLACEMENT_PLANS:
            proposal = self._claims.next_proposal(index)
            if proposal is None:
                break
            seed = self._seed(iteration, index, proposal)
            planned = await self._plan(iteration, parent, experiences, proposal, seed)
            if not planned.plans:
                self._claims.exhausted(index)  # nothing new (or no answer): no further plan asked
                break
            extra = planned.plans[0]
            written = await self._execute(parent, extra, experiences, wanted, seed)
            misses += 1
            for i, kernel in enumerate(written.kernels[:wanted]):
                if self._claims.claim(self._key(kernel)):
                    why = (
                        f"replaces a kernel of the plan {plan.title!r} that another plan had written"
                        if filled < len(duplicates)
                        else f"a sample of the plan {plan.title!r}, which has no further variant"
                    )
                    chosen.append((written.plan_for(i, extra), kernel, [*planned.notes, *written.notes, why]))
                    wanted, filled, misses = wanted - 1, filled + 1, 0
        return chosen + duplicates[filled:]

    async def _plan(
        self, iteration: int, parent: Candidate, experiences: list[Experience], proposal: int, seed: int
    ) -> PlanResult:
        planned = await self._call(
            PlanResult,
            self.agents.planner.plan,
            PlanRequest(
                kernel=parent.kernel,
                profile=parent.profile,
                experiences=experiences,
                count=1,
                hardware=self.config.hardware,
                seed=seed,
                proposal=proposal,
                judged=self._judged,
                input_shapes=dict(parent.timed_input_shapes),
                input_dtypes=dict(parent.timed_input_dtypes),
            ),
        )
        if planned.notice and (iteration, parent.id, planned.notice) not in self._notices:
            self._notices.add((iteration, parent.id, planned.notice))
            self._emit(
                PlannerNotice(
                    search_id=self.search_id,
                    iteration=iteration,
                    candidate_id=parent.id,
                    message=planned.notice,
                )
            )
        return planned

    async def _execute(
        self, parent: Candidate, plan: Plan, experiences: list[Experience], samples: int, seed: int
    ) -> ExecuteResult:
        return await self._call(
            ExecuteResult,
            self.agents.executor.execute,
            ExecuteRequest(
                kernel=parent.kernel,
                plan=plan,
                profile=parent.profile,
                samples=samples,
                seed=seed,
                experiences=experiences,
            ),
        )

    def _seed(self, iteration: int, index: int, proposal: int) -> int:
        return self.config.seed * 1_000_003 + iteration * 10_007 + index * 101 + proposal

    def _key(self, kernel: KernelSource) -> tuple[str, ...]:
        return self.cache.key(kernel, self.task, self.backend_name, self.config.hardware)

    async def _evaluate_and_fix(
        self,
        iteration: int,
        parent: Candidate,
        plan: Plan,
        kernel: KernelSource,
        notes: list[str],
        experiences: list[Experience],
    ) -> list[Candidate]:
        current = self._new_candidate(parent, plan, kernel, iteration=iteration, notes=notes)
        chain = [current]
        try:
            await self._evaluate(current)
            for attempt in range(1, self.config.fix_attempts + 1):
                if not fixable(str(current.status)):
                    break
                fixed = await self._call(
                    ExecuteResult,
                    self.agents.executor.fix,
                    FixRequest(
                        kernel=current.kernel,
                        original=parent.kernel,
                        plan=current.plan or plan,
                        status=str(current.status),
                        message=current.message,
                        line=current.line,
                        experiences=experiences,
                    ),
                )
                if fixed.error or not fixed.kernels:
                    failure = self._new_candidate(parent, plan, current.kernel, iteration=iteration)
                    failure.fixed_from, failure.fix_attempts = current.id, attempt
                    self._fail(failure, f"fixer: {fixed.error or 'no kernel in the reply'}", fixed.notes)
                    chain.append(failure)
                    break
                repaired = self._new_candidate(
                    parent, fixed.plan_for(0, plan), fixed.kernels[0], iteration=iteration, notes=fixed.notes
                )
                repaired.fixed_from, repaired.fix_attempts = current.id, attempt
                chain.append(repaired)
                current = repaired
                await self._evaluate(current)
        except _Stopped:
            pass
        return [c for c in chain if c.status != "pending"]

    # -- agents -------------------------------------------------------------------------------

    async def _call(self, result_type: type[R], method: Callable[[Q], Awaitable[R]], request: Q) -> R:
        """One agent call under the concurrency limit and the budgets; an exception from the
        agent becomes an error result so that one bad call never ends the search."""
        if self._limits_reached():
            raise _Stopped
        async with self._agent_slots:
            if self._limits_reached():
                raise _Stopped
            try:
                result = await method(request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("agent call failed", exc_info=True)
                result = result_type(error=f"{type(exc).__name__}: {exc}")
        self.spending.record(result)
        if result.prompt_tokens or result.completion_tokens or result.dollars:
            self._emit_cost()
        self._watch_health(result)
        return result

    def _watch_health(self, result: AgentOutput) -> None:
        """Stop when the agents are plainly unusable (an endpoint down, a bad key). Only planner
        calls count: a planner that works always has a plan, while an executor or fixer may
        legitimately come back empty-handed for a hard plan; a success resets the count."""
        if not isinstance(result, PlanResult):
            return
        usable = bool(result.plans) or result.exhausted  # "nothing new" is an answer, not a failure
        self.agent_failures_in_a_row = 0 if usable else self.agent_failures_in_a_row + 1
        limit = self.config.max_consecutive_agent_failures
        if limit is not None and self.agent_failures_in_a_row >= limit:
            self._stop(
                "error",
                f"the agents failed {self.agent_failures_in_a_row} times in a row; last: {result.error}",
            )

    def _emit_cost(self) -> None:
        self._emit(
            CostEvent(
                search_id=self.search_id,
                prompt_tokens=self.spending.prompt_tokens,
                completion_tokens=self.spending.completion_tokens,
                dollars=self.spending.dollars,
            )
        )

    async def _learn(self, children: list[Candidate], pairs: list[Pair]) -> None:
        """Lessons from this iteration: the clearest speedups and slowdowns (the published rule),
        then, in the slots left, the plans that cost an evaluation for nothing -- candidates that
        failed (runtime error, wrong output) and pairs with no gain worth having -- as negative
        experiences, so that the planner stops spending evaluations on them."""
        cfg = self.config
        chosen = select_experiences(
            pairs,
            limit=cfg.new_experiences_per_iteration,
            positive_threshold=cfg.positive_threshold,
            negative_threshold=cfg.negative_threshold,
        )
        outcomes = [_Outcome(p.before, p.after, p.speedup) for p in chosen]
        spare = cfg.new_experiences_per_iteration - len(outcomes)
        wasted = [*self._failed_outcomes(children), *_no_gain_outcomes(pairs, chosen)]
        outcomes += wasted[: max(spare, 0)]
        await _gather_all([self._summarize(outcome) for outcome in outcomes])

    def _failed_outcomes(self, children: list[Candidate]) -> list[_Outcome]:
        """First attempts the backend judged and rejected (not repairs, not agent failures, not
        repeats of a kernel already judged), one per distinct kernel, of plans none of whose
        samples worked: a plan with one correct sample did not fail. An executor that says which
        variant each kernel realises (ExecuteResult.plans) makes every variant a plan of its own,
        so a failed variant beside a working one is a lesson too -- about that variant."""
        worked = {(c.parent_id, _plan_key(c.plan)) for c in children if is_ranked(c)}
        seen: set[str] = set()
        outcomes: list[_Outcome] = []
        for child in children:
            if (
                child.plan is None
                or child.status in ("ok", "pending", "agent_error")
                or child.duplicate_of is not None
                or child.fixed_from is not None
            ):
                continue
            parent = self._by_id(child.parent_id)
            key = child.kernel.normalized_hash()
            if not is_ranked(parent) or key in seen or (child.parent_id, _plan_key(child.plan)) in worked:
                continue
            seen.add(key)
            where = f" (line {child.line})" if child.line else ""
            failure = f"{child.status}{where}: {child.message}".strip()
            outcomes.append(_Outcome(parent, child, FAILED_SPEEDUP, failure=failure[:300]))
        return outcomes

    async def _summarize(self, outcome: _Outcome) -> None:
        before, after = outcome.before, outcome.after
        assert after.plan is not None
        try:
            result = await self._call(
                SummarizeResult,
                self.agents.summarizer.summarize,
                SummarizeRequest(
                    slow=before.kernel,
                    fast=after.kernel,
                    plan=after.plan,
                    speedup=outcome.speedup,
                    slow_profile=before.profile,
                    fast_profile=after.profile if outcome.failure is None else None,
                    failure=outcome.failure,
                    input_shapes=dict(before.timed_input_shapes),
                    input_dtypes=dict(before.timed_input_dtypes),
                ),
            )
        except _Stopped:
            return
        if result.lesson is None:
            # Recorded on the candidate (it appears so in the final ranking) and in the log.
            after.agent_notes.append(f"summarizer: {result.error or 'no lesson in the reply'}")
            log.info("summarizer gave no lesson for %s: %s", after.id, result.error)
            return
        # Only a gain worth an evaluation is a positive lesson: a 1.02x step is a no-gain one.
        positive = outcome.failure is None and outcome.speedup > self.config.positive_threshold
        lesson = result.lesson.model_copy(update={"positive": positive})
        experience = Experience(
            slow_kernel=before.kernel.text,
            fast_kernel=after.kernel.text,
            speedup=outcome.speedup,
            lesson=lesson,
            failure=outcome.failure,
            kernel_family=self.family,
            task=self.task_name,
            hardware=self.config.hardware,
            backend=self.backend_name,
            model=result.model,
            bound=before.profile.bound if before.profile else "",
        )
        experience_id: int | None
        try:
            experience_id = await asyncio.to_thread(self.memory.add, experience)
        except (MemoryUnavailable, sqlite3.Error, OSError) as exc:
            log.warning("lesson not saved to the optimization memory: %s", exc)
            experience_id = None
        self._emit(
            LessonEvent(
                search_id=self.search_id,
                lesson=lesson,
                speedup=None if outcome.failure else outcome.speedup,
                failure=outcome.failure,
                experience_id=experience_id,
            )
        )

    # -- evaluation ---------------------------------------------------------------------------

    async def _evaluate(self, candidate: Candidate) -> None:
        key = self.cache.key(candidate.kernel, self.task, self.backend_name, self.config.hardware)
        if key in self.first_with_key:
            candidate.duplicate_of = self.first_with_key[key]
        else:
            if self.stop_reason:
                raise _Stopped
            self.first_with_key[key] = candidate.id
        evaluation, _ = await self.cache.get_or_evaluate(key, lambda: self._run_backend(candidate.kernel))
        self._apply(candidate, evaluation)
        self.ranking.add(candidate, kernel_key=key[0], made=self._made[candidate.id])
        self._emit_candidate(candidate)

    def _emit_candidate(self, candidate: Candidate) -> None:
        ranking = [c.id for c in self.ranking.head(self.config.ranked_limit)]
        self._emit(CandidateEvent(search_id=self.search_id, candidate=candidate, ranking=ranking))

    async def _run_backend(self, kernel: KernelSource, *, budgeted: bool = True) -> Evaluation:
        options = EvaluationOptions(
            hardware=self.config.hardware, seeds=self.config.seeds, timeout_s=self.config.evaluation_timeout_s
        )
        async with self._eval_slots:
            # Counted when it really starts, so that Finished.evaluations is what ran.
            if budgeted:
                if self.stop_reason:
                    raise _Stopped
                why = self.spending.reserve_evaluation()
                if why:
                    self._stop("budget", why)
                    raise _Stopped
            else:
                self.spending.evaluations += 1
            try:
                return await self.backend.evaluate(kernel, self.task, options)
            except Exception as exc:  # the backend's own defect, not the kernel's: keep searching
                log.exception("backend %s failed on %s", self.backend_name, kernel.name)
                return Evaluation(
                    status="runtime_error", message=f"the {self.backend_name} backend failed: {exc}"
                )

    def _remember(self, candidate: Candidate, evaluation: Evaluation) -> None:
        key = self.cache.key(candidate.kernel, self.task, self.backend_name, self.config.hardware)
        self.first_with_key.setdefault(key, candidate.id)
        self.cache.put(key, evaluation)
        self.ranking.add(candidate, kernel_key=key[0], made=self._made[candidate.id])

    def _apply(self, candidate: Candidate, evaluation: Evaluation) -> None:
        candidate.status = evaluation.status
        message = evaluation.message
        if evaluation.error_code and evaluation.error_code not in message:
            message = f"{evaluation.error_code}: {message}"
        candidate.message = message
        candidate.line = evaluation.line
        candidate.profile = evaluation.profile
        candidate.checked_size, candidate.timed_size = evaluation.checked_size, evaluation.timed_size
        candidate.evaluation_notes = list(evaluation.notes)
        candidate.timed_input_shapes = dict(evaluation.timed_input_shapes)
        candidate.timed_input_dtypes = dict(evaluation.timed_input_dtypes)
        if evaluation.ok and evaluation.profile is not None:
            candidate.latency_ms = evaluation.profile.latency_ms
            candidate.percent_of_peak = evaluation.profile.percent_of_peak
            base = self.baseline.latency_ms if self.baseline else None
            if base and candidate.latency_ms:
                candidate.speedup = base / candidate.latency_ms
        elif evaluation.ok:
            candidate.status = "runtime_error"
            candidate.message = "the backend returned no profile for a passing kernel"

    # -- candidates ---------------------------------------------------------------------------

    def _new_candidate(
        self,
        parent: Candidate | None,
        plan: Plan | None,
        kernel: KernelSource,
        *,
        iteration: int,
        notes: list[str] | None = None,
    ) -> Candidate:
        rationale = [*(parent.rationale if parent else []), *([plan] if plan else [])]
        lessons = sorted({*(parent.lessons_used if parent else []), *(plan.lesson_ids if plan else [])})
        candidate = Candidate(
            id=f"c{self._next_id}",
            parent_id=parent.id if parent else None,
            iteration=iteration,
            kernel=kernel,
            plan=plan,
            rationale=rationale,
            lessons_used=lessons,
            agent_notes=list(notes or []),
        )
        self._made[candidate.id] = self._next_id
        self._next_id += 1
        self.candidates.append(candidate)
        return candidate

    def _fail(self, candidate: Candidate, message: str, notes: list[str]) -> None:
        candidate.status = "agent_error"
        candidate.message = message
        candidate.agent_notes = [*candidate.agent_notes, *notes]
        self._emit_candidate(candidate)

    def _by_id(self, candidate_id: str | None) -> Candidate:
        return next(c for c in self.candidates if c.id == candidate_id)


# How many further plans in a row that give no new kernel a plan branch asks its beam kernel for
# before it gives up replacing kernels another plan had already written (claims.py). Each costs a
# planner and an executor call (an LLM's tokens), so it is bounded; a plan that gives a new
# kernel starts the count again (the offline planner's next options are often other variants of
# the same sites, which the executor has already written as samples).
REPLACEMENT_PLANS = 3

# The speedup a failed candidate is recorded with: it cost an evaluation and gave nothing, which
# the memory counts like a clear slowdown (the negative threshold's default); the lesson's text
# says how it failed.
FAILED_SPEEDUP = 1 / 1.15


@dataclass(frozen=True)
class _Outcome:
    """A plan applied to `before` gave `after`: `speedup` = before / after latency, or
    FAILED_SPEEDUP with `failure` saying why `after` was rejected."""

    before: Candidate
    after: Candidate
    speedup: float
    failure: str | None = None


# A step up to this speedup is "no gain": too small to be worth the evaluation it cost.
# Small real gains (1.01-1.04x) are left out: a rewrite that gains little on its own often pays
# once another has moved the bottleneck (folding a softmax sum after blocking the matmul).
NO_GAIN_UP_TO = 1.01


def _plan_key(plan: Plan | None) -> str:
    return plan.model_dump_json() if plan is not None else ""


def _no_gain_outcomes(pairs: list[Pair], chosen: list[Pair]) -> list[_Outcome]:
    """Correct children not already chosen whose step gave no measurable gain, the nearest to no
    change first (the least informative slowdowns were left by the published rule)."""
    taken = {p.after.kernel.normalized_hash() for p in chosen}
    outcomes: list[_Outcome] = []
    for pair in pairs:
        key = pair.after.kernel.normalized_hash()
        if key in taken or not is_ranked(pair.before) or pair.speedup > NO_GAIN_UP_TO:
            continue
        taken.add(key)
        outcomes.append(_Outcome(pair.before, pair.after, pair.speedup))
    return sorted(outcomes, key=lambda o: -o.speedup)


T = TypeVar("T")


async def _gather_all(coroutines: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run concurrently; on failure or cancellation, cancel the rest and wait for them, so that
    nothing (no evaluation, no worker) outlives the caller."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
