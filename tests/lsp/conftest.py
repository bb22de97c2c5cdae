"""End-to-end fixtures: a real pytest-lsp client talking to `python -m accelopt lsp` over stdio."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsp_editor import SERVER_OPTIONS, Editor, make_workspace, server_command, start_session
from pytest_lsp import ClientServerConfig, LanguageClient


# One server per test module (starting one costs seconds: lsprotocol's types are big); the
# modules' tests therefore run in the module's event loop (`pytestmark` in each module).
@pytest_lsp.fixture(config=ClientServerConfig(server_command=server_command()), scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory: pytest.TempPathFactory):
    root = make_workspace(tmp_path_factory.mktemp("workspace"))
    options = {**SERVER_OPTIONS, "memoryPath": str(root / "memory.sqlite")}
    lsp_client.editor = await start_session(lsp_client, root, options)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest.fixture(scope="module")
def editor(client: LanguageClient) -> Editor:
    return client.editor  # type: ignore[attr-defined]
