"""JSON-RPC 2.0 and LSP 3.17 rules an independent client relies on, checked on the wire with a
client that is not pygls (raw_lsp.py): every request gets an answer with the code the specs
name, notifications nobody handles are ignored, and the lifecycle (before `initialize`, after
`shutdown`, signals) ends the way LSP says. ($/cancelRequest and window/workDoneProgress/cancel
on a running search: test_optimize.py.)"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from raw_lsp import RawLsp

HOVER = {"textDocument": {"uri": "file:///nowhere/k.py"}, "position": {"line": 0, "character": 0}}


async def test_every_request_is_answered_with_the_code_the_specs_name(tmp_path: Path) -> None:
    client = await RawLsp.start()
    try:
        # before `initialize`: -32002, and a notification is dropped without an answer
        early = await client.request("textDocument/hover", HOVER)
        assert early["error"]["code"] == -32002, early
        await client.notify("textDocument/didClose", {"textDocument": {"uri": "file:///nowhere/k.py"}})

        # a body that is not JSON: ParseError with id null; JSON that is not JSON-RPC: InvalidRequest
        await client.write_body(b'{"jsonrpc": "2.0", "id": 1, "method": ')
        parse = await client.response(None)
        assert parse["error"]["code"] == -32700 and parse["id"] is None, parse
        await client.write_body(b'{"id": "no-version", "method": "shutdown"}')
        invalid = await client.response("no-version")
        assert invalid["error"]["code"] == -32600, invalid

        answer = await client.initialize(tmp_path)
        assert "capabilities" in answer["result"], answer
        again = await client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert again["error"]["code"] == -32600, again  # LSP: initialize is sent once
        # a request on a file the editor never opened (and that does not exist): no hover, no error
        assert (await client.request("textDocument/hover", HOVER))["result"] is None

        # params that do not fit the method: InvalidParams naming what is wrong, with the request's id
        bad = await client.request(
            "textDocument/hover", {"textDocument": HOVER["textDocument"], "position": {}}
        )
        assert bad["error"]["code"] == -32602 and "position" in bad["error"]["message"], bad
        # the same for AccelOpt's own requests
        custom = await client.request("accelopt/optimize", {"uri": 5, "kernelName": "k"})
        assert custom["error"]["code"] == -32602 and "uri" in custom["error"]["message"], custom
        # unknown methods, `$/` ones included: MethodNotFound; unknown notifications: ignored
        assert (await client.request("accelopt/noSuchThing", {}))["error"]["code"] == -32601
        assert (await client.request("$/noSuchThing", {}))["error"]["code"] == -32601
        await client.notify("$/noSuchThing", {"anything": 1})
        await client.notify("accelopt/noSuchNotification", {})
        # the server still serves (hover on a file it was never given: an error, not silence)
        still = await client.request("accelopt/memory", {})
        assert "result" in still, still

        assert (await client.request("shutdown"))["result"] is None
        after = await client.request("textDocument/hover", HOVER)
        assert after["error"]["code"] == -32600, after  # LSP: InvalidRequest after shutdown
        await client.notify("exit")
        assert await asyncio.wait_for(client.process.wait(), 20) == 0
        # every request was answered once, and nothing answered a notification
        assert not [m for m in client.received if "id" in m and "method" not in m], client.received
    finally:
        await client.aclose()


@pytest.mark.parametrize("when", ["before initialize", "after initialize"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_a_signal_ends_the_server_with_status_zero(tmp_path: Path, when: str, signum: int) -> None:
    client = await RawLsp.start()
    try:
        if when == "after initialize":
            await client.initialize(tmp_path)
            assert "result" in await client.request("accelopt/memory", {})
        else:  # serving, but not initialized
            assert (await client.request("textDocument/hover", HOVER))["error"]["code"] == -32002
        client.process.send_signal(signum)
        assert await asyncio.wait_for(client.process.wait(), 20) == 0
    finally:
        await client.aclose()
