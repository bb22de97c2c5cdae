"""The test client's side of the editor: what VS Code would do, for the LSP end-to-end tests.

The `Editor` plays the part of VS Code: it keeps the documents it opened (and their versions),
applies `workspace/applyEdit` requests the way an editor does (refusing a stale version), and
records the AccelOpt notifications.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from accelopt.lsp.edits import apply_edits
from accelopt.lsp.server import plain

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Small inputs and a tiny search: the behaviour is the same as with full-size work, only faster.
SERVER_OPTIONS: dict[str, Any] = {
    "inputSize": "small",
    "diagnosticsDelayS": 0.05,
    "maxCandidates": 3,
    "search": {
        "iterations": 1,
        "beamWidth": 2,
        "plansPerCandidate": 2,
        "samplesPerPlan": 1,
        "correctnessSeeds": 2,
        "fixAttempts": 0,
    },
}


def server_command() -> list[str]:
    return [sys.executable, "-m", "accelopt", "lsp", "--log-level", "WARNING"]


def make_workspace(root: Path) -> Path:
    """The example kernel (with its reference module) and the test kernels, in a scratch folder."""
    for name in ("silu.py", "silu_ref.py"):
        shutil.copy(REPO / "kernels_examples" / name, root / name)
    for source in (HERE / "workspace").glob("*.py"):
        shutil.copy(source, root / source.name)
    return root


class Editor:
    def __init__(self, client: LanguageClient, root: Path) -> None:
        self.client = client
        self.root = root
        self.docs: dict[str, tuple[int, str]] = {}
        self.candidates: list[dict[str, Any]] = []
        self.states: list[dict[str, Any]] = []
        self.lens_refreshes = 0
        self.applied: list[types.ApplyWorkspaceEditParams] = []

    # -- the client's side of the protocol -----------------------------------------------------

    def install(self) -> None:
        client = self.client

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply_edit(ls: LanguageClient, params: types.ApplyWorkspaceEditParams):
            self.applied.append(params)
            for change in params.edit.document_changes or []:
                assert isinstance(change, types.TextDocumentEdit)
                uri, version = change.text_document.uri, change.text_document.version
                if self.docs[uri][0] != version:  # what VS Code does with a stale versioned edit
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason="version mismatch")
                self.change(uri, apply_edits(self.docs[uri][1], list(change.edits)))  # type: ignore[arg-type]
            return types.ApplyWorkspaceEditResult(applied=True)

        @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
        def lens_refresh(ls: LanguageClient, params: None) -> None:
            self.lens_refreshes += 1

        @client.feature("accelopt/candidates")
        def candidates(ls: LanguageClient, params: Any) -> None:
            self.candidates.append(plain(params))

        @client.feature("accelopt/searchState")
        def search_state(ls: LanguageClient, params: Any) -> None:
            self.states.append(plain(params))

    # -- documents -----------------------------------------------------------------------------

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def open(self, name: str) -> str:
        uri = self.uri(name)
        text = (self.root / name).read_text()
        self.docs[uri] = (1, text)
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )
        return uri

    def change(self, uri: str, text: str) -> None:
        version = self.docs[uri][0] + 1
        self.docs[uri] = (version, text)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def save(self, uri: str) -> None:
        self.client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    def text(self, uri: str) -> str:
        return self.docs[uri][1]

    def line_of(self, uri: str, needle: str) -> int:
        return next(i for i, line in enumerate(self.text(uri).splitlines()) if needle in line)

    # -- requests ------------------------------------------------------------------------------

    async def hover(self, uri: str, line: int, character: int) -> str:
        answer = await self.client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=character),
            )
        )
        assert answer is not None
        assert isinstance(answer.contents, types.MarkupContent)
        return answer.contents.value

    async def hover_kernel(self, uri: str, name: str) -> str:
        line = self.line_of(uri, f"def {name}(")
        return await self.hover(uri, line, self.text(uri).splitlines()[line].index(name) + 1)

    async def profiled_hover(self, uri: str, name: str, timeout_s: float = 90.0) -> str:
        """Hover until the background profile has landed."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = await self.hover_kernel(uri, name)
            if "profiling…" not in text:
                return text
            assert time.monotonic() < deadline, "the profile never landed"
            await asyncio.sleep(0.1)

    async def code_actions(self, uri: str, line: int, diagnostics: list[types.Diagnostic] | None = None):
        return await self.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(
                    start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)
                ),
                context=types.CodeActionContext(diagnostics=diagnostics or []),
            )
        )

    async def command(self, name: str, *arguments: Any) -> Any:
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments))
        )

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        return plain(await self.client.protocol.send_request_async(method, params))


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 90.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def start_session(
    client: LanguageClient, root: Path, options: dict[str, Any], *, workspace_trusted: bool = True
) -> Editor:
    """Initialize like the VS Code extension does: it passes `vscode.workspace.isTrusted`."""
    editor = Editor(client, root)
    editor.install()
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            initialization_options={"workspaceTrusted": workspace_trusted, **options},
        )
    )
    return editor


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: Linux only, like the sandbox)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as raw:
            return raw.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
