"""The JSON-RPC 2.0 and LSP 3.17 message rules pygls leaves to the server, for clients that rely on them.

pygls 2.1 handles the happy path; on the edges it is silent where the specs ask for an answer,
and a client waiting for an answer waits forever:
- a request before `initialize`: LSP asks for error -32002 (ServerNotInitialized), and that
  notifications other than `exit` are dropped. pygls would run the handler (on a workspace
  that does not exist yet).
- a request after `shutdown`: LSP asks for InvalidRequest (-32600). pygls drops it unanswered.
- a second `initialize` (LSP: sent once): InvalidRequest here; pygls would initialize again.
- a request whose params do not fit the method's type: JSON-RPC asks for InvalidParams
  (-32602) with the request's id. pygls fails while decoding, so it never learns the id: no
  answer, and an "Error in server" message shown to the user.
- a body that is not JSON: ParseError (-32700) with id null; one that is JSON but not a
  JSON-RPC message: InvalidRequest (-32600), with its id when it has one. pygls logs both.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
SERVER_NOT_INITIALIZED = -32002

INITIALIZE = "initialize"
EXIT = "exit"


class Unfit:
    """A message that is JSON-RPC but could not be decoded into its method's type."""

    def __init__(self, raw: dict[str, Any], detail: str) -> None:
        self.raw = raw
        self.detail = detail


class LifecycleProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with the answers above."""

    initialize_received = False

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            cause = exc.__cause__
            if isinstance(cause, ClassValidationError):  # "required field missing @ $.params.position"
                return Unfit(data, "; ".join(transform_error(cause)))
            return Unfit(data, str(cause or exc))

    def handle_message(self, message: Any) -> None:
        if isinstance(message, Unfit):
            self._answer_unfit(message)
            return
        method = getattr(message, "method", None)
        if getattr(message, "jsonrpc", None) != "2.0":
            raw_id = message.get("id") if isinstance(message, dict) else None
            self.send_error(
                raw_id if isinstance(raw_id, int | str) else None, INVALID_REQUEST, "Invalid Request"
            )
            return
        is_request = method is not None and hasattr(message, "id")
        if method is not None and method != EXIT:
            if not self.initialize_received and method != INITIALIZE:
                if is_request:
                    self.send_error(
                        message.id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet"
                    )
                return  # LSP: notifications before initialize are dropped
            if self._shutdown and is_request:
                self.send_error(message.id, INVALID_REQUEST, f"{method}: the server has been shut down")
                return
        if method == INITIALIZE:
            if self.initialize_received and is_request:  # LSP: sent once per connection
                self.send_error(message.id, INVALID_REQUEST, "initialize: the server is already initialized")
                return
            self.initialize_received = True
        super().handle_message(message)

    def _answer_unfit(self, message: Unfit) -> None:
        raw = message.raw
        method = raw.get("method")
        if "id" not in raw or method is None:
            log.warning("dropped a notification or response that does not fit its type: %s", message.detail)
            return
        if not self.initialize_received and method != INITIALIZE:
            self.send_error(raw["id"], SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet")
            return
        self.send_error(raw["id"], INVALID_PARAMS, f"{method}: invalid params: {message.detail}")

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        """An error response written as JSON-RPC has it: `"id": null` when the id is unknown (the
        lsprotocol model would leave the key out)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def body_not_handled(self, error: Exception) -> bool:
        """The reader loop could not take a body in (pygls hands that to the server's error
        reporter): answer a body that is not JSON. True when answered."""
        if isinstance(error, json.JSONDecodeError):
            self.send_error(None, PARSE_ERROR, f"Parse error: {error}")
            return True
        return False
