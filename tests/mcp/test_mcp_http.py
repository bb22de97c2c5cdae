"""`accelopt mcp --http`: the same tools over streamable HTTP, bound to the loopback interface."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_client import EXAMPLES, ROOT, server_parameters, structured


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_listening(port: int, process: asyncio.subprocess.Process) -> None:
    with anyio.fail_after(30):
        while True:
            assert process.returncode is None, "the server exited before it listened"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def test_streamable_http_on_loopback(tmp_path: Path) -> None:
    port = _free_port()
    stdio = server_parameters(tmp_path / "memory.sqlite", "--http", "--port", str(port))
    process = await asyncio.create_subprocess_exec(
        sys.executable, *stdio.args, env=stdio.env, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        await _wait_listening(port, process)
        # loopback only: nothing answers on the machine's other addresses
        bound = _listening_addresses(port)
        assert bound and all(address == "127.0.0.1" for address in bound), bound
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                assert "optimize_kernel" in names
                result = structured(
                    await session.call_tool(
                        "profile_kernel", {"path": str(EXAMPLES / "silu.py"), "check": False}
                    )
                )
                assert result["profile"]["backend_label"] == "simulated on trn1"
    finally:
        process.terminate()
        await process.wait()


def _listening_addresses(port: int) -> list[str]:
    """Local addresses with a TCP socket listening on `port` (Linux /proc/net/tcp)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # LISTEN
                if len(address) == 8:
                    found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
                else:
                    found.append(address)
    return found
