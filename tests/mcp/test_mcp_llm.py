"""optimize_kernel with LLM agents: `accelopt mcp --agents llm --llm-base-url URL` uses the same
LLM agents as `accelopt optimize`, here against a loopback chat-completions server with scripted
replies (the real `openai` client, the real simulator, a real SQLite memory)."""

from __future__ import annotations

import json
from pathlib import Path

from chat_server import ChatRequest, ChatServer, Reply
from mcp_client import mcp_session, structured
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from silu_variants import BASELINE, WIDE

from accelopt.profiling.evaluation import KernelSource


def answer(role: str, request: ChatRequest) -> Reply:
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role == "executor":
        return code(WIDE)
    if role == "summarizer":
        return lesson_reply()
    return Reply(status=400, body={"error": {"message": f"unexpected role {role}"}})


async def test_optimize_with_llm_agents_from_the_server_flags(tmp_path: Path) -> None:
    kernel = tmp_path / "silu_test.py"
    kernel.write_text(BASELINE)
    chat = ChatServer(ScriptedEndpoint(answer)).start()
    try:
        flags = ("--agents", "llm", "--llm-base-url", chat.base_url, "--llm-model", "test-model")
        async with mcp_session(tmp_path / "memory.sqlite", *flags, env={"OPENAI_API_KEY": "sk-test"}) as session:
            result = structured(
                await session.call_tool(
                    "optimize_kernel",
                    {
                        "path": str(kernel),
                        "iterations": 1,
                        "beam_width": 1,
                        "plans_per_kernel": 1,
                        "samples_per_plan": 1,
                        "seeds": 1,
                    },
                )
            )
            assert result["agents"].startswith("llm"), result["agents"]
            assert result["reason"] == "completed", result
            [best, *_] = result["candidates"]
            assert best["speedup"] > 1.0 and best["title"] == WIDEN["title"]
            detail = structured(await session.call_tool("get_candidate", {"candidate_id": best["id"]}))
            written = KernelSource(text=detail["text"], name="silu_kernel")
            assert written.normalized_hash() == KernelSource(text=WIDE, name="silu_kernel").normalized_hash()
        assert chat.requests_for("planner") and chat.requests_for("executor")
        assert all(r.model == "test-model" for r in chat.requests)
        assert all(r.headers.get("authorization") == "Bearer sk-test" for r in chat.requests)
    finally:
        chat.stop()
