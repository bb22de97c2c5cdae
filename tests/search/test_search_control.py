"""Stopping a search: cancellation (event or task), budgets, early stop and target. Real
simulator, real openai client against the loopback chat server."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading

import pytest
from chat_server import ChatRequest, Reply
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from search_fixtures import PRICE, SESSION_LOOP, collect, finished_of, small_config
from silu_variants import MEDIUM, WIDE, silu

from accelopt.profiling.backends import get_backend
from accelopt.search.beam import run_search
from accelopt.search.candidate import Candidate
from accelopt.search.config import Budget
from accelopt.search.events import CandidateEvent, Finished, IterationEvent

pytestmark = SESSION_LOOP

# Distinct correct kernels, so that every executor reply costs a real evaluation.
VARIANTS = [
    WIDE,
    MEDIUM,
    silu(512, body="result = nl.multiply(nl.sigmoid(tile), tile)"),
    silu(256, body="result = nl.multiply(nl.sigmoid(tile), tile)"),
    silu(512, body="gate = nl.sigmoid(tile)\n            result = nl.multiply(tile, gate)"),
    silu(256, body="gate = nl.sigmoid(tile)\n            result = nl.multiply(tile, gate)"),
]


def varied() -> ScriptedEndpoint:
    """Each executor or fixer call gets the next kernel of VARIANTS, round robin."""
    lock = threading.Lock()
    served = itertools.count()

    def answer(role: str, request: ChatRequest) -> Reply:
        if role == "planner":
            return Reply(content=json.dumps(WIDEN))
        if role in ("executor", "fixer"):
            with lock:
                index = next(served)
            return code(VARIANTS[index % len(VARIANTS)])
        return lesson_reply()

    return ScriptedEndpoint(answer)


def steady(role: str, request: ChatRequest) -> Reply:
    """Always the same answer: the wide kernel."""
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role in ("executor", "fixer"):
        return code(WIDE)
    return lesson_reply()


def check_ranking(finished: Finished) -> list[Candidate]:
    ranked = [r.candidate for r in finished.ranked]
    assert [r.rank for r in finished.ranked] == list(range(1, len(ranked) + 1))
    assert all(c.status == "ok" and c.latency_ms for c in ranked)
    assert [c.latency_ms for c in ranked] == sorted(c.latency_ms for c in ranked)
    return ranked


async def test_cancel_event_mid_iteration_kills_workers_and_keeps_the_ranking(
    processes, chat_server, simulator, silu, make_llm_agents
):
    server = chat_server(varied())
    kernel, task = silu
    cancel = asyncio.Event()
    config = small_config(plans_per_kernel=3, samples_per_plan=2, iterations=3)
    events = []
    first_candidate = asyncio.Event()
    workers_at_cancel: list[int] = []

    async def cancel_while_a_worker_runs() -> None:
        # Watched from its own task rather than at candidate events: whether the next
        # evaluation's worker has started by the time a candidate arrives is a race (CI lost it
        # once); polling catches a worker of one of the five evaluations still to come.
        await first_candidate.wait()
        while not cancel.is_set():
            if pids := processes.new():
                workers_at_cancel.extend(pids)
                cancel.set()
                return
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(cancel_while_a_worker_runs())
    async for event in run_search(
        kernel, task, make_llm_agents(server.base_url), simulator, config, cancel=cancel
    ):
        events.append(event)
        if isinstance(event, CandidateEvent):
            first_candidate.set()
    watcher.cancel()
    assert cancel.is_set(), "no evaluation worker was seen after the first candidate"
    assert workers_at_cancel
    assert processes.survivors() == []  # every worker of the in-flight evaluations was killed
    finished = finished_of(events)
    assert finished.reason == "cancelled"
    ranked = check_ranking(finished)
    assert ranked and ranked[-1].speedup is not None
    assert not any(isinstance(e, IterationEvent) for e in events)  # stopped inside iteration 1
    assert finished.evaluations < 1 + 3 * 2


async def test_cancelling_the_consuming_task_still_hands_back_the_ranking(
    processes, chat_server, simulator, silu, make_llm_agents
):
    server = chat_server(varied())
    kernel, task = silu
    events = []
    first_candidate = asyncio.Event()

    async def consume() -> None:
        config = small_config(plans_per_kernel=3)
        async for event in run_search(kernel, task, make_llm_agents(server.base_url), simulator, config):
            events.append(event)
            if isinstance(event, CandidateEvent):
                first_candidate.set()

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(first_candidate.wait(), 60)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert processes.survivors() == []
    finished = finished_of(events)
    assert finished.reason == "cancelled"
    assert check_ranking(finished)


async def test_evaluation_budget_is_never_exceeded(chat_server, simulator, silu, make_llm_agents):
    server = chat_server(varied())
    kernel, task = silu
    config = small_config(plans_per_kernel=3, budget=Budget(max_evaluations=3))
    events = await collect(run_search(kernel, task, make_llm_agents(server.base_url), simulator, config))
    finished = finished_of(events)
    assert finished.reason == "budget" and "evaluation budget" in finished.message
    assert finished.evaluations == 3
    evaluated = {e.candidate.kernel.normalized_hash() for e in events if isinstance(e, CandidateEvent)}
    assert len(evaluated) <= 2  # the baseline plus two candidates
    check_ranking(finished)


async def test_dollar_budget_stops_the_agents(chat_server, simulator, silu, make_llm_agents):
    endpoint = varied()
    server = chat_server(endpoint)
    kernel, task = silu
    per_call = (100 * PRICE.prompt_per_million + 50 * PRICE.completion_per_million) / 1e6
    config = small_config(
        iterations=5, max_concurrent_agent_calls=2, budget=Budget(max_dollars=3.5 * per_call)
    )
    events = await collect(run_search(kernel, task, make_llm_agents(server.base_url), simulator, config))
    finished = finished_of(events)
    assert finished.reason == "budget" and "dollar budget" in finished.message
    calls = sum(endpoint.counts.values())
    assert 4 <= calls <= 4 + config.max_concurrent_agent_calls  # one call in flight per slot may overshoot
    check_ranking(finished)


async def test_wall_time_budget_cancels_slow_calls(processes, chat_server, simulator, silu, make_llm_agents):
    def slow(role: str, request: ChatRequest) -> Reply:
        reply = steady(role, request)
        reply.delay_s = 0.0 if role == "planner" else 30.0
        return reply

    server = chat_server(ScriptedEndpoint(slow))
    kernel, task = silu
    config = small_config(budget=Budget(max_wall_time_s=6.0))
    started = asyncio.get_running_loop().time()
    events = await collect(
        run_search(kernel, task, make_llm_agents(server.base_url, timeout_s=30), simulator, config)
    )
    elapsed = asyncio.get_running_loop().time() - started
    finished = finished_of(events)
    assert finished.reason == "budget" and "wall-time" in finished.message
    assert elapsed < 9.0
    assert processes.survivors() == []
    assert [r.candidate.id for r in finished.ranked] == ["c0"]  # only the baseline was evaluated
    assert server.requests_for("executor")  # the budget cut a model call short


async def test_patience_stops_when_nothing_improves(chat_server, simulator, silu, make_llm_agents):
    server = chat_server(ScriptedEndpoint(steady))
    kernel, task = silu
    config = small_config(iterations=6, plans_per_kernel=1, samples_per_plan=1, patience=1)
    events = await collect(run_search(kernel, task, make_llm_agents(server.base_url), simulator, config))
    finished = finished_of(events)
    assert finished.reason == "early_stop"
    iterations = [e for e in events if isinstance(e, IterationEvent)]
    assert len(iterations) == 2  # iteration 1 finds the wide kernel, iteration 2 nothing better
    assert iterations[0].best_speedup > 1 and iterations[1].best_speedup == iterations[0].best_speedup


async def test_target_percent_of_peak_stops_the_search(chat_server, simulator, silu, make_llm_agents):
    server = chat_server(ScriptedEndpoint(steady))
    kernel, task = silu
    config = small_config(iterations=6, plans_per_kernel=1, samples_per_plan=1, target_percent_of_peak=1e-9)
    events = await collect(run_search(kernel, task, make_llm_agents(server.base_url), simulator, config))
    finished = finished_of(events)
    assert finished.reason == "target_reached"
    assert len([e for e in events if isinstance(e, IterationEvent)]) == 1


async def test_cancel_during_the_baseline_still_starts_and_finishes(processes, silu, make_llm_agents):
    kernel, task = silu
    cancel = asyncio.Event()
    agents = make_llm_agents("http://127.0.0.1:9/v1")  # never reached
    # A backend of its own: the session's simulator may already hold this task's reference
    # outputs, and then the baseline can finish before any fixed delay runs out.
    backend = get_backend("simulator", max_workers=1)

    async def cancel_once_a_worker_runs() -> None:
        while not processes.new():
            await asyncio.sleep(0.01)
        cancel.set()

    watcher = asyncio.create_task(cancel_once_a_worker_runs())
    try:
        events = await collect(run_search(kernel, task, agents, backend, small_config(), cancel=cancel))
    finally:
        watcher.cancel()
        await backend.aclose()
    assert [e.kind for e in events] == ["started", "finished"]
    assert events[0].baseline.status == "pending"
    finished = finished_of(events)
    assert finished.reason == "cancelled" and finished.ranked == []
    assert processes.survivors() == []
