"""Code actions: "Optimize kernel `name` with AccelOpt", one "Apply candidate N" per ranked
candidate of the kernel's latest search, and the quick fix that declares a kernel's inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lsprotocol import types

from accelopt.lsp.codelens import OPTIMIZE_COMMAND
from accelopt.lsp.diagnostics import MISSING_INPUTS, SOURCE
from accelopt.lsp.discovery import KernelInfo
from accelopt.lsp.optimize import SearchSession
from accelopt.search.speedup_words import speedup_words

APPLY_COMMAND = "accelopt.applyCandidate"
REJECT_COMMAND = "accelopt.rejectCandidate"
HUNKS_COMMAND = "accelopt.candidateHunks"
APPLY_HUNKS_COMMAND = "accelopt.applyHunks"


def optimize_action(uri: str, kernel: KernelInfo) -> types.CodeAction:
    return types.CodeAction(
        title=f"Optimize kernel `{kernel.name}` with AccelOpt",
        kind=types.CodeActionKind.RefactorRewrite,
        data={"action": "optimize", "uri": uri, "kernel": kernel.name},
    )


def candidate_title(rank: int, speedup: float | None, percent_of_peak: float | None, title: str) -> str:
    if speedup is None:
        parts = ["untimed"]
    else:
        parts = [speedup_words(speedup, "×")]
    if percent_of_peak is not None:
        parts.append(f"{percent_of_peak:.0%} of peak")
    label = f"Apply candidate {rank}: {', '.join(parts)}"
    return f"{label} — {title}" if title else label


def candidate_actions(session: SearchSession) -> list[types.CodeAction]:
    actions = []
    for rank, candidate in enumerate(session.ranked(), start=1):
        title = candidate.plan.title if candidate.plan else ""
        actions.append(
            types.CodeAction(
                title=candidate_title(rank, candidate.speedup, candidate.percent_of_peak, title),
                kind=types.CodeActionKind.RefactorRewrite,
                data={"action": "apply", "searchId": session.id, "candidateId": candidate.id},
            )
        )
    return actions


def resolve(action: types.CodeAction) -> types.CodeAction:
    """Fill in the command of a lazily built action (codeAction/resolve)."""
    data: dict[str, Any] = action.data or {}
    if data.get("action") == "optimize":
        action.command = types.Command(
            title=action.title, command=OPTIMIZE_COMMAND, arguments=[data["uri"], data["kernel"]]
        )
    elif data.get("action") == "apply":
        action.command = types.Command(
            title=action.title, command=APPLY_COMMAND, arguments=[data["searchId"], data["candidateId"]]
        )
    return action


def declare_inputs_fix(
    uri: str, kernel: KernelInfo, lines: Sequence[str], diagnostic: types.Diagnostic
) -> types.CodeAction | None:
    """Insert the suggested `# accelopt: inputs ...` line directly above the kernel's decorators."""
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    directive = data.get("directive")
    if diagnostic.source != SOURCE or diagnostic.code != MISSING_INPUTS or not directive:
        return None
    header = lines[kernel.first_line] if kernel.first_line < len(lines) else ""
    indent = header[: len(header) - len(header.lstrip())]
    at = types.Position(line=kernel.first_line, character=0)
    edit = types.TextEdit(range=types.Range(start=at, end=at), new_text=f"{indent}{directive}\n")
    return types.CodeAction(
        title=f"Declare the inputs of `{kernel.name}`: {directive}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        is_preferred=True,
        edit=types.WorkspaceEdit(changes={uri: [edit]}),
    )
