"""Which folders the language server may run kernels from.

Opening a file must not run code the user has not chosen to trust: the server profiles a kernel
(runs it, sandboxed) on open, hover, save and optimize. It does so only for files inside

- a workspace folder, when the editor says the workspace is trusted (`workspaceTrusted`, which
  the VS Code extension sets from `vscode.workspace.isTrusted` and updates with the
  `accelopt/workspaceTrusted` notification when the user grants trust), or
- a folder listed in `trustedFolders` (for editors without workspace trust).

Both come only from `initializationOptions` (the editor's own configuration) or that
notification, never from `workspace/configuration`, whose answer may come from a settings file
inside the very repository being judged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRUST_KEYS = ("workspaceTrusted", "trustedFolders")
WORKSPACE_TRUSTED = "accelopt/workspaceTrusted"

UNTRUSTED = (
    "AccelOpt runs kernels only in trusted folders, and this file is not in one: trust the "
    "workspace (VS Code: Manage Workspace Trust), or list its folder in `trustedFolders` in the "
    "server's initializationOptions (other editors)."
)


def without_trust(layer: dict[str, Any] | None) -> dict[str, Any] | None:
    """A `workspace/configuration` answer with the trust keys removed (see the module doc)."""
    if not isinstance(layer, dict):
        return layer
    return {key: value for key, value in layer.items() if key not in TRUST_KEYS}


@dataclass(frozen=True)
class FolderTrust:
    workspace_trusted: bool
    workspace_folders: tuple[str, ...]
    trusted_folders: tuple[str, ...]

    def allows(self, path: str | None) -> bool:
        """Whether kernels in the file at `path` may run (an unsaved buffer: only in a trusted
        workspace)."""
        if not path:
            return self.workspace_trusted
        target = _resolved(path)
        folders = [*self.trusted_folders, *(self.workspace_folders if self.workspace_trusted else ())]
        return any(_within(target, _resolved(folder)) for folder in folders)


def _resolved(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def folder_of(uri_path: str | None) -> str | None:
    return str(Path(uri_path).parent) if uri_path else None
