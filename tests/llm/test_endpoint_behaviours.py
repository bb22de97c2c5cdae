"""The LLM agents against the real loopback chat server behaving like the servers people run
locally: a strict small window, replies cut at the length limit, a chat template that drops
system messages, a single-slot server that queues, a server that dies mid-search, and a model
that answers with garbage instead of plans and lessons."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from chat_server import ChatRequest, Reply
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from search_fixtures import SESSION_LOOP, collect, finished_of, llm_config, small_config
from silu_variants import BASELINE, WIDE

from accelopt.agents.chat import ChatClient, Prompt
from accelopt.agents.llm import llm_agents
from accelopt.agents.prompting import planner_messages
from accelopt.agents.transcript import Transcript
from accelopt.agents.window import estimate_tokens
from accelopt.search.beam import run_search
from accelopt.search.events import CandidateEvent, LessonEvent
from accelopt.search.memory import Memory
from accelopt.search.roles import PlanRequest

pytestmark = SESSION_LOOP

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "ROLE: planner\nYou optimize NKI kernels. Answer with one JSON object."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Propose a plan."}]
PLAN = json.dumps(WIDEN)


def strict_window(window: int, answer: Reply):
    """A server that refuses, as vLLM does, any request whose prompt and reply allowance exceed
    its window (the prompt measured by the client's own estimate, which over-counts)."""

    def respond(request: ChatRequest) -> Reply:
        asked = estimate_tokens(request.messages) + int(request.body.get("max_tokens") or 0)
        if asked > window:
            message = (
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{asked} tokens. Please reduce the length of the messages or completion."
            )
            return Reply(status=400, body={"error": {"message": message, "type": "BadRequestError"}})
        return answer

    return respond


async def test_a_strict_512_token_window_is_learned_from_the_refusal(chat_server, tmp_path: Path):
    server = chat_server(strict_window(512, Reply(content=PLAN)))
    client = ChatClient(llm_config(server.base_url), transcript=Transcript(tmp_path / "x.jsonl"))
    reply = await client.complete("planner", MESSAGES)
    again = await client.complete("planner", MESSAGES)
    await client.aclose()

    assert reply.error is None and reply.content == PLAN
    assert server.requests[0].body["max_tokens"] == 8192  # the default, refused
    fitted = server.requests[1].body["max_tokens"]
    assert estimate_tokens(server.requests[1].messages) + fitted <= 512
    assert any("512-token window" in note for note in reply.notes)
    # learned once: the next call fits at the first attempt
    assert again.error is None and len(server.requests) == 3
    lines = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == ["context_window", "ok", "ok"]


async def test_a_window_read_from_the_model_listing_avoids_the_refusal(chat_server):
    models = {"object": "list", "data": [{"id": "test-model", "object": "model", "max_model_len": 512}]}
    server = chat_server(strict_window(512, Reply(content=PLAN)), models=models)
    client = ChatClient(llm_config(server.base_url))
    reply = await client.complete("planner", MESSAGES)
    limits = await client.limits()
    await client.aclose()
    assert reply.error is None and len(server.requests) == 1
    assert limits.context_window == 512 and limits.source == "/v1/models"


async def test_a_prompt_larger_than_the_window_is_not_sent(chat_server):
    server = chat_server(lambda request: Reply(content=PLAN))
    client = ChatClient(llm_config(server.base_url, context_window=256))
    big = [{"role": "user", "content": "x" * 3000}]
    reply = await client.complete("planner", Prompt(build=lambda trim: big, min_reply_tokens=64))
    await client.aclose()
    assert reply.cause == "context_window" and "window is 256 tokens" in (reply.error or "")
    assert server.requests == []


async def test_the_prompt_sheds_lessons_before_it_sheds_the_kernel(chat_server):
    """A planner prompt with memory lessons, in a window too small for all of them: the lessons
    go first and the kernel stays."""
    from accelopt.profiling.evaluation import KernelSource
    from accelopt.search.candidate import Experience, Lesson

    lessons = [
        Experience(
            id=i,
            slow_kernel="a",
            fast_kernel="b",
            speedup=1.3,
            lesson=Lesson(title=f"Lesson number {i} about tiles", plan="widen the tiles " * 40),
        )
        for i in range(1, 9)
    ]
    server = chat_server(lambda request: Reply(content=PLAN))
    config = llm_config(server.base_url, context_window=3000)
    agents = llm_agents(config)
    request = PlanRequest(
        kernel=KernelSource(text=BASELINE, name="silu_kernel"), profile=None, experiences=lessons, count=1
    )
    result = await agents.planner.plan(request)
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    sent = server.requests[0]
    assert result.plans and "def silu_kernel(" in sent.user
    assert "Lesson number 8" not in sent.user  # the lessons were trimmed
    assert estimate_tokens(sent.messages) + sent.body["max_tokens"] <= 3000
    assert any("trimmed" in note for note in result.notes)


async def test_a_reply_cut_at_the_length_limit_is_not_sent_to_the_fixer(chat_server, simulator, silu):
    cut = code(WIDE[: len(WIDE) // 2])
    cut.finish_reason = "length"

    def answer(role: str, request: ChatRequest) -> Reply:
        if role == "planner":
            return Reply(content=PLAN)
        if role == "executor":
            return cut
        if role == "summarizer":
            return lesson_reply()
        return code(WIDE)

    server = chat_server(ScriptedEndpoint(answer))
    agents = llm_agents(llm_config(server.base_url))
    kernel, task = silu
    config = small_config(iterations=1, beam_width=1, plans_per_kernel=1, samples_per_plan=1)
    events = await collect(run_search(kernel, task, agents, simulator, config))
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    candidates = [e.candidate for e in events if isinstance(e, CandidateEvent) and e.candidate.iteration == 1]
    assert candidates and all(c.status == "agent_error" for c in candidates)
    assert any("reply cut at" in c.message for c in candidates)
    assert server.requests_for("fixer") == []
    finished = finished_of(events)
    assert finished.endpoint.failures.get("cut_off") == 1


async def test_system_messages_are_merged_when_the_template_drops_them(chat_server):
    props = {
        "default_generation_settings": {"n_ctx": 8192},
        "chat_template": "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}{% endfor %}",
    }
    server = chat_server(lambda request: Reply(content=PLAN), models={"data": []}, props=props)
    client = ChatClient(llm_config(server.base_url, preset="llamacpp"))
    reply = await client.complete("planner", MESSAGES)
    limits = await client.limits()
    await client.aclose()
    sent = server.requests[0].messages
    assert reply.error is None and limits.merge_system and limits.context_window == 8192
    assert [m["role"] for m in sent] == ["user"]
    assert sent[0]["content"].startswith(SYSTEM) and sent[0]["content"].endswith("Propose a plan.")


async def test_a_template_that_keeps_system_messages_gets_them(chat_server):
    props = {"chat_template": "{% if m['role'] == 'system' %}<<SYS>>{% endif %}"}
    server = chat_server(lambda request: Reply(content=PLAN), models={"data": []}, props=props)
    client = ChatClient(llm_config(server.base_url, preset="llamacpp"))
    await client.complete("planner", MESSAGES)
    await client.aclose()
    assert [m["role"] for m in server.requests[0].messages] == ["system", "user"]


async def test_a_single_slot_server_gets_one_request_at_a_time_and_queue_time_is_not_timed(chat_server):
    """Four plans from a single-slot server that takes 0.3 s each, with a 0.5 s timeout: sent
    together they would queue in the server and time out; sent one at a time none does."""
    server = chat_server(lambda request: Reply(content=PLAN, delay_s=0.3), slots=1)
    statuses: list[str] = []
    config = llm_config(server.base_url, preset="llamacpp", timeout_s=0.5, max_retries=0)
    agents = llm_agents(config, on_status=statuses.append)
    from accelopt.profiling.evaluation import KernelSource

    request = PlanRequest(kernel=KernelSource(text=BASELINE, name="silu_kernel"), profile=None, count=4)
    result = await agents.planner.plan(request)
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    assert len(result.plans) == 4 and result.error is None and not result.failures
    assert server.most_in_flight == 1
    assert any("waiting for the endpoint" in s for s in statuses)


async def test_an_abandoned_request_is_counted(chat_server):
    server = chat_server(lambda request: Reply(content=PLAN, delay_s=1.0, completion_tokens=10))
    client = ChatClient(llm_config(server.base_url, timeout_s=0.2, max_retries=0, max_tokens=1000))
    reply = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert reply.cause == "timeout" and reply.tokens_estimated
    assert reply.completion_tokens == 1000 and reply.prompt_tokens == estimate_tokens(MESSAGES)


async def test_garbage_plans_and_lessons_are_rejected_and_nothing_is_stored(chat_server, simulator, silu, tmp_path):
    kernel, task = silu
    system = planner_messages(PlanRequest(kernel=kernel, profile=None), 1)[0]["content"]
    echoed = max(system.splitlines(), key=len)  # the model repeats its instructions
    garbage_plans = ["42", "# pylint: disable=all", '"""', echoed, "x = nl.load(a)"]
    seen = {"planner": 0}

    def answer(role: str, request: ChatRequest) -> Reply:
        if role == "planner":
            seen["planner"] += 1
            if seen["planner"] <= len(garbage_plans):
                return Reply(content=garbage_plans[seen["planner"] - 1])
            return Reply(content=PLAN)  # a real plan, so that there is a measured result to summarise
        if role == "executor":
            return code(WIDE)
        if role == "summarizer":
            return Reply(content='{"title": "1.7", "plan": ""}')
        return code(WIDE)

    server = chat_server(ScriptedEndpoint(answer))
    agents = llm_agents(llm_config(server.base_url))
    memory = Memory(tmp_path / "memory.sqlite")
    config = small_config(iterations=1, beam_width=1, plans_per_kernel=len(garbage_plans) + 1, samples_per_plan=1)
    events = await collect(run_search(kernel, task, agents, simulator, config, memory=memory))
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    plans = {c.plan.title for e in events if isinstance(e, CandidateEvent) if (c := e.candidate).plan}
    assert plans == {WIDEN["title"]}
    assert not [e for e in events if isinstance(e, LessonEvent)]
    assert memory.count() == 0
    memory.close()
    finished = finished_of(events)
    assert finished.endpoint.failures.get("unusable_reply", 0) >= len(garbage_plans)


async def test_a_server_killed_mid_search_ends_the_search_with_the_failure_said(chat_server, simulator, silu):
    server = chat_server(lambda request: Reply(content=PLAN, delay_s=0.2))
    agents = llm_agents(llm_config(server.base_url, max_retries=1, backoff_initial_s=0.01))
    kernel, task = silu
    asyncio.get_running_loop().call_later(0.1, server.stop)  # while the first planner calls are out
    config = small_config(iterations=1, beam_width=1, plans_per_kernel=2, samples_per_plan=1)
    events = await collect(run_search(kernel, task, agents, simulator, config))
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    finished = finished_of(events)
    assert finished.reason == "error" and "no agent call succeeded" in finished.message
    assert finished.endpoint.calls >= 2 and finished.endpoint.succeeded == 0


async def test_the_cli_exits_non_zero_and_keeps_the_exchanges_when_no_call_succeeds(tmp_path: Path):
    kernel = tmp_path / "silu.py"
    kernel.write_text(BASELINE)
    config = tmp_path / "llm.toml"
    config.write_text(
        'agents = "llm"\n[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nmax_retries = 0\n'
        "[search]\niterations = 1\nbeam_width = 1\nplans_per_kernel = 2\nsamples_per_plan = 1\nseeds = 1\n"
    )
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "accelopt", "optimize", str(kernel), "--config", str(config), "--out", str(out),
         "--no-memory"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "no agent call succeeded" in run.stdout and "unreachable" in run.stdout
    exchanges = [json.loads(line) for line in (out / "exchanges.jsonl").read_text().splitlines()]
    assert len(exchanges) == 2 and {e["status"] for e in exchanges} == {"unreachable"}
    assert exchanges[0]["request"]["messages"][0]["role"] == "system"


async def test_structured_output_is_asked_for_and_dropped_when_the_server_refuses_it(chat_server):
    def respond(request: ChatRequest) -> Reply:
        if "response_format" in request.body:
            return Reply(status=400, body={"error": {"message": "response_format json_schema is not supported"}})
        return Reply(content=PLAN)

    server = chat_server(respond)
    agents = llm_agents(llm_config(server.base_url, preset="vllm"))
    from accelopt.profiling.evaluation import KernelSource

    request = PlanRequest(kernel=KernelSource(text=BASELINE, name="silu_kernel"), profile=None, count=2)
    result = await agents.planner.plan(request)
    sent_before = len(server.requests)
    later = await agents.planner.plan(request)
    await agents.planner.client.aclose()  # type: ignore[attr-defined]
    assert len(result.plans) == 2 and len(later.plans) == 2
    first = server.requests[0].body["response_format"]
    assert first["type"] == "json_schema" and "title" in first["json_schema"]["schema"]["properties"]
    assert any("free-text" in note for note in result.notes)
    # once refused, every later request goes out as free text
    assert not any("response_format" in r.body for r in server.requests[sent_before:])
