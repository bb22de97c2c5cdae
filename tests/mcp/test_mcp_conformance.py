"""JSON-RPC 2.0 and MCP rules an independent client relies on, on the raw stdio wire
(raw_client.py): a line that is not a message is answered (-32700 Parse error, -32600 Invalid
Request, `"id": null` when no id can be read), unknown methods are -32601, unknown
notifications are ignored, and the server keeps serving after each. (Cancellation, progress,
ping and pagination: test_mcp_wire.py.)"""

from __future__ import annotations

from pathlib import Path

from raw_client import RawMcp


async def _raw_line(client: RawMcp, line: bytes) -> None:
    assert client.process.stdin is not None
    client.process.stdin.write(line + b"\n")
    await client.process.stdin.drain()


async def test_lines_that_are_not_messages_are_answered_and_serving_goes_on(tmp_path: Path) -> None:
    client = await RawMcp.start(tmp_path / "memory.sqlite")
    try:
        await client.initialize("2025-06-18")
        cases = [
            (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700, None),  # not JSON
            (b"[1, 2]", -32600, None),  # JSON, not a message (and no batches in 2025-06-18)
            (b'{"jsonrpc": "2.0", "id": 7}', -32600, None),  # neither request nor response
            (b'{"jsonrpc": "2.0", "id": "m", "method": 5}', -32600, "m"),  # a request, by its id
        ]
        for line, code, request_id in cases:
            await _raw_line(client, line)
            answer = await client.answer(request_id, timeout_s=30)
            assert answer["error"]["code"] == code and answer["id"] == request_id, (line, answer)
            assert (await client.request("ping"))["result"] == {}, line

        assert (await client.request("no/such/method", {}))["error"]["code"] == -32601
        await client.notify("notifications/no_such_thing", {"x": 1})
        await client.notify("$/no_such_thing")
        assert (await client.request("ping"))["result"] == {}
        # prompts (there are none) and resources are advertised, and both lists answer
        assert (await client.request("prompts/list", {}))["result"]["prompts"] == []
        assert (await client.request("resources/list", {}))["result"]["resources"]
        # one page each (no nextCursor), so a cursor sent back is not ours: -32602
        first = (await client.request("tools/list", {}))["result"]
        assert first["tools"] and "nextCursor" not in first
        assert (await client.request("tools/list", {"cursor": "page-2"}))["error"]["code"] == -32602
        assert (await client.request("resources/list", {"cursor": "x"}))["error"]["code"] == -32602
        # unknown names are protocol errors (-32602), a tool that fails is an `isError` result
        assert (await client.request("prompts/get", {"name": "nope"}))["error"]["code"] == -32602
        unknown = await client.request("tools/call", {"name": "no_such_tool", "arguments": {}})
        assert unknown["error"]["code"] == -32602 and "no_such_tool" in unknown["error"]["message"], unknown
        failed = await client.call_tool("profile_kernel", {"path": str(tmp_path / "missing.py")})
        assert failed["isError"] is True and "missing.py" in failed["content"][0]["text"], failed
    finally:
        await client.close_stdin()
        assert await client.wait(30) == 0
        await client.aclose()
