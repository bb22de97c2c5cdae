"""Serving MCP on stdio so that every way a client ends the session ends it cleanly.

The MCP stdio transport says a client shuts a server down by closing its stdin, then, if it is
still there after a while, SIGTERM (the official SDKs wait about two seconds), then SIGKILL.
Many clients (desktop apps, agents killing their tool processes) send SIGTERM at once. Python's
default for SIGTERM is to die on the spot, which skips the lifespan's cleanup: a running search's
sandboxed workers would be left to notice their parent's death on their own. Here SIGTERM and
SIGHUP (the client's terminal went away) stop the serving loop, the lifespan stops the searches
and closes the backends, and the process exits.

A line that is not a JSON-RPC message gets the answer JSON-RPC 2.0 asks for (the SDK's stdio
transport hands the server an exception, and the server drops it): -32700 Parse error for text
that is not JSON, -32600 Invalid Request for JSON that is not a message, with `"id": null`
unless the line named the id of a request.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

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
            await serve_answering_unreadable_lines(server)
        group.cancel_scope.cancel()


def run_stdio(build: Callable[[anyio.Event], MCPServer[Any]]) -> None:
    anyio.run(serve_stdio, build)


async def serve_answering_unreadable_lines(server: MCPServer[Any]) -> None:
    """`server.run_stdio_async()`, with the lines the transport could not read answered."""
    # The SDK's own stdio loop, on a stream that leaves out (and answers) unreadable lines.
    lowlevel = server._lowlevel_server
    async with stdio_server() as (from_client, to_client):
        readable_in, readable = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            async with readable_in:
                async for item in from_client:
                    if not isinstance(item, Exception):
                        await readable_in.send(item)
                        continue
                    log.info("answered an unreadable line: %s", item)
                    try:
                        await to_client.send(SessionMessage(error_for_unreadable(item)))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            await lowlevel.run(readable, to_client, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


def error_for_unreadable(error: Exception) -> JSONRPCError:
    errors = error.errors() if isinstance(error, ValidationError) else []
    if any(e["type"] == "json_invalid" for e in errors) or not errors:
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error"))
    # A request (it names a method) whose id is usable is answered on that id.
    request = next(
        (e["input"] for e in errors if isinstance(e["input"], dict) and "method" in e["input"]), {}
    )
    request_id = request.get("id")
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id if isinstance(request_id, int | str) and not isinstance(request_id, bool) else None,
        error=ErrorData(code=INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 message"),
    )
