"""LLM endpoint faults (issue 9): the search completes, or stops with reason "error" when the
endpoint is gone for good, and every failure is recorded on the candidate it hit. Real openai
client, real loopback server (or a port with nothing listening), real simulator."""

from __future__ import annotations

import json
import socket

import pytest
from chat_server import ChatRequest, Reply
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from search_fixtures import collect, descendants, finished_of, small_config
from silu_variants import WIDE

from accelopt.search.beam import run_search
from accelopt.search.events import CandidateEvent

TRUNCATED = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assis'


def normal(role: str, request: ChatRequest) -> Reply:
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role in ("executor", "fixer"):
        return code(WIDE)
    return lesson_reply()


def faulty_executor(fault: Reply, *, times: int):
    """The first `times` executor calls get `fault`, later ones a normal reply."""
    return ScriptedEndpoint(normal, faults={("executor", n): fault for n in range(1, times + 1)})


FAULTS = {
    # fault reply, how many executor calls get it, what the candidate's record must say, recovers?
    "rate_limit_burst": (Reply(status=429, body={"error": {"message": "too many requests"}}), 2, "429", True),
    "server_error_burst": (Reply(status=502, body=b"<html>bad gateway</html>"), 3, "502", False),
    "slow_past_timeout": (Reply(content="late", delay_s=0.8), 3, "timed out", False),
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


@pytest.mark.parametrize("name", list(FAULTS))
async def test_endpoint_fault_is_recorded_and_the_search_finishes(
    name, chat_server, simulator, silu, make_llm_agents
):
    fault, times, record, recovers = FAULTS[name]
    server = chat_server(faulty_executor(fault, times=times))
    kernel, task = silu
    agents = make_llm_agents(server.base_url, timeout_s=0.5, max_retries=2, max_reply_chars=100_000)
    config = small_config(iterations=1, plans_per_kernel=1, samples_per_plan=1, fix_attempts=0)

    events = await collect(run_search(kernel, task, agents, simulator, config))

    finished = finished_of(events)
    assert finished.reason == "completed"
    candidates = [e.candidate for e in events if isinstance(e, CandidateEvent)]
    assert len(candidates) == 1
    candidate = candidates[0]
    assert any(record in note for note in candidate.agent_notes), candidate.agent_notes
    if recovers:
        assert candidate.status == "ok" and candidate.speedup is not None and candidate.speedup > 1
        assert finished.ranked[0].candidate.id == candidate.id
    else:
        assert candidate.status == "agent_error" and record in candidate.message
        assert "giving up after 3 attempts" in candidate.agent_notes[-1]
        assert [r.candidate.id for r in finished.ranked] == ["c0"]  # the baseline still ranks
    assert descendants() == []


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
