"""Profiles of the kernels in open documents, computed in the background and cached.

Hover, code lens and diagnostics all read the same entry, keyed by (uri, document version,
kernel). A request for an entry that is not there yet starts its profile and returns at once;
when the profile lands, `on_ready(uri, version)` lets the server refresh lenses and diagnostics.
Entries are also shared by content (the module text's normalized hash and the settings that
shape a profile), so a save that only touched comments, or reopening a file, costs nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from accelopt.lsp.config import ServerSettings
from accelopt.lsp.engine import ProfileOutcome
from accelopt.lsp.profile_process import ProfileProcess
from accelopt.profiling.evaluation import KernelSource

log = logging.getLogger(__name__)

DocKey = tuple[str, int, str]  # uri, version, kernel name
# normalized module hash, its `# accelopt:` directives (comments, so not in that hash), file path,
# backend, hardware, input size, kernel name
ContentKey = tuple[str, ...]
_DIRECTIVE = re.compile(r"^\s*#\s*accelopt:.*$", re.MULTILINE)


@dataclass
class _Entry:
    task: asyncio.Task[ProfileOutcome]
    waiters: set[tuple[str, int]] = field(default_factory=set)


class ProfileStore:
    def __init__(
        self,
        process: ProfileProcess,
        settings: Callable[[], ServerSettings],
        on_ready: Callable[[str, int], None],
        max_entries: int = 512,
    ) -> None:
        self._process = process
        self._settings = settings
        self._on_ready = on_ready
        self._max_entries = max_entries
        self._by_content: OrderedDict[ContentKey, _Entry] = OrderedDict()
        self._by_doc: dict[DocKey, ContentKey] = {}

    def _content_key(self, kernel: KernelSource, settings: ServerSettings) -> ContentKey:
        return (
            kernel.normalized_hash(),
            "\n".join(_DIRECTIVE.findall(kernel.text)),
            kernel.path or "",
            settings.backend,
            settings.hardware,
            settings.input_size,
            kernel.name,
        )

    def request(self, uri: str, version: int, kernel: KernelSource) -> ProfileOutcome | None:
        """The finished profile, or None after making sure one is on its way."""
        doc_key = (uri, version, kernel.name)
        content_key = self._by_doc.get(doc_key)
        if content_key is None:
            content_key = self._content_key(kernel, self._settings())
            self._drop_superseded(uri, version, kernel.name, content_key)
            self._by_doc[doc_key] = content_key
        entry = self._by_content.get(content_key)
        if entry is not None and entry.task.done() and self._result(entry).transient:
            entry = None  # the profile process died under it: this request tries again
        if entry is None:
            entry = _Entry(asyncio.create_task(self._process.profile(kernel, self._settings())))
            entry.task.add_done_callback(functools.partial(self._landed, content_key))
            self._by_content[content_key] = entry
            self._evict()
        else:
            self._by_content.move_to_end(content_key)
        if entry.task.done():
            return self._result(entry)
        entry.waiters.add((uri, version))
        return None

    def _drop_superseded(self, uri: str, version: int, name: str, content_key: ContentKey) -> None:
        """Someone typing makes a new version every keystroke: a profile still running for an
        older version of this kernel, that no other document shares, is no longer wanted."""
        for (doc_uri, doc_version, doc_name), old_key in list(self._by_doc.items()):
            if doc_uri != uri or doc_name != name or doc_version >= version or old_key == content_key:
                continue
            entry = self._by_content.get(old_key)
            if entry is None or entry.task.done():
                continue
            if any(k == old_key for d, k in self._by_doc.items() if (d[0], d[2]) != (uri, name)):
                continue
            entry.task.cancel()
            del self._by_content[old_key]
            del self._by_doc[(doc_uri, doc_version, doc_name)]

    def peek(self, uri: str, version: int, name: str) -> ProfileOutcome | None:
        content_key = self._by_doc.get((uri, version, name))
        entry = self._by_content.get(content_key) if content_key else None
        return self._result(entry) if entry and entry.task.done() else None

    def forget_document(self, uri: str) -> None:
        for key in [k for k in self._by_doc if k[0] == uri]:
            del self._by_doc[key]

    def clear(self) -> None:
        """Settings changed: profiles made under the old ones are no longer what the user sees."""
        for entry in self._by_content.values():
            entry.task.cancel()
        self._by_content.clear()
        self._by_doc.clear()

    def _result(self, entry: _Entry) -> ProfileOutcome:
        task = entry.task
        if task.cancelled():
            return ProfileOutcome(kernel_name="", error="profile cancelled", transient=True)
        return task.result()  # ProfileProcess.profile never raises

    def _landed(self, content_key: ContentKey, _done: asyncio.Task[ProfileOutcome]) -> None:
        entry = self._by_content.get(content_key)
        if entry is None or entry.task.cancelled():
            return
        waiters, entry.waiters = entry.waiters, set()
        for uri, version in sorted(waiters):
            try:
                self._on_ready(uri, version)
            except Exception:
                log.exception("refresh after profile failed")

    def _evict(self) -> None:
        while len(self._by_content) > self._max_entries:
            key, entry = self._by_content.popitem(last=False)
            if not entry.task.done():  # still wanted: keep it, drop the next oldest instead
                self._by_content[key] = entry
                self._by_content.move_to_end(key, last=False)
                break
        live = set(self._by_content)
        for doc_key in [k for k, v in self._by_doc.items() if v not in live]:
            del self._by_doc[doc_key]
