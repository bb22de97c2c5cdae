"""The language server driven as editors other than VS Code drive it (pytest-lsp's recorded
client capabilities): Neovim's client negotiates UTF-8 positions and has no `documentChanges`;
a bare client offers no optional capability at all (no work-done progress, no configuration, no
code-lens refresh, no dynamic registration); files with CRLF endings and non-ASCII text before
the columns that matter; a file closed while its search runs; `exit` mid-search.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from lsp_editor import REPO, SERVER_OPTIONS, alive, descendants, server_command, wait_until
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from accelopt.lsp.edits import apply_edits

KERNEL = "silu_ядро"  # a name whose UTF-8, UTF-16 and code-point lengths all differ from ASCII's


def _workspace(root: Path) -> tuple[Path, Path]:
    """A CRLF copy of the SiLU example with a non-ASCII kernel name and comments, and a kernel
    that breaks an NKI rule on a line ending in non-ASCII text (an emoji is 2 UTF-16 units)."""
    shutil.copy(REPO / "kernels_examples" / "silu_ref.py", root / "silu_ref.py")
    text = (REPO / "kernels_examples" / "silu.py").read_text()
    text = text.replace("def silu_kernel(x):", f"def {KERNEL}(x):  # «noyau» 🚀").replace(
        '"""SiLU (x * sigmoid(x))', '"""SiLU — x · σ(x)'
    )
    silu = root / "silu_crlf.py"
    silu.write_bytes(text.replace("\n", "\r\n").encode())
    broken = root / "broken.py"
    broken.write_text(
        (REPO / "tests" / "lsp" / "workspace" / "broken.py")
        .read_text()
        .replace("    tile = nl.load(x)", "    tile = nl.load(x)  # 256 > 128 → ошибка 🚀")
    )
    return silu, broken


async def _start(root: Path, capabilities: types.ClientCapabilities) -> tuple[LanguageClient, list[Any]]:
    client = await ClientServerConfig(server_command=server_command()).start()
    assert isinstance(client, LanguageClient)
    applied: list[types.ApplyWorkspaceEditParams] = []

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(
        ls: LanguageClient, params: types.ApplyWorkspaceEditParams
    ) -> types.ApplyWorkspaceEditResult:
        applied.append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    options = {**SERVER_OPTIONS, "memoryPath": str(root / "memory.sqlite"), "workspaceTrusted": True}
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities, root_uri=root.as_uri(), initialization_options=options
        )
    )
    return client, applied


def _open(client: LanguageClient, path: Path) -> str:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=path.read_bytes().decode()
            )
        )
    )
    return path.as_uri()


async def _finished_search(client: LanguageClient, uri: str, on_first: Any = None) -> Any:
    """Start a search with the Optimize command (as a code lens would) and wait for its end;
    `on_first` runs once the first candidate has been streamed."""
    started = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="accelopt.optimize", arguments=[uri, KERNEL])
    )
    search_id = started["searchId"]
    assert search_id, started
    called = False
    deadline = time.monotonic() + 120
    while True:
        state = await client.protocol.send_request_async("accelopt/candidates", {"searchId": search_id})
        if on_first is not None and not called and state.candidates:
            called = True
            await on_first()
        if not state.running:
            return search_id, state
        assert time.monotonic() < deadline, "the search never finished"
        await asyncio.sleep(0.1)


def _edits_of(params: types.ApplyWorkspaceEditParams, uri: str) -> list[types.TextEdit]:
    edit = params.edit
    if edit.changes is not None:
        return list(edit.changes[uri])
    assert edit.document_changes is not None
    (change,) = edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    return list(change.edits)  # type: ignore[arg-type]


async def test_neovim_utf8_positions_with_crlf_and_non_ascii_text(tmp_path: Path) -> None:
    silu, broken = _workspace(tmp_path)
    client, applied = await _start(tmp_path, client_capabilities("neovim@v0.11.0"))
    try:
        assert client.capabilities is not None
        uri, broken_uri = _open(client, silu), _open(client, broken)

        # the diagnostic underlines the whole line, in UTF-8 bytes (the emoji is 4 of them)
        await wait_until(lambda: client.diagnostics.get(broken_uri), what="diagnostics")
        (diagnostic,) = client.diagnostics[broken_uri]
        line = broken.read_text().splitlines()[diagnostic.range.start.line]
        assert "ошибка" in line
        assert diagnostic.range.end.character == len(line.rstrip().encode("utf-8"))

        # hovering the last letter of the name, counted in UTF-8 bytes, finds the kernel
        lines = silu.read_bytes().decode().split("\r\n")
        def_line = next(i for i, text in enumerate(lines) if f"def {KERNEL}(" in text)
        name_end = len(lines[def_line][: lines[def_line].index(KERNEL) + len(KERNEL)].encode("utf-8"))
        position = types.Position(line=def_line, character=name_end - 1)

        async def hover_text() -> str:
            answer = await client.text_document_hover_async(
                types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
            )
            assert answer is not None, "no hover on the kernel's name"
            assert answer.range is not None and (
                answer.range.start.character,
                answer.range.end.character,
            ) == (
                4,
                name_end,
            )
            assert isinstance(answer.contents, types.MarkupContent)
            return answer.contents.value

        while "profiling…" in (card := await hover_text()):
            await asyncio.sleep(0.1)
        assert "% of peak" in card

        # a candidate is applied with `changes` (Neovim has no documentChanges), in UTF-8 columns,
        # keeping the file's CRLF endings
        search_id, state = await _finished_search(client, uri)
        best = state.candidates[0]
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="accelopt.applyCandidate", arguments=[search_id, best.id])
        )
        assert answer["applied"], answer
        (params,) = applied
        assert params.edit.document_changes is None
        after = apply_edits(silu.read_bytes().decode(), _edits_of(params, uri), "utf-8")
        assert after == best.text
        assert "\r\n" in after and "\n" not in after.replace("\r\n", "")
    finally:
        await client.shutdown_session()


async def test_a_bare_client_searches_and_applies_after_closing_the_file(tmp_path: Path) -> None:
    silu, _ = _workspace(tmp_path)
    client, applied = await _start(tmp_path, types.ClientCapabilities())
    try:
        uri = _open(client, silu)

        async def close_the_file() -> None:
            client.text_document_did_close(
                types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )

        search_id, state = await _finished_search(client, uri, on_first=close_the_file)
        assert client.progress_reports == {}, (
            "progress to a client that did not offer window.workDoneProgress"
        )
        assert state.candidates, "the search found nothing to apply"
        best = state.candidates[0]
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="accelopt.applyCandidate", arguments=[search_id, best.id])
        )
        # the file is closed but unchanged on disk: the edit is still sent (LSP's default UTF-16)
        assert answer["applied"], answer
        (params,) = applied
        assert apply_edits(silu.read_bytes().decode(), _edits_of(params, uri)) == best.text

        # once the file changes on disk, a closed file's candidate is refused, in words
        silu.write_bytes(silu.read_bytes().replace(b"TILE_COLS = 512", b"TILE_COLS = 256"))
        second = state.candidates[-1]
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="accelopt.applyCandidate", arguments=[search_id, second.id])
        )
        assert not answer["applied"] and "differs on disk" in answer["message"], answer
        assert len(applied) == 1
    finally:
        await client.shutdown_session()


@pytest.mark.parametrize("ending", ["exit without shutdown", "SIGTERM"])
async def test_the_server_ends_mid_search_without_leaving_processes(tmp_path: Path, ending: str) -> None:
    silu, _ = _workspace(tmp_path)
    client, _ = await _start(tmp_path, client_capabilities("neovim@v0.11.0"))
    server = client._server  # type: ignore[attr-defined]
    assert server is not None
    uri = _open(client, silu)
    started = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="accelopt.optimize", arguments=[uri, KERNEL])
    )
    assert started["searchId"], started
    # the search process and its sandboxed workers, caught at work
    working = await wait_until(lambda: descendants(server.pid), what="the search's processes")
    if ending == "SIGTERM":
        server.send_signal(signal.SIGTERM)
    else:
        client.exit(None)
    returncode = await asyncio.wait_for(server.wait(), 30)
    # LSP: `exit` without `shutdown` first is 1; SIGTERM is an orderly stop (signals.py): the
    # searches are asked to stop and close their workers, then the server exits 0 (not -15)
    assert returncode == (0 if ending == "SIGTERM" else 1)
    await wait_until(
        lambda: not any(alive(pid) for pid in working), timeout_s=10, what="every process to end"
    )
    await client.stop()


async def test_a_client_that_refuses_the_progress_token_still_gets_its_search(tmp_path: Path) -> None:
    """LSP: after an error answer to window/workDoneProgress/create the token must not be used."""
    silu, _ = _workspace(tmp_path)
    client, _ = await _start(tmp_path, client_capabilities("neovim@v0.11.0"))
    refused: list[types.WorkDoneProgressCreateParams] = []

    def refuse(params: types.WorkDoneProgressCreateParams) -> None:
        refused.append(params)
        raise JsonRpcInternalError("this client shows no progress")

    # replaces pytest-lsp's own handler (it would accept the token); stored handlers take params only
    client.protocol.fm.features[types.WINDOW_WORK_DONE_PROGRESS_CREATE] = refuse
    try:
        uri = _open(client, silu)
        _, state = await _finished_search(client, uri)
        assert refused, "the server did not ask for a progress token"
        assert state.candidates, "the search found nothing"
        assert not any(client.progress_reports.get(p.token) for p in refused), client.progress_reports
    finally:
        await client.shutdown_session()
