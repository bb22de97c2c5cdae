"""The real MCP SDK client talking to `accelopt mcp` started as a subprocess over stdio."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "kernels_examples"


def server_parameters(memory: Path, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "ACCELOPT_MEMORY": str(memory),
        **(env or {}),
    }
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "accelopt", "mcp", "--size", "small", "--memory", str(memory), *extra],
        env=env,
        cwd=str(ROOT),
    )


@asynccontextmanager
async def mcp_session(
    memory: Path, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with stdio_client(server_parameters(memory, *extra, env=env)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def structured(result: CallToolResult) -> dict[str, Any]:
    """The tool's structured result; fails with the tool's own message when it is an error."""
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    assert result.structured_content is not None, text
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return " ".join(getattr(block, "text", "") for block in result.content)
