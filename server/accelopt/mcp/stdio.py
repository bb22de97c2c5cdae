"""Serving MCP on stdio so that every way a client ends the session ends it cleanly.

The MCP stdio transport says a client shuts a server down by closing its stdin, then, if it is
still there after a while, SIGTERM (the official SDKs wait about two seconds), then SIGKILL.
Many clients (desktop apps, agents killing their tool processes) send SIGTERM at once. Python's
default for SIGTERM is to die on the spot, which skips the lifespan's cleanup: a running search's
sandboxed workers would be left to notice their parent's death on their own. Here SIGTERM and
SIGHUP (the client's terminal went away) stop the serving loop, the lifespan stops the searches
and closes the backends, and the process exits.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# The lifespan's own cleanup is bounded (server.SHUTDOWN_GRACE_S); this is a last resort.
CLOSE_WAIT_S = 40.0


async def serve_stdio(build: Callable[[anyio.Event], MCPServer[Any]]) -> None:
    """Serve the server `build(closed)` makes; its lifespan sets `closed` once it has cleaned up."""
    closed = anyio.Event()
    server = build(closed)
    async with anyio.create_task_group() as group:
        serving = anyio.CancelScope()

        async def end_on_signal() -> None:
            with anyio.open_signal_receiver(*ENDING_SIGNALS) as signals:
                async for signum in signals:
                    log.info("%s: stopping the searches and exiting", signal.Signals(signum).name)
                    serving.cancel()
                    with anyio.move_on_after(CLOSE_WAIT_S):
                        await closed.wait()
                    # Not a normal return: the transport reads stdin in a thread that only a line
                    # or end-of-input would wake, and the client has stopped sending either.
                    logging.shutdown()
                    os._exit(0)

        group.start_soon(end_on_signal)
        with serving:
            await server.run_stdio_async()
        group.cancel_scope.cancel()


def run_stdio(build: Callable[[anyio.Event], MCPServer[Any]]) -> None:
    anyio.run(serve_stdio, build)
