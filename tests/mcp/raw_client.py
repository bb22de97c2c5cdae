"""An MCP client that is not the SDK's: newline-delimited JSON-RPC written by hand to
`accelopt mcp` on stdio, as a client in another language would. It sends exactly what a test
says (any protocol version, a progress token, a cancellation, a signal) and hands back every
message the server sent, so tests see the wire rather than what an SDK makes of it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from mcp_client import ROOT


class RawMcp:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.notifications: list[dict[str, Any]] = []
        self.answers: dict[int | str, dict[str, Any]] = {}
        self._next_id = 100

    @classmethod
    async def start(cls, memory: Path, *extra: str) -> RawMcp:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accelopt",
            "mcp",
            "--size",
            "small",
            "--memory",
            str(memory),
            *extra,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
            limit=16 * 1024 * 1024,
        )
        return cls(process)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        await self.process.stdin.drain()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.send({"method": method, **({"params": params} if params is not None else {})})

    async def request(
        self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 120
    ) -> dict[str, Any]:
        """The whole answer (`result` or `error`) to one request."""
        self._next_id += 1
        request_id = self._next_id
        await self.send(
            {"id": request_id, "method": method, **({"params": params} if params is not None else {})}
        )
        return await self.answer(request_id, timeout_s)

    async def answer(self, request_id: int | str, timeout_s: float = 120) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while request_id not in self.answers:
                await self.read_one()
        return self.answers.pop(request_id)

    async def read_one(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        assert line, f"the server closed stdout; stderr: {await self.stderr()}"
        message = json.loads(line)
        if "id" in message and ("result" in message or "error" in message):
            self.answers[message["id"]] = message
        else:
            self.notifications.append(message)
        return message

    async def initialize(
        self, protocol_version: str, capabilities: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        answer = await self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw-test-client", "version": "0"},
            },
        )
        await self.notify("notifications/initialized")
        return answer

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
        answer = await self.request("tools/call", {"name": name, "arguments": arguments}, timeout_s)
        assert "result" in answer, answer
        return answer["result"]

    def progress(self, token: str | int) -> list[dict[str, Any]]:
        return [
            n["params"]
            for n in self.notifications
            if n.get("method") == "notifications/progress" and n["params"].get("progressToken") == token
        ]

    async def stderr(self) -> str:
        if self.process.stderr is None or self.process.returncode is None:
            return ""
        return (await self.process.stderr.read()).decode(errors="replace")

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    async def wait(self, timeout_s: float) -> int:
        async with asyncio.timeout(timeout_s):
            return await self.process.wait()

    async def aclose(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


def text_of(result: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in result.get("content", []))
