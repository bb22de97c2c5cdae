"""`accelopt mcp` as a client that is not the SDK sees it: raw JSON-RPC on stdio (raw_client.py).

What an independent client relies on: protocol-version negotiation for older and newer clients,
input and output schemas that are JSON Schema, structured results that match their output
schema, bad arguments answered as `isError` in words (not pydantic's report), progress on the
client's own token, and every way a client ends a session mid-search (cancel, end-of-input,
SIGTERM) leaving no process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

import jsonschema
import pytest
from mcp_client import EXAMPLES
from raw_client import RawMcp, text_of
from search_fixtures import descendants

# What the SDK this server is built on speaks; the newest one is what it answers a client from
# the future with.
KNOWN_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]

# A search long enough to be stopped in the middle (it is never let run to its end).
LONG_SEARCH = {
    "path": str(EXAMPLES / "matmul.py"),
    "agents": "offline",
    "iterations": 8,
    "beam_width": 2,
    "plans_per_kernel": 4,
    "samples_per_plan": 1,
    "seeds": 1,
}


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


async def test_older_and_newer_clients_negotiate_a_version_and_get_valid_schemas(memory: Path) -> None:
    for asked, expected in [("2024-11-05", "2024-11-05"), ("2099-01-01", KNOWN_VERSIONS[-1])]:
        client = await RawMcp.start(memory)
        try:
            answer = await client.initialize(asked)
            assert answer["result"]["protocolVersion"] == expected
            assert answer["result"]["serverInfo"]["name"] == "accelopt"
            assert "tools" in answer["result"]["capabilities"]
            assert (await client.request("ping"))["result"] == {}

            tools = (await client.request("tools/list", {}))["result"]["tools"]
            # a client that pages asks again with a cursor; one page holds everything here
            assert "nextCursor" not in (await client.request("tools/list", {}))["result"]
            # structured output (outputSchema) exists from 2025-06-18 on (test_mcp_versions.py)
            keys = ["inputSchema", "outputSchema"] if expected >= "2025-06-18" else ["inputSchema"]
            for tool in tools:
                for key in keys:
                    schema = tool[key]
                    jsonschema.Draft202012Validator.check_schema(schema)
                    jsonschema.Draft7Validator.check_schema(schema)
                    assert schema["type"] == "object", (tool["name"], key)
        finally:
            await client.close_stdin()
            assert await client.wait(30) == 0
            await client.aclose()

    # the structured results of one session match the output schemas it was listed
    client = await RawMcp.start(memory)
    try:
        await client.initialize("2025-06-18")
        schemas = {
            t["name"]: t["outputSchema"] for t in (await client.request("tools/list", {}))["result"]["tools"]
        }
        for name, arguments in [
            ("list_targets", {}),
            ("profile_kernel", {"path": str(EXAMPLES / "silu.py"), "check": False}),
        ]:
            result = await client.call_tool(name, arguments)
            assert not result.get("isError"), text_of(result)
            jsonschema.validate(result["structuredContent"], schemas[name])
    finally:
        await client.aclose()


async def test_bad_arguments_are_tool_errors_in_words(memory: Path) -> None:
    silu = str(EXAMPLES / "silu.py")
    client = await RawMcp.start(memory)
    try:
        await client.initialize("2025-06-18")
        cases = [
            ("profile_kernel", {"path": 5}, ["argument `path`", "valid string", "got 5"]),
            (
                "profile_kernel",
                {"path": silu, "seeds": "many"},
                ["argument `seeds`", "integer", "got 'many'"],
            ),
            (
                "check_kernel",
                {"path": silu, "hardware": "trn9"},
                ["argument `hardware`", "'trn1'", "got 'trn9'"],
            ),
            ("optimize_kernel", {"path": silu, "iterations": 0}, ["argument `iterations`", "greater than"]),
        ]
        for name, arguments, said in cases:
            result = await client.call_tool(name, arguments)
            text = text_of(result)
            assert result["isError"] is True, text
            assert text.startswith(f"{name}: "), text
            for words in said:
                assert words in text, text
            for noise in ("Arguments", "type=", "errors.pydantic.dev", "Traceback"):
                assert noise not in text, text
        # the server is still serving, and a good call still works
        fine = await client.call_tool("profile_kernel", {"path": silu, "check": False})
        assert not fine.get("isError") and fine["structuredContent"]["status"] == "ok"
    finally:
        await client.aclose()
    assert "Traceback" not in await client.stderr()


async def _search_under_way(client: RawMcp, token: str) -> tuple[int, set[int]]:
    """Start LONG_SEARCH with a progress token; return once a candidate has been judged, with
    the request id and the processes the server has started for it."""
    await client.initialize("2025-06-18")
    request_id = "optimize-1"
    await client.send(
        {
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "optimize_kernel",
                "arguments": LONG_SEARCH,
                "_meta": {"progressToken": token},
            },
        }
    )
    async with asyncio.timeout(90):
        while not any(step["progress"] > 0.05 for step in client.progress(token)):
            await client.read_one()
    steps = client.progress(token)
    values = [step["progress"] for step in steps]
    assert values == sorted(set(values)), values  # progress only ever grows
    assert all(step["total"] == LONG_SEARCH["iterations"] and "search " in step["message"] for step in steps)
    # sandboxed workers come and go with the evaluations: catch some at work
    async with asyncio.timeout(60):
        while not (started := set(descendants(client.process.pid))):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.read_one(), 0.05)
    return request_id, started


def _still_running(pids: set[int], grace_s: float = 2.0) -> set[int]:
    """Which of `pids` are still alive (not zombies) after up to `grace_s`."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = {pid for pid in pids if _alive(pid)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


async def test_cancelled_search_stops_its_workers_and_sends_no_answer(memory: Path) -> None:
    client = await RawMcp.start(memory)
    try:
        request_id, started = await _search_under_way(client, "cancel-me")
        await client.notify(
            "notifications/cancelled", {"requestId": request_id, "reason": "the user pressed stop"}
        )
        async with asyncio.timeout(60):
            while True:
                state = (await client.call_tool("get_search", {}))["structuredContent"]
                if not state["running"]:
                    break
                await asyncio.sleep(0.1)
        assert state["reason"] == "cancelled", state
        assert not _still_running(started), "workers outlived the cancelled search"
        assert request_id not in client.answers  # a cancelled request gets no answer (the spec)
    finally:
        await client.close_stdin()
        assert await client.wait(30) == 0
        await client.aclose()


@pytest.mark.parametrize("ending", ["end of input", "SIGTERM"])
async def test_a_client_that_goes_away_mid_search_leaves_no_process_behind(memory: Path, ending: str) -> None:
    client = await RawMcp.start(memory)
    try:
        _, started = await _search_under_way(client, "going-away")
        ended_at = time.monotonic()
        if ending == "SIGTERM":
            client.signal(signal.SIGTERM)
        else:
            await client.close_stdin()
        status = await client.wait(30)
        took = time.monotonic() - ended_at
        # SIGTERM is an orderly stop (Python's default would be -15, and no cleanup)
        assert status == 0, await client.stderr()
        assert took < 20, took
        assert not _still_running(started), f"left running after {ending}"
        assert "Traceback" not in await client.stderr()
    finally:
        await client.aclose()
