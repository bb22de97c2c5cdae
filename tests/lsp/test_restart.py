"""A server killed mid-search: the search dies with it (workers included), a restarted server
starts clean, and the optimization memory is intact."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsp_editor import (
    SERVER_OPTIONS,
    alive,
    descendants,
    make_workspace,
    server_command,
    start_session,
    wait_until,
)
from pytest_lsp import ClientServerConfig

from accelopt.search.candidate import Experience, Lesson
from accelopt.search.memory import Memory


async def test_restart_mid_search_starts_clean_and_keeps_the_memory(tmp_path: Path):
    root = make_workspace(tmp_path)
    memory_path = tmp_path / "memory.sqlite"
    with Memory(memory_path) as memory:
        kept = memory.add(
            Experience(
                slow_kernel="slow",
                fast_kernel="fast",
                speedup=1.5,
                lesson=Lesson(title="fuse the activation", plan="use one activation instruction"),
                kernel_family="silu",
            )
        )
    options = {**SERVER_OPTIONS, "memoryPath": str(memory_path)}
    config = ClientServerConfig(server_command=server_command())

    client = await config.start()
    editor = await start_session(client, root, options)
    uri = editor.open("silu.py")
    token = "doomed"
    client.progress_reports[token] = []
    search = client.protocol.send_request(
        "accelopt/optimize",
        {"uri": uri, "kernelName": "silu_kernel", "workDoneToken": token, "options": {"iterations": 8}},
    )
    await wait_until(lambda: editor.states, what="the search to start")
    search_id = editor.states[0]["searchId"]
    await asyncio.sleep(1.0)  # let it get some evaluations going

    server = client._server
    assert server is not None
    workers = descendants(server.pid)
    server.kill()
    await server.wait()
    await client.stop()
    assert search.done(), "the pending request must fail when the server dies"
    # nothing the search started outlives the server
    await wait_until(lambda: not any(alive(pid) for pid in workers), 15, "the workers to exit")

    restarted = await config.start()
    editor = await start_session(restarted, root, {**options, "prestartSearchProcess": False})
    listed = await editor.request("accelopt/candidates", {"searchId": search_id})
    assert listed is None, "a restarted server knows no searches"
    memory = await editor.request("accelopt/memory", {"limit": 50})
    assert kept in [e["id"] for e in memory["experiences"]]
    with Memory(memory_path) as reopened:
        assert reopened.recovery is None, "the memory database must not need recovery"
        assert reopened.get(kept) is not None
    await restarted.shutdown_session()
    await restarted.stop()
