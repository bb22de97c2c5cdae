"""Answers shaped for the protocol version the client negotiated.

The SDK serves every version up to 2025-11-25 with the newest schema, so a client that
negotiated an older version also gets fields that version does not define: `outputSchema` and
`structuredContent` (structured tool output, new in 2025-06-18), `title` (2025-06-18), tool
`annotations` (2025-03-26). A client written against an older schema may validate strictly, or
take `structuredContent` for a result it cannot read. This middleware drops, per negotiated
version, what that version's schema does not have. The text content keeps the whole result as
JSON, which is how results were read before structured output existed. An unknown resource
is answered with the code those versions name (-32002), not the SDK's -32602 (SEP-2164, for the
versions after 2025-11-25).

Sources: the MCP specification's changelogs, modelcontextprotocol.io/specification/2025-03-26/changelog
(tool annotations, audio content, progress `message`), /2025-06-18/changelog (structured tool
output, `title`, `_meta` on more types, resource links) and /2025-11-25/changelog (icons, tasks).
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

RESOURCE_NOT_FOUND = -32002

V2025_03_26 = "2025-03-26"
V2025_06_18 = "2025-06-18"
V2025_11_25 = "2025-11-25"

# The version that first defined each field, for each kind of object we send.
TOOL_FIELDS = {
    "annotations": V2025_03_26,
    "title": V2025_06_18,
    "outputSchema": V2025_06_18,
    "_meta": V2025_06_18,
    "icons": V2025_11_25,
    "execution": V2025_11_25,
}
DESCRIBED_FIELDS = {"title": V2025_06_18, "_meta": V2025_06_18, "icons": V2025_11_25}  # resources, prompts
IMPLEMENTATION_FIELDS = {
    "title": V2025_06_18,
    "icons": V2025_11_25,
    "websiteUrl": V2025_11_25,
    "description": V2025_11_25,
}
CALL_RESULT_FIELDS = {"structuredContent": V2025_06_18}
CONTENT_FIELDS = {"_meta": V2025_06_18}
CONTENT_TYPES = {"audio": V2025_03_26, "resource_link": V2025_06_18}  # text, image, resource: all versions
CAPABILITY_FIELDS = {"completions": V2025_03_26, "tasks": V2025_11_25, "extensions": V2025_11_25}


def defines(version: str, added_in: str) -> bool:
    """Versions are dates (YYYY-MM-DD), so they order as strings."""
    return version >= added_in


def _fit(item: dict[str, Any], fields: dict[str, str], version: str) -> dict[str, Any]:
    return {key: value for key, value in item.items() if defines(version, fields.get(key, ""))}


def _fit_content(blocks: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    return [
        _fit(block, CONTENT_FIELDS, version)
        for block in blocks
        if defines(version, CONTENT_TYPES.get(block.get("type", ""), ""))
    ]


def fit_result(method: str, result: dict[str, Any], version: str) -> dict[str, Any]:
    """`result` (a wire dict) without the fields `version` does not define."""
    fitted = dict(result)
    if method == "initialize":
        if isinstance(fitted.get("serverInfo"), dict):
            fitted["serverInfo"] = _fit(fitted["serverInfo"], IMPLEMENTATION_FIELDS, version)
        if isinstance(fitted.get("capabilities"), dict):
            fitted["capabilities"] = _fit(fitted["capabilities"], CAPABILITY_FIELDS, version)
    elif method == "tools/list":
        fitted["tools"] = [_fit(tool, TOOL_FIELDS, version) for tool in fitted.get("tools", [])]
    elif method == "tools/call":
        fitted = _fit(fitted, CALL_RESULT_FIELDS, version)
        fitted["content"] = _fit_content(fitted.get("content", []), version)
    elif method in ("resources/list", "resources/templates/list", "prompts/list"):
        key = {"resources/list": "resources", "prompts/list": "prompts"}.get(method, "resourceTemplates")
        fitted[key] = [_fit(item, DESCRIBED_FIELDS, version) for item in fitted.get(key, [])]
    elif method == "resources/read":
        fitted["contents"] = [_fit(item, CONTENT_FIELDS, version) for item in fitted.get("contents", [])]
    return fitted


def _is_resource_not_found(error: MCPError) -> bool:
    """The SDK's answer to an unknown URI: InvalidParams naming the URI (malformed params never
    reach the handler, they fail validation first)."""
    return error.code == INVALID_PARAMS and isinstance(error.data, dict) and "uri" in error.data


def progress_message(version: str | None, message: str | None) -> str | None:
    """Progress notifications carry a `message` from 2025-03-26 on."""
    return message if version is None or defines(version, V2025_03_26) else None


async def fit_to_negotiated_version(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Server middleware: the answer to each request, fitted to the connection's version (for
    `initialize`, the version it is answering with)."""
    try:
        result = await call_next(ctx)
    except MCPError as exc:
        if (
            ctx.method == "resources/read"
            and _is_resource_not_found(exc)
            and ctx.protocol_version <= V2025_11_25
        ):
            # The specifications up to 2025-11-25 name -32002 for an unknown resource (server/
            # resources, "Error Handling"); the SDK answers -32602, as SEP-2164 settles it for
            # the versions after.
            raise MCPError(RESOURCE_NOT_FOUND, exc.message, exc.data) from exc
        raise
    if ctx.request_id is None or not isinstance(result, dict):
        return result
    version = result.get("protocolVersion") if ctx.method == "initialize" else ctx.protocol_version
    if not isinstance(version, str) or defines(version, V2025_11_25):
        return result
    return fit_result(ctx.method, result, version)
