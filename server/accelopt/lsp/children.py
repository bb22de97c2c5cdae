"""What the language server's two kinds of child process (profile_process.py, search_process.py)
share: how they are started and how they read their JSON lines."""

from __future__ import annotations

import asyncio
import sys

LINE_LIMIT = 64 * 1024 * 1024  # events carry whole kernels (and rankings of them)


async def start_child(module: str) -> asyncio.subprocess.Process:
    """`python -m module` with pipes for stdin and stdout (stderr: the server's own)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )


async def stdin_lines() -> asyncio.StreamReader:
    """In the child: its stdin as a stream of lines of up to LINE_LIMIT bytes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader
