"""LLM endpoint faults (issue 9): the search completes, or stops with reason "error" when the
endpoint is gone for good, and every failure is recorded on the candidate it hit. Real openai
client, real loopback server (or a port with nothing listening), real simulator."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import Counter

from chat_server import ChatRequest, Reply
from scripted_endpoint import ScriptedEndpoint, code, lesson_reply, proposal
from search_fixtures import SESSION_LOOP, collect, finished_of, small_config
from silu_variants import WIDE

from accelopt.search.beam import run_search
from accelopt.search.events import CandidateEvent

pytestmark = SESSION_LOOP

TRUNCATED = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assis'


FAULTS = {
    # fault reply, how many of its plan's executor calls get it, what the record says, recovers?
    "rate_limit_burst": (Reply(status=429, body={"error": {"message": "too many requests"}}), 2, "429", True),
    "server_error_burst": (Reply(status=502, body=b"<html>bad gateway</html>"), 3, "502", False),
    "slow_past_timeout": (Reply(content="late", delay_s=2.0), 3, "timed out", False),
    "truncated_json": (Reply(body=TRUNCATED), 1, "malformed reply", True),
    "malformed_json": (Reply(body=b"<<<not json>>>"), 3, "malformed reply", False),
    "empty_choices": (
        Reply(body={"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}),
        3,
        "no choices",
        False,
    ),
    "enormous_reply": (Reply(content="x = 1\n" * 400_000), 3, "exceeds", False),
    "dropped_connection": (Reply(drop_connection=True), 1, "cannot reach", True),
}
NAMES = list(FAULTS)


class FaultPerPlan:
    """Planner call n proposes 'plan for <fault n>'; the executor calls for that plan get the
    fault the first `times` times, then the wide kernel."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __call__(self, role: str, request: ChatRequest) -> Reply:
        if role == "planner":
            name = NAMES[proposal(request) - 1]
            return Reply(content=json.dumps({"title": f"plan for {name}", "description": "widen the tiles"}))
        if role == "executor":
            name = re.search(r"Plan: plan for (\w+)", request.user).group(1)
            fault, times, _, _ = FAULTS[name]
            with self.lock:
                self.calls[name] += 1
                hit = self.calls[name] <= times
            return fault if hit else code(WIDE)
        return lesson_reply()


async def test_every_endpoint_fault_is_recorded_and_the_search_finishes(
    processes, chat_server, simulator, silu, make_llm_agents
):
    server = chat_server(ScriptedEndpoint(FaultPerPlan()))
    kernel, task = silu
    agents = make_llm_agents(server.base_url, timeout_s=1.5, max_retries=2, max_reply_chars=100_000)
    config = small_config(iterations=1, plans_per_kernel=len(FAULTS), samples_per_plan=1, fix_attempts=0)

    events = await collect(run_search(kernel, task, agents, simulator, config))

    finished = finished_of(events)
    assert finished.reason == "completed"
    candidates = [e.candidate for e in events if isinstance(e, CandidateEvent)]
    assert len(candidates) == len(FAULTS)
    by_fault = {c.plan.title.removeprefix("plan for "): c for c in candidates if c.plan}
    assert set(by_fault) == set(FAULTS)
    for name, (_, _, record, recovers) in FAULTS.items():
        candidate = by_fault[name]
        assert any(record in note for note in candidate.agent_notes), (name, candidate.agent_notes)
        if recovers:
            assert candidate.status == "ok" and candidate.speedup is not None and candidate.speedup > 1, name
        else:
            assert candidate.status == "agent_error" and record in candidate.message, (
                name,
                candidate.message,
            )
            assert "giving up after 3 attempts" in candidate.agent_notes[-1], name
    ranked = {r.candidate.kernel.normalized_hash() for r in finished.ranked}
    assert ranked == {kernel.normalized_hash(), by_fault["truncated_json"].kernel.normalized_hash()}
    assert finished.evaluations == 2  # the baseline and the wide kernel, once for all recovered plans
    assert processes.survivors() == []


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_refused_connection_stops_with_every_failure_recorded(simulator, silu, make_llm_agents):
    agents = make_llm_agents(f"http://127.0.0.1:{closed_port()}/v1", max_retries=1)
    kernel, task = silu
    config = small_config(iterations=3, plans_per_kernel=2, max_consecutive_agent_failures=4)
    events = await collect(run_search(kernel, task, agents, simulator, config))
    finished = finished_of(events)
    assert finished.reason == "error" and "failed 4 times in a row" in finished.message
    candidates = [e.candidate for e in events if isinstance(e, CandidateEvent)]
    assert len(candidates) == 4
    for candidate in candidates:
        assert candidate.status == "agent_error" and candidate.plan is None
        assert candidate.message.startswith("planner: cannot reach")
        assert len(candidate.agent_notes) == 2  # the first attempt and the retry
    assert [r.candidate.id for r in finished.ranked] == ["c0"]
