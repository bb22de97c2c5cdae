"""A real HTTP server speaking the OpenAI chat-completions API on loopback, with scripted replies.

A test gives it a `responder`: a function from the parsed request to a `Reply` (status, body,
delay, ...). The server records every request so tests can assert on prompts. It runs the
standard library's threading HTTP server in a background thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None  # the assistant message; None with `body` set sends `body` verbatim
    status: int = 200
    body: bytes | dict[str, Any] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    reasoning_content: str | None = None
    prompt_tokens: int = 100
    completion_tokens: int = 50
    drop_connection: bool = False
    finish_reason: str = "stop"


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def system(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "system"), "")

    @property
    def user(self) -> str:
        return "\n".join(m["content"] for m in self.messages if m["role"] == "user")

    @property
    def role(self) -> str:
        """Which agent role asked: the prompts start their system message with 'ROLE: <name>'."""
        for line in self.system.splitlines():
            if line.startswith("ROLE:"):
                return line.split(":", 1)[1].strip()
        return "unknown"


Responder = Callable[[ChatRequest], Reply]


def completion_body(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


class ChatServer:
    """`models` and `props` are what `GET /v1/models` and `GET /props` answer (404 when None);
    `slots` makes the server take that many chat requests at a time, queueing the rest inside
    the server the way llama.cpp and Ollama do. `most_in_flight` is the most requests it held at
    once (queued or served)."""

    def __init__(
        self,
        responder: Responder,
        *,
        models: dict[str, Any] | None = None,
        props: dict[str, Any] | None = None,
        slots: int | None = None,
    ) -> None:
        self.responder = responder
        self.requests: list[ChatRequest] = []
        self.models = models
        self.props = props
        self.in_flight = 0
        self.most_in_flight = 0
        self._slots = threading.Semaphore(slots) if slots else None
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                body = server.models if path.endswith("/v1/models") else server.props if path.endswith("/props") else None
                if body is None:
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                else:
                    self._send(200, json.dumps(body).encode(), {})

            def do_POST(self) -> None:
                with server._lock:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    if server._slots is None:
                        self._post()
                    else:
                        with server._slots:
                            self._post()
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _post(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                    return
                request = ChatRequest(
                    model=body.get("model", ""),
                    messages=body.get("messages", []),
                    body=body,
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
                with server._lock:
                    server.requests.append(request)
                reply = server.responder(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop_connection:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if reply.body is None:
                    payload = json.dumps(completion_body(reply, request.model)).encode()
                elif isinstance(reply.body, bytes):
                    payload = reply.body
                else:
                    payload = json.dumps(reply.body).encode()
                self._send(reply.status, payload, reply.headers)

            def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to do

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="chat-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def requests_for(self, role: str) -> list[ChatRequest]:
        with self._lock:
            return [r for r in self.requests if r.role == role]
