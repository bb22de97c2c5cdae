"""An LSP client that is not pygls: Content-Length framed JSON-RPC written by hand to
`accelopt lsp`, so a test can send what a real client library would never send (a body that is
not JSON, a request before `initialize`, params of the wrong type) and see the wire itself."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from lsp_editor import REPO, server_command


class RawLsp:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.received: list[dict[str, Any]] = []
        self._next_id = 0

    @classmethod
    async def start(cls) -> RawLsp:
        command = server_command()
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
        return cls(process)

    async def write_body(self, body: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.process.stdin.drain()

    async def send(self, message: dict[str, Any]) -> None:
        await self.write_body(json.dumps({"jsonrpc": "2.0", **message}).encode())

    async def request(self, method: str, params: Any = None, timeout_s: float = 60) -> dict[str, Any]:
        """The whole response (`result` or `error`) to one request."""
        self._next_id += 1
        request_id = self._next_id
        await self.send(
            {"id": request_id, "method": method, **({"params": params} if params is not None else {})}
        )
        return await self.response(request_id, timeout_s)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send({"method": method, **({"params": params} if params is not None else {})})

    async def response(self, request_id: int | str | None, timeout_s: float = 60) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                for message in self.received:
                    if "method" not in message and message.get("id", "absent") == request_id:
                        self.received.remove(message)
                        return message
                await self.read_one()

    async def read_one(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        length = None
        while True:
            header = await self.process.stdout.readline()
            assert header, "the server closed its stdout"
            if header in (b"\r\n", b"\n"):
                break
            name, _, value = header.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None
        message = json.loads(await self.process.stdout.readexactly(length))
        self.received.append(message)
        return message

    async def initialize(self, root: Path) -> dict[str, Any]:
        answer = await self.request(
            "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}}
        )
        await self.notify("initialized", {})
        return answer

    async def aclose(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
