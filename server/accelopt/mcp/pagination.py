"""List requests with a cursor this server never handed out are refused, as MCP asks.

Every list (tools, resources, resource templates, prompts) fits one page, so no answer carries a
`nextCursor` and any cursor a client sends back is not one of ours. The specification's
pagination rules (2025-06-18, utilities/pagination, "Error Handling") say invalid cursors SHOULD
be an error -32602; the SDK ignores the cursor and answers the first page again, which a client
that pages would take for a page it has not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

PAGINATED = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})


async def refuse_foreign_cursors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: an error for a list request with a cursor (an empty one counts as none)."""
    if ctx.method in PAGINATED and isinstance(ctx.params, Mapping):
        cursor = ctx.params.get("cursor")
        if cursor not in (None, ""):
            raise MCPError(
                INVALID_PARAMS,
                f"{ctx.method}: invalid cursor (every list fits one page, which has no nextCursor)",
                {"cursor": cursor},
            )
    return await call_next(ctx)
