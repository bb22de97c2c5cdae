"""Each protocol version gets the answers its own schema defines (accelopt.mcp.versions).

A client that negotiated 2024-11-05 gets no `outputSchema`, `structuredContent`, `title` or tool
`annotations`, and no progress `message`; it reads a tool's result from the JSON text content,
as results were read then. 2025-03-26 adds the annotations, 2025-06-18 structured output. Seen
on the wire (raw_client.py) and through the real SDK client made to speak 2024-11-05.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_client import EXAMPLES, mcp_session, structured
from raw_client import RawMcp, text_of

TINY_SEARCH = {
    "path": str(EXAMPLES / "silu.py"),
    "agents": "offline",
    "iterations": 1,
    "beam_width": 1,
    "plans_per_kernel": 1,
    "samples_per_plan": 1,
    "seeds": 1,
}


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
async def test_answers_have_the_fields_of_the_negotiated_version(memory: Path, version: str) -> None:
    structured_output = version >= "2025-06-18"
    client = await RawMcp.start(memory)
    try:
        answer = (await client.initialize(version))["result"]
        assert answer["protocolVersion"] == version
        assert ("title" in answer["serverInfo"]) == structured_output  # `title`: 2025-06-18

        tools = {tool["name"]: tool for tool in (await client.request("tools/list", {}))["result"]["tools"]}
        for tool in tools.values():
            assert "inputSchema" in tool and tool["description"]
            assert ("outputSchema" in tool) == structured_output, (version, tool["name"])
            assert ("title" in tool) == structured_output, (version, tool["name"])
            assert ("annotations" in tool) == (version >= "2025-03-26"), (version, tool["name"])
        for resource in (await client.request("resources/list", {}))["result"]["resources"]:
            assert ("title" in resource) == structured_output, resource

        result = await client.call_tool("list_targets", {})
        assert not result.get("isError"), text_of(result)
        from_text = json.loads(text_of(result))  # every version can read the JSON text
        assert {t["name"] for t in from_text["targets"]} >= {"trn1", "trn2"}
        if structured_output:
            assert result["structuredContent"] == from_text
        else:
            assert "structuredContent" not in result

        # an unknown resource: -32002, the code the specifications up to 2025-11-25 name
        missing = await client.request("resources/read", {"uri": "accelopt://hardware/trn9"})
        assert missing["error"]["code"] == -32002, missing
    finally:
        await client.close_stdin()
        assert await client.wait(30) == 0
        await client.aclose()


async def test_progress_has_no_message_for_a_2024_11_05_client(memory: Path) -> None:
    client = await RawMcp.start(memory)
    try:
        await client.initialize("2024-11-05")
        answer = await client.request(
            "tools/call",
            {"name": "optimize_kernel", "arguments": TINY_SEARCH, "_meta": {"progressToken": "old"}},
            timeout_s=240,
        )
        assert not answer["result"].get("isError"), text_of(answer["result"])
        assert "structuredContent" not in answer["result"]
        assert json.loads(text_of(answer["result"]))["search_id"]
        progress = client.progress("old")
        assert progress, "no progress was sent"
        assert all(set(step) <= {"progressToken", "progress", "total"} for step in progress), progress
    finally:
        await client.aclose()


async def test_the_sdk_client_reads_results_at_2024_11_05_and_at_its_own_version(
    memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the SDK client at its own (newest) version: structured results
    async with mcp_session(memory) as session:
        newest = structured(await session.call_tool("list_targets", {}))
        assert session.protocol_version >= "2025-06-18"
        assert all(tool.output_schema for tool in (await session.list_tools()).tools)

    # the same client built to speak 2024-11-05 (the version it offers at `initialize`)
    monkeypatch.setattr("mcp.client.session.LATEST_HANDSHAKE_VERSION", "2024-11-05")
    async with mcp_session(memory) as session:
        assert session.protocol_version == "2024-11-05"
        tools = (await session.list_tools()).tools
        assert tools and all(tool.output_schema is None and tool.title is None for tool in tools)
        result = await session.call_tool("list_targets", {})
        assert not result.is_error and result.structured_content is None
        assert json.loads(" ".join(getattr(b, "text", "") for b in result.content)) == newest
