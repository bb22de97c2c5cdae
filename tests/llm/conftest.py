from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from chat_server import ChatServer, Responder


@pytest.fixture
def chat_server() -> Iterator[Callable[[Responder], ChatServer]]:
    """Start a scripted chat-completions server on loopback: `server = chat_server(responder)`."""
    started: list[ChatServer] = []

    def start(responder: Responder) -> ChatServer:
        server = ChatServer(responder).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
