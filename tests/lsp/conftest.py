"""End-to-end fixtures: a real pytest-lsp client talking to `python -m accelopt lsp` over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from lsp_editor import SERVER_OPTIONS, Editor, make_workspace, server_command, start_session
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest_lsp.fixture(config=ClientServerConfig(server_command=server_command()))
async def client(lsp_client: LanguageClient, tmp_path: Path):
    root = make_workspace(tmp_path)
    options = {**SERVER_OPTIONS, "memoryPath": str(tmp_path / "memory.sqlite")}
    lsp_client.editor = await start_session(lsp_client, root, options)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    return client.editor  # type: ignore[attr-defined]
