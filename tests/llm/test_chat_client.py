"""The chat client against a real loopback server: retries, faults, reasoning, usage and cost."""

from __future__ import annotations

import time

from chat_server import Reply

from accelopt.agents.chat import ChatClient
from accelopt.agents.llm_config import LLMConfig
from accelopt.agents.pricing import Price

MESSAGES = [{"role": "system", "content": "ROLE: planner\nbe brief"}, {"role": "user", "content": "hi"}]


def config(server, **overrides) -> LLMConfig:
    values = dict(
        base_url=server.base_url,
        model="test-model",
        timeout_s=2.0,
        max_retries=3,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        prices={"test-model": Price(prompt_per_million=2.0, completion_per_million=8.0)},
    )
    values.update(overrides)
    return LLMConfig(**values)


def scripted(*replies: Reply):
    queue = list(replies)
    return lambda request: queue.pop(0) if len(queue) > 1 else queue[0]


async def test_success_reports_usage_and_cost(chat_server):
    server = chat_server(scripted(Reply(content="answer", prompt_tokens=1000, completion_tokens=500)))
    client = ChatClient(config(server))
    reply = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert reply.error is None and reply.content == "answer"
    assert (reply.prompt_tokens, reply.completion_tokens) == (1000, 500)
    assert abs(reply.dollars - (1000 * 2 + 500 * 8) / 1e6) < 1e-12
    sent = server.requests[0]
    assert sent.model == "test-model" and sent.messages == MESSAGES


async def test_rate_limit_then_success_is_retried_and_noted(chat_server):
    server = chat_server(
        scripted(
            Reply(status=429, body={"error": {"message": "slow down"}}),
            Reply(status=503, body=b"<html>upstream unavailable</html>"),
            Reply(content="ok"),
        )
    )
    client = ChatClient(config(server))
    reply = await client.complete("executor", MESSAGES)
    await client.aclose()
    assert reply.error is None and reply.content == "ok"
    assert len(server.requests) == 3
    assert "429" in reply.notes[0] and "retrying" in reply.notes[0]
    assert "503" in reply.notes[1]


async def test_retry_after_header_is_honoured_but_capped(chat_server):
    server = chat_server(
        scripted(
            Reply(status=429, body={"error": {"message": "wait"}}, headers={"Retry-After": "0.3"}),
            Reply(content="ok"),
        )
    )
    client = ChatClient(config(server, backoff_max_s=0.3))
    started = time.monotonic()
    reply = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert reply.content == "ok"
    assert time.monotonic() - started >= 0.3
    assert "retrying in 0.30 s" in reply.notes[0]


async def test_timeout_is_retried_then_gives_up(chat_server):
    server = chat_server(scripted(Reply(content="late", delay_s=1.0)))
    client = ChatClient(config(server, timeout_s=0.2, max_retries=1))
    reply = await client.complete("fixer", MESSAGES)
    await client.aclose()
    assert reply.error is not None and "timed out" in reply.error
    assert len(reply.notes) == 2 and "giving up after 2 attempts" in reply.notes[-1]


async def test_client_errors_are_not_retried(chat_server):
    server = chat_server(scripted(Reply(status=401, body={"error": {"message": "bad key"}})))
    client = ChatClient(config(server))
    reply = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert len(server.requests) == 1
    assert "401" in (reply.error or "") and "not retried" in reply.notes[0]
    assert "$OPENAI_API_KEY" in (reply.error or "")


async def test_reasoning_field_and_think_tags_are_kept_out_of_the_answer(chat_server):
    server = chat_server(
        scripted(
            Reply(content="final", reasoning_content="let me think"),
            Reply(content="<think>first I consider tiles</think>\nthe answer"),
            Reply(content="still reasoning about it</think>answer two"),
        )
    )
    client = ChatClient(config(server))
    first = await client.complete("planner", MESSAGES)
    second = await client.complete("planner", MESSAGES)
    third = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert (first.content, first.reasoning) == ("final", "let me think")
    assert (second.content, second.reasoning) == ("the answer", "first I consider tiles")
    assert (third.content, third.reasoning) == ("answer two", "still reasoning about it")


async def test_api_key_comes_from_the_named_environment_variable(chat_server, monkeypatch):
    server = chat_server(scripted(Reply(content="ok")))
    monkeypatch.setenv("ACCELOPT_TEST_KEY", "sk-test-secret")
    cfg = config(server, api_key_env="ACCELOPT_TEST_KEY")
    assert "sk-test-secret" not in cfg.model_dump_json()
    client = ChatClient(cfg)
    reply = await client.complete("planner", MESSAGES)
    await client.aclose()
    assert reply.content == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-secret"
