"""A real editor session whose settings hold a misspelt key: the server says so, by name."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsp_editor import SERVER_OPTIONS, make_workspace, server_command, start_session
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=server_command()), scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory: pytest.TempPathFactory):
    root = make_workspace(tmp_path_factory.mktemp("workspace"))
    options = {
        **SERVER_OPTIONS,
        "memoryPath": str(root / "memory.sqlite"),
        "hardwear": "trn2",
        "agents": {"mode": "offline", "baseUlr": "http://127.0.0.1:1/v1"},
    }
    await start_session(lsp_client, root, options)
    yield
    await lsp_client.shutdown_session()


async def test_misspelt_settings_are_reported(client: LanguageClient):
    for _ in range(100):
        warnings = [m.message for m in client.messages if "unknown settings" in m.message]
        if warnings:
            break
        await asyncio.sleep(0.1)
    assert warnings and "hardwear" in warnings[0] and "agents.baseUlr" in warnings[0]
