"""The language server ends when its editor has gone, even if nobody closed its stdin.

An editor that crashes or is killed normally takes the server's stdin with it, and the server
reads end-of-file. But when something else still holds the pipe (a wrapper script, a terminal
multiplexer, a child process that inherited it) the server would run on, and its searches and
workers with it. The LSP `initialize` request names the client's process id for exactly this:
the server checks every few seconds that the process is still there and, once it is not, closes
what it started and exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from accelopt.lsp.signals import close_and_exit

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0


def process_alive(pid: int) -> bool:
    """True while `pid` names a running process (a zombie, dead but not yet reaped, is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, belongs to another user
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            # "pid (command) state ...": the command may hold spaces and parentheses
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill() said it exists
    return state not in ("Z", "X")


async def end_when_gone(
    pid: int, close: Callable[[], Awaitable[None]], every_s: float = CHECK_EVERY_S
) -> None:
    """Wait until process `pid` has gone, then `close()` and end this process."""
    while process_alive(pid):
        await asyncio.sleep(every_s)
    log.warning("the editor (process %d) has gone without closing the connection: shutting down", pid)
    await close_and_exit(close)
