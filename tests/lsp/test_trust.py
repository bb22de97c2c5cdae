"""Kernels run only in trusted folders: opening, hovering or optimizing a file elsewhere runs
nothing (no sandbox worker starts) and says why; `trustedFolders` (editors without workspace
trust) and VS Code's trust grant (`accelopt/workspaceTrusted`) open the gate.

The session starts as an editor without workspace trust would: no `workspaceTrusted`, one
folder of the workspace in `trustedFolders`, and a `workspace/configuration` answer that tries to
trust everything (as a settings file inside a hostile repository would), which must not count."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsp_editor import (
    REPO,
    SERVER_OPTIONS,
    Editor,
    cmdline,
    descendants,
    server_command,
    start_session,
    wait_until,
)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from accelopt.lsp.trust import WORKSPACE_TRUSTED

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=server_command()), scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("trust-workspace")
    for folder in ("trusted", "elsewhere"):
        (root / folder).mkdir()
        for name in ("silu.py", "silu_ref.py"):
            shutil.copy(REPO / "kernels_examples" / name, root / folder / name)

    lsp_client.set_configuration({"workspaceTrusted": True, "trustedFolders": [str(root)]}, section="accelopt")

    options = {
        **SERVER_OPTIONS,
        "memoryPath": str(root / "memory.sqlite"),
        "trustedFolders": [str(root / "trusted")],
        "prestartSearchProcess": False,
    }
    lsp_client.editor = await start_session(  # type: ignore[attr-defined]
        lsp_client, root, options, workspace_trusted=False
    )
    yield
    await lsp_client.shutdown_session()


@pytest.fixture(scope="module")
def editor(client: LanguageClient) -> Editor:
    return client.editor  # type: ignore[attr-defined]


def sandbox_workers(editor: Editor) -> list[str]:
    server_pid = editor.client._server.pid  # type: ignore[attr-defined]
    return [c for c in map(cmdline, descendants(server_pid)) if "accelopt.profiling.worker" in c]


async def test_a_file_outside_the_trusted_folders_runs_nothing(editor: Editor):
    uri = editor.open("elsewhere/silu.py")
    found = await wait_until(lambda: editor.client.diagnostics.get(uri), what="diagnostics")
    assert [d.code for d in found] == ["untrusted-folder"]
    assert "trusted folders" in found[0].message and found[0].severity == types.DiagnosticSeverity.Information
    hover = await editor.hover_kernel(uri, "silu_kernel")
    assert "not run" in hover and "trustedFolders" in hover
    with pytest.raises(Exception, match="trusted folders"):
        await editor.request("accelopt/optimize", {"uri": uri, "kernelName": "silu_kernel", "options": {}})
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert not lenses and sandbox_workers(editor) == []


async def test_a_file_in_a_trusted_folder_is_profiled(editor: Editor):
    uri = editor.open("trusted/silu.py")
    text = await editor.profiled_hover(uri, "silu_kernel")
    assert "of peak" in text, text


async def test_granting_workspace_trust_runs_the_rest_of_the_workspace(editor: Editor):
    uri = editor.uri("elsewhere/silu.py")
    editor.client.protocol.notify(WORKSPACE_TRUSTED, {})
    text = await editor.profiled_hover(uri, "silu_kernel")
    assert "of peak" in text, text
    await wait_until(
        lambda: [d.code for d in editor.client.diagnostics.get(uri, [])] != ["untrusted-folder"],
        what="the untrusted note cleared",
    )


async def test_the_folders_path_check_is_by_resolved_path(tmp_path: Path):
    from accelopt.lsp.trust import FolderTrust

    inside = tmp_path / "ok"
    inside.mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    gate = FolderTrust(workspace_trusted=False, workspace_folders=(str(tmp_path),), trusted_folders=(str(inside),))
    assert gate.allows(str(inside / "k.py")) and not gate.allows(str(tmp_path / "okay" / "k.py"))
    assert not gate.allows(str(tmp_path / "k.py")) and not gate.allows(None)
    trusted = FolderTrust(workspace_trusted=True, workspace_folders=(str(tmp_path),), trusted_folders=())
    assert trusted.allows(str(tmp_path / "k.py")) and trusted.allows(None)
    assert not trusted.allows(str(tmp_path.parent / "k.py"))
