"""The AccelOpt language server: LSP in, engine calls out, engine models back as LSP.

Each feature's logic lives in its own module (hover, codelens, diagnostics, actions, optimize,
memory_view); this file holds the shared state and registers the handlers. Every handler is
async and returns quickly: profiles and searches run as background tasks whose CPU work happens
in the backend's sandboxed worker processes, so the event loop only ever shuffles messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections import OrderedDict
from typing import Any, TypeVar
from urllib.parse import unquote

from lsprotocol import types
from pydantic import BaseModel, ValidationError
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from accelopt.lsp import actions, codelens, diagnostics, hover, positions, trust
from accelopt.lsp.client_watch import end_when_gone
from accelopt.lsp.config import ServerSettings, merge_settings, unknown_keys
from accelopt.lsp.discovery import KernelInfo, find_kernels
from accelopt.lsp.edits import hunk_lines, minimal_edits
from accelopt.lsp.engine import ProfileOutcome, warm_task_imports
from accelopt.lsp.lifecycle import LifecycleProtocol
from accelopt.lsp.memory_view import list_experiences
from accelopt.lsp.optimize import SearchManager, SearchRefused, SearchSession
from accelopt.lsp.profile_process import ProfileProcess
from accelopt.lsp.profiles import ProfileStore
from accelopt.lsp.protocol import (
    ApplyResult,
    CancelParams,
    CandidatesParams,
    Hunk,
    MemoryParams,
    OptimizeParams,
    OptimizeStarted,
    SearchTreeParams,
    TimelineParams,
)
from accelopt.lsp.signals import close_on_signals
from accelopt.lsp.timeline import timeline_of
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.isolation import detect as detect_isolation

log = logging.getLogger(__name__)

ParamsT = TypeVar("ParamsT", bound=BaseModel)

OPTIMIZE = "accelopt/optimize"
CANCEL = "accelopt/cancel"
MEMORY = "accelopt/memory"
CANDIDATES = "accelopt/candidates"
TIMELINE = "accelopt/timeline"
SEARCH_TREE = "accelopt/searchTree"


class RequestFailed(JsonRpcException):
    """LSP's RequestFailed: the request was valid but could not be carried out (message says why)."""

    CODE = -32803
    MESSAGE = "Request failed"


def plain(value: Any) -> Any:
    """pygls hands custom-message params over as nested namedtuples: back to JSON-like data."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


class AccelOptServer(LanguageServer):
    def __init__(self) -> None:
        from accelopt import __version__

        super().__init__("accelopt", __version__, protocol_cls=LifecycleProtocol)
        self.init_options: dict[str, Any] = {}
        self.settings = ServerSettings()
        self.profile_process = ProfileProcess()
        self.profiles = ProfileStore(self.profile_process, lambda: self.settings, self._profile_landed)
        self.searches = SearchManager(lambda: self.settings, self)
        self._kernel_cache: OrderedDict[tuple[str, int | None, int], list[KernelInfo]] = OrderedDict()
        self._debounce: dict[str, asyncio.Task[None]] = {}
        self._warming: asyncio.Task[None] | None = None
        self.trust_granted = False
        self.client_watch: asyncio.Future[None] | None = None  # ends the server when the editor has gone
        self.shutdown_received = False
        # Set by `exit`: the connection is closing, so nothing more is sent (a search cancelled by
        # the teardown would otherwise try to report on a closed stdout).
        self.exiting = False
        self.exit_code = 0  # LSP: 0 after a `shutdown` request, 1 when `exit` came without one

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A body the reader could not take in is answered on the wire (lifecycle.py) rather
        than shown to the user as "Error in server"."""
        protocol = self.protocol
        if isinstance(protocol, LifecycleProtocol) and protocol.body_not_handled(error):
            return
        super().report_server_error(error, source)

    def stop_talking(self) -> None:
        """The connection is ending: nothing more is sent to the client."""
        self.exiting = True

    # -- documents and kernels -----------------------------------------------------------------

    def document(self, uri: str) -> TextDocument:
        return self.workspace.get_text_document(uri)

    def kernels(self, doc: TextDocument) -> list[KernelInfo]:
        key = (doc.uri, doc.version, hash(doc.source))  # a re-opened file restarts at version 1
        if key not in self._kernel_cache:
            self._kernel_cache[key] = find_kernels(doc.source)
            if len(self._kernel_cache) > 64:
                self._kernel_cache.popitem(last=False)
        return self._kernel_cache[key]

    def to_client(self, doc: TextDocument, found: list[types.Diagnostic]) -> list[types.Diagnostic]:
        return positions.diagnostics_to_client(self.workspace.position_codec, doc.lines, found)

    def kernel_source(self, doc: TextDocument, name: str) -> KernelSource:
        return KernelSource(text=doc.source, name=name, path=doc.path)

    def may_run(self, doc: TextDocument) -> bool:
        """Whether this document's kernels may run at all (accelopt.lsp.trust)."""
        folders = tuple(
            str(path) for path in (_uri_path(f.uri) for f in self.workspace.folders.values()) if path
        ) or ((self.workspace.root_path,) if self.workspace.root_path else ())
        settings = self.settings
        folder_trust = trust.FolderTrust(
            workspace_trusted=settings.workspace_trusted or self.trust_granted,
            workspace_folders=folders,
            trusted_folders=tuple(settings.trusted_folders),
        )
        path = doc.path if doc.uri.startswith("file:") else None
        return folder_trust.allows(path)

    # -- SearchHost ----------------------------------------------------------------------------

    def notify(self, method: str, payload: dict[str, Any]) -> None:
        if not self.exiting:
            self.protocol.notify(method, payload)

    def search_progress(self, token: str | int, value: Any) -> None:
        if self.exiting:
            return
        progress = self.work_done_progress
        if isinstance(value, types.WorkDoneProgressBegin):
            progress.begin(token, value)
        elif isinstance(value, types.WorkDoneProgressReport):
            progress.report(token, value)
        else:
            progress.end(token, value)
            progress.tokens.pop(token, None)

    def search_changed(self, uri: str) -> None:
        if not self.exiting:
            self.refresh_lenses()

    # -- refreshes -----------------------------------------------------------------------------

    def _client_supports(self, *path: str) -> bool:
        node: Any = self.client_capabilities
        for name in path:
            node = getattr(node, name, None)
            if node is None:
                return False
        return bool(node)

    def refresh_lenses(self) -> None:
        if self._client_supports("workspace", "code_lens", "refresh_support"):
            self.workspace_code_lens_refresh(None)

    def _profile_landed(self, uri: str, version: int) -> None:
        self.refresh_lenses()
        self.publish_if_complete(uri, version)

    def publish_if_complete(self, uri: str, version: int) -> None:
        """Diagnostics for a document version once every kernel in it has been emulated."""
        try:
            doc = self.document(uri)
        except Exception:
            return
        if doc.version != version:
            return
        kernels = self.kernels(doc)
        outcomes: dict[str, ProfileOutcome] = {}
        for k in kernels:
            outcome = self.profiles.peek(uri, version, k.name)
            if outcome is None:
                return
            outcomes[k.name] = outcome
        found = self.to_client(doc, diagnostics.document_diagnostics(kernels, outcomes, doc.source))
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=found)
        )

    def schedule_diagnostics(self, uri: str, delay_s: float) -> None:
        previous = self._debounce.pop(uri, None)
        if previous is not None:
            previous.cancel()
        self._debounce[uri] = asyncio.create_task(self._emulate_document(uri, delay_s))

    async def _emulate_document(self, uri: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        doc = self.document(uri)
        if doc.version is None:
            return
        kernels = self.kernels(doc)
        if not kernels:
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, version=doc.version, diagnostics=[])
            )
            return
        if not self.may_run(doc):
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=uri,
                    version=doc.version,
                    diagnostics=self.to_client(doc, [diagnostics.untrusted(kernels[0], trust.UNTRUSTED)]),
                )
            )
            return
        for kernel in kernels:
            self.profiles.request(uri, doc.version, self.kernel_source(doc, kernel.name))
        self.publish_if_complete(uri, doc.version)

    # -- configuration -------------------------------------------------------------------------

    async def load_configuration(self) -> None:
        workspace_layer: dict[str, Any] | None = None
        if self._client_supports("workspace", "configuration"):
            try:
                answer = await self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section="accelopt")])
                )
                workspace_layer = answer[0] if answer and isinstance(answer[0], dict) else None
            except Exception:
                log.exception("workspace/configuration failed; keeping the initialization options")
        try:
            settings = merge_settings(self.init_options, trust.without_trust(workspace_layer))
        except ValidationError as exc:
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Error,
                    message=f"AccelOpt: invalid settings, keeping the previous ones: {exc.errors()[0]['loc']}: "
                    f"{exc.errors()[0]['msg']}",
                )
            )
            return
        unknown = [key for layer in (self.init_options, workspace_layer) for key in unknown_keys(layer)]
        if unknown:
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Warning,
                    message=f"AccelOpt: unknown settings ignored: {', '.join(sorted(set(unknown)))}",
                )
            )
        changed = settings != self.settings
        self.settings = settings
        log.info("settings: %s", settings.redacted())
        self.searches.processes.keep_spare = settings.prestart_search_process
        self.searches.processes.prime()
        if settings.prestart_search_process and self._warming is None:
            # the same trade as the spare search process: a little memory now, a faster first search
            self._warming = asyncio.create_task(asyncio.to_thread(warm_task_imports))
        if changed:
            self.profiles.clear()
            self.refresh_lenses()
            for doc in list(self.workspace.text_documents.values()):
                self.schedule_diagnostics(doc.uri, 0.0)

    # -- searches ------------------------------------------------------------------------------

    async def start_search(self, params: OptimizeParams) -> SearchSession:
        doc = self.document(params.uri)
        if not self.may_run(doc):
            raise SearchRefused(trust.UNTRUSTED)
        if not any(k.name == params.kernel_name for k in self.kernels(doc)):
            raise SearchRefused(f"no kernel named `{params.kernel_name}` in {params.uri}")
        session = await self.searches.start(
            uri=params.uri,
            kernel_name=params.kernel_name,
            text=doc.source,
            version=doc.version,
            path=doc.path,
            options=params.options,
            token=params.work_done_token,
        )
        if session.token is not None:
            # Cancelling the progress in the client (window/workDoneProgress/cancel) cancels this
            # future (pygls' builtin handler); begin() will reuse it.
            future = self.work_done_progress.tokens.setdefault(session.token, _new_future())
            future.add_done_callback(
                lambda f: session.cancel("progress cancelled") if f.cancelled() else None
            )
        return session

    def candidate_hunks(self, search_id: str, candidate_id: str) -> list[Hunk]:
        session = self.searches.sessions.get(search_id)
        candidate = session.candidates.get(candidate_id) if session else None
        if session is None or candidate is None:
            return []
        hunks = []
        for index, edit in enumerate(minimal_edits(session.start_text, candidate.kernel.text)):
            start, end, removed, added = hunk_lines(session.start_text, edit)
            hunks.append(Hunk(index=index, start_line=start, end_line=end, removed=removed, added=added))
        return hunks

    async def apply_candidate(
        self, search_id: str, candidate_id: str, hunks: list[int] | None = None
    ) -> ApplyResult:
        """Apply the candidate (or only the `hunks` chosen, by index) to the file it was searched
        from; refused, with a message, when the file changed since the search started."""
        session = self.searches.sessions.get(search_id)
        candidate = session.candidates.get(candidate_id) if session else None
        if session is None or candidate is None or candidate_id in session.rejected:
            return self._refuse(f"AccelOpt: no candidate {candidate_id} in search {search_id}")
        doc = self.document(session.uri)
        version: int | None = session.start_version
        if unquote(session.uri) in self.workspace.text_documents:  # pygls keys open documents so
            if doc.version != session.start_version or doc.source != session.start_text:
                return self._refuse(
                    f"AccelOpt: {doc.filename or session.uri} changed since the search on "
                    f"`{session.kernel_name}` started (version {session.start_version}, now {doc.version}); "
                    "the candidate was not applied. Start a new search on the current text."
                )
        else:
            # Closed since the search started: the editor applies an edit to a closed file on
            # disk, so the file must still read as the search's start (with its own line endings).
            version = None
            if _file_text(doc.path) != session.start_text:
                return self._refuse(
                    f"AccelOpt: {doc.filename or session.uri} was closed and differs on disk from the text "
                    f"the search on `{session.kernel_name}` started from; the candidate was not applied. "
                    "Start a new search on the current text."
                )
        changes = positions.edits_to_client(
            self.workspace.position_codec,
            session.start_text.splitlines(keepends=True),
            minimal_edits(session.start_text, candidate.kernel.text),
        )
        rank = next((i for i, c in enumerate(session.ranked(), start=1) if c.id == candidate_id), None)
        label = f"AccelOpt: apply candidate {rank or candidate_id} to `{session.kernel_name}`"
        edits = changes
        if hunks is not None:
            wanted = sorted(set(hunks))
            if not wanted or any(not 0 <= i < len(changes) for i in wanted):
                return self._refuse(f"{label}: no such change (it has {len(changes)}, numbered from 0)")
            edits = [changes[i] for i in wanted]
            label += f" (change {', '.join(str(i + 1) for i in wanted)} of {len(changes)})"
        if self._client_supports("workspace", "workspace_edit", "document_changes"):
            edit = types.WorkspaceEdit(
                document_changes=[
                    types.TextDocumentEdit(
                        text_document=types.OptionalVersionedTextDocumentIdentifier(
                            uri=session.uri, version=version
                        ),
                        edits=edits,
                    )
                ]
            )
        else:
            edit = types.WorkspaceEdit(changes={session.uri: edits})
        answer = await self.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=label))
        if not answer.applied:
            return self._refuse(
                f"{label}: the editor refused the edit ({answer.failure_reason or 'no reason given'})"
            )
        return ApplyResult(applied=True, message=f"{label}: {len(edits)} edit(s)")

    def _refuse(self, message: str) -> ApplyResult:
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
        return ApplyResult(applied=False, message=message)

    async def aclose(self) -> None:
        for task in self._debounce.values():
            task.cancel()
        await self.searches.shutdown()
        self.profiles.clear()
        await self.profile_process.aclose()


def params_of(model: type[ParamsT], raw: Any) -> ParamsT:
    """A custom request's params as their model; params that do not fit are the client's error
    (JSON-RPC InvalidParams, naming the field), not the server's (InternalError, a traceback)."""
    try:
        return model.model_validate(plain(raw) or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        raise JsonRpcInvalidParams(f"{where}: {first['msg']}") from None


def _file_text(path: str) -> str | None:
    """A file's text as saved, line endings untouched (pygls reads closed files with universal
    newlines, which would turn a CRLF file into one that never matches its editor buffer)."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _new_future() -> Any:
    from concurrent.futures import Future

    return Future()


def _wire(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json")


def _uri_path(uri: str) -> str | None:
    from pygls.uris import to_fs_path

    return to_fs_path(uri) if uri.startswith("file:") else None


def create_server() -> AccelOptServer:
    server = AccelOptServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: AccelOptServer, params: types.InitializeParams) -> None:
        options = params.initialization_options
        ls.init_options = options if isinstance(options, dict) else {}
        try:
            ls.settings = merge_settings(ls.init_options)
        except ValidationError as exc:
            log.error("invalid initializationOptions, using defaults: %s", exc)
        close_on_signals(ls.aclose, before=ls.stop_talking)
        if params.process_id is not None and params.process_id != os.getpid():
            ls.client_watch = asyncio.ensure_future(end_when_gone(params.process_id, ls.aclose))

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AccelOptServer, params: types.InitializedParams) -> None:
        await ls.load_configuration()
        isolation = await asyncio.to_thread(detect_isolation)
        if not isolation.kernel_enforced:  # said once, at start (SECURITY.md: what then holds)
            log.warning("%s", isolation.describe())
            ls.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Warning, message=f"AccelOpt {isolation.describe()}"
                )
            )

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def configuration_changed(ls: AccelOptServer, params: types.DidChangeConfigurationParams) -> None:
        await ls.load_configuration()

    @server.feature(trust.WORKSPACE_TRUSTED)
    def workspace_trusted(ls: AccelOptServer, params: Any) -> None:
        """The user granted the workspace trust (VS Code's onDidGrantWorkspaceTrust)."""
        ls.trust_granted = True
        for doc in list(ls.workspace.text_documents.values()):
            ls.schedule_diagnostics(doc.uri, 0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AccelOptServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.profiles.forget_document(params.text_document.uri)  # versions restart at each open
        ls.schedule_diagnostics(params.text_document.uri, 0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AccelOptServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.schedule_diagnostics(params.text_document.uri, ls.settings.diagnostics_delay_s)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AccelOptServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.profiles.forget_document(uri)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def on_hover(ls: AccelOptServer, params: types.HoverParams) -> types.Hover | None:
        doc = ls.document(params.text_document.uri)
        if doc.version is None:  # not open in the editor (pygls would read it from disk, if it is there)
            return None
        position = positions.from_client(ls.workspace.position_codec, doc.lines, params.position)
        kernel = next((k for k in ls.kernels(doc) if k.on_header(position.line, position.character)), None)
        if kernel is None:
            return None
        if not ls.may_run(doc):
            text = f"**{kernel.name}**: not run. {trust.UNTRUSTED}"
        else:
            outcome = ls.profiles.request(doc.uri, doc.version, ls.kernel_source(doc, kernel.name))
            text = (
                hover.pending_markdown(kernel.name)
                if outcome is None
                else hover.outcome_markdown(kernel.name, outcome)
            )
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
            range=positions.range_to_client(
                ls.workspace.position_codec,
                doc.lines,
                types.Range(
                    start=types.Position(line=kernel.def_line, character=kernel.name_start),
                    end=types.Position(line=kernel.def_line, character=kernel.name_end),
                ),
            ),
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    async def on_code_lens(ls: AccelOptServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        doc = ls.document(params.text_document.uri)
        if doc.version is None or not ls.may_run(doc):
            return []
        lenses: list[types.CodeLens] = []
        for kernel in ls.kernels(doc):
            outcome = ls.profiles.request(doc.uri, doc.version, ls.kernel_source(doc, kernel.name))
            running = ls.searches.running_for(doc.uri, kernel.name)
            lenses += codelens.kernel_lenses(doc.uri, kernel, outcome, running)
        return lenses

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.RefactorRewrite, types.CodeActionKind.QuickFix],
            resolve_provider=True,
        ),
    )
    async def on_code_action(ls: AccelOptServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        doc = ls.document(params.text_document.uri)
        line = params.range.start.line
        kernel = (
            next((k for k in ls.kernels(doc) if k.covers(line)), None) if doc.version is not None else None
        )
        if kernel is None:
            return []
        result: list[types.CodeAction] = []
        for diagnostic in params.context.diagnostics:
            fix = actions.declare_inputs_fix(doc.uri, kernel, doc.lines, diagnostic)
            if fix is not None:
                result.append(fix)
        if ls.searches.running_for(doc.uri, kernel.name) is None:
            result.append(actions.optimize_action(doc.uri, kernel))
        latest = ls.searches.latest_for(doc.uri, kernel.name)
        if latest is not None:
            result += actions.candidate_actions(latest)
        if not ls._client_supports("text_document", "code_action", "resolve_support"):
            result = [actions.resolve(a) for a in result]
        return result

    @server.feature(types.CODE_ACTION_RESOLVE)
    def on_code_action_resolve(ls: AccelOptServer, action: types.CodeAction) -> types.CodeAction:
        return actions.resolve(action)

    @server.command(codelens.OPTIMIZE_COMMAND)
    async def optimize_command(ls: AccelOptServer, uri: str, kernel_name: str) -> dict[str, Any]:
        """Starts a search and answers at once with its id; progress is server-initiated."""
        token: str | None = None
        if ls._client_supports("window", "work_done_progress"):
            token = f"accelopt-{uuid.uuid4().hex[:12]}"
            try:
                await ls.work_done_progress.create_async(token)
            except JsonRpcException as exc:
                # LSP: a token the client refused to create must not carry progress; the search
                # runs without it (its state still reaches the client as accelopt/searchState).
                log.info("the client refused progress token %s: %s", token, exc)
                token = None
        try:
            session = await ls.start_search(
                OptimizeParams(uri=uri, kernel_name=kernel_name, work_done_token=token)
            )
        except SearchRefused as exc:
            if token is not None:
                ls.search_progress(token, types.WorkDoneProgressEnd(message=str(exc)))
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=str(exc)))
            return _wire(OptimizeStarted(search_id=None, message=str(exc)))
        return _wire(OptimizeStarted(search_id=session.id))

    @server.command(actions.APPLY_COMMAND)
    async def apply_command(ls: AccelOptServer, search_id: str, candidate_id: str) -> dict[str, Any]:
        return _wire(await ls.apply_candidate(search_id, candidate_id))

    @server.command(actions.APPLY_HUNKS_COMMAND)
    async def apply_hunks_command(
        ls: AccelOptServer, search_id: str, candidate_id: str, hunks: list[int]
    ) -> dict[str, Any]:
        return _wire(await ls.apply_candidate(search_id, candidate_id, list(hunks)))

    @server.command(actions.HUNKS_COMMAND)
    def hunks_command(ls: AccelOptServer, search_id: str, candidate_id: str) -> list[dict[str, Any]]:
        return [_wire(hunk) for hunk in ls.candidate_hunks(search_id, candidate_id)]

    @server.command(actions.REJECT_COMMAND)
    def reject_command(ls: AccelOptServer, search_id: str, candidate_id: str) -> None:
        session = ls.searches.sessions.get(search_id)
        if session is not None:
            session.rejected.add(candidate_id)
            ls.notify(CANDIDATES, _wire(session.notification()))

    @server.feature(OPTIMIZE)
    async def optimize_request(ls: AccelOptServer, raw: Any) -> dict[str, Any]:
        params = params_of(OptimizeParams, raw)
        try:
            session = await ls.start_search(params)
        except SearchRefused as exc:
            raise RequestFailed(str(exc)) from exc
        assert session.task is not None
        try:
            result = await asyncio.shield(session.task)
        except asyncio.CancelledError:
            # $/cancelRequest: stop the search; it still sends its final ranking and ends the progress.
            session.cancel("request cancelled")
            raise
        return _wire(result)

    @server.feature(CANCEL)
    def cancel_request(ls: AccelOptServer, raw: Any) -> None:
        params = params_of(CancelParams, raw)
        session = ls.searches.sessions.get(params.search_id)
        if session is not None:
            session.cancel("accelopt/cancel")

    @server.feature(CANDIDATES)
    def candidates_request(ls: AccelOptServer, raw: Any) -> dict[str, Any] | None:
        params = params_of(CandidatesParams, raw)
        session = ls.searches.sessions.get(params.search_id)
        return _wire(session.notification()) if session else None

    @server.feature(TIMELINE)
    async def timeline_request(ls: AccelOptServer, raw: Any) -> dict[str, Any]:
        params = params_of(TimelineParams, raw)
        doc = ls.workspace.get_text_document(params.uri)
        result = await timeline_of(ls.kernel_source(doc, params.kernel_name), ls.settings, ls.profile_process)
        return _wire(result)

    @server.feature(SEARCH_TREE)
    def search_tree_request(ls: AccelOptServer, raw: Any) -> dict[str, Any] | None:
        params = params_of(SearchTreeParams, raw)
        session = ls.searches.sessions.get(params.search_id)
        return _wire(session.tree()) if session else None

    @server.feature(MEMORY)
    async def memory_request(ls: AccelOptServer, raw: Any) -> dict[str, Any]:
        params = params_of(MemoryParams, raw)
        result = await asyncio.to_thread(list_experiences, ls.settings.memory_path, params)
        return _wire(result)

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: AccelOptServer, params: None) -> None:
        ls.shutdown_received = True
        await ls.aclose()

    @server.feature(types.EXIT)
    def exit_notification(ls: AccelOptServer, params: None) -> None:
        """pygls ends the loop right after this; the searches still running (exit without
        shutdown) are cancelled with it and their processes killed, and they report nothing."""
        ls.stop_talking()
        ls.exit_code = 0 if ls.shutdown_received else 1

    return server
