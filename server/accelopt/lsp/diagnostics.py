"""Diagnostics from trace-only emulation of each kernel: NKI rule violations and runtime errors at
their line, and a kernel with no way to get inputs (with the declaration to add)."""

from __future__ import annotations

from lsprotocol import types

from accelopt.lsp.discovery import KernelInfo
from accelopt.lsp.engine import ProfileOutcome

SOURCE = "accelopt"
MISSING_INPUTS = "missing-inputs"
TASK_PROBLEM = "inputs-directive"
UNTRUSTED = "untrusted-folder"

_SEVERITY = {
    "syntax_error": types.DiagnosticSeverity.Error,
    "compile_error": types.DiagnosticSeverity.Error,
    "runtime_error": types.DiagnosticSeverity.Error,
    "rejected": types.DiagnosticSeverity.Error,
    "timeout": types.DiagnosticSeverity.Warning,
}


def _line_range(lines: list[str], line: int) -> types.Range:
    """The non-blank extent of a 0-based line (clamped into the document)."""
    line = max(0, min(line, len(lines) - 1)) if lines else 0
    text = lines[line] if lines else ""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    return types.Range(
        start=types.Position(line=line, character=start),
        end=types.Position(line=line, character=max(end, start)),
    )


def _name_range(kernel: KernelInfo) -> types.Range:
    return types.Range(
        start=types.Position(line=kernel.def_line, character=kernel.name_start),
        end=types.Position(line=kernel.def_line, character=kernel.name_end),
    )


def untrusted(kernel: KernelInfo, message: str) -> types.Diagnostic:
    """The one note a file outside the trusted folders gets, on its first kernel's name."""
    return types.Diagnostic(
        range=_name_range(kernel),
        message=message,
        severity=types.DiagnosticSeverity.Information,
        source=SOURCE,
        code=UNTRUSTED,
    )


def kernel_diagnostics(
    kernel: KernelInfo, outcome: ProfileOutcome, lines: list[str]
) -> list[types.Diagnostic]:
    if outcome.task_problem is not None:
        problem = outcome.task_problem
        missing = problem.directive is not None
        where = _line_range(lines, problem.line - 1) if problem.line and not missing else _name_range(kernel)
        return [
            types.Diagnostic(
                range=where,
                message=problem.message + (" (quick fix available)" if missing else ""),
                severity=types.DiagnosticSeverity.Warning,
                source=SOURCE,
                code=MISSING_INPUTS if missing else TASK_PROBLEM,
                data={"kernel": kernel.name, "directive": problem.directive},
            )
        ]
    evaluation = outcome.evaluation
    if evaluation is None or evaluation.status not in _SEVERITY:
        return []
    where = _line_range(lines, evaluation.line - 1) if evaluation.line else _name_range(kernel)
    label = evaluation.error_code or evaluation.status.replace("_", " ")
    message = f"{label}: {evaluation.message}" if evaluation.message else label
    if evaluation.assumed:
        message += f" (assuming {evaluation.assumed})"
    return [
        types.Diagnostic(
            range=where,
            message=message,
            severity=_SEVERITY[evaluation.status],
            source=SOURCE,
            code=evaluation.error_code or evaluation.status,
            data={"kernel": kernel.name},
        )
    ]


def document_diagnostics(
    kernels: list[KernelInfo], outcomes: dict[str, ProfileOutcome], text: str
) -> list[types.Diagnostic]:
    """All kernels' diagnostics; a fault every kernel shares (a syntax error) is reported once."""
    lines = text.splitlines()
    seen: set[tuple[int, str]] = set()
    result: list[types.Diagnostic] = []
    for kernel in kernels:
        outcome = outcomes.get(kernel.name)
        if outcome is None:
            continue
        for diagnostic in kernel_diagnostics(kernel, outcome, lines):
            key = (diagnostic.range.start.line, diagnostic.message.split(": ", 1)[-1])
            if key not in seen:
                seen.add(key)
                result.append(diagnostic)
    return result
