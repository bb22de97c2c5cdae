"""Code lenses above each kernel: where it stands ("34% of peak · hbm-bound") and "Optimize"."""

from __future__ import annotations

from lsprotocol import types

from accelopt.lsp.discovery import KernelInfo
from accelopt.lsp.engine import ProfileOutcome
from accelopt.lsp.hover import PROFILING

OPTIMIZE_COMMAND = "accelopt.optimize"


def status_title(outcome: ProfileOutcome | None) -> str:
    if outcome is None:
        return PROFILING
    if outcome.task_problem is not None:
        return (
            "declare inputs to profile"
            if outcome.task_problem.directive
            else "inputs directive has a problem"
        )
    if outcome.error is not None:
        return "profiling failed"
    evaluation = outcome.evaluation
    assert evaluation is not None
    profile = evaluation.profile
    if profile is not None and evaluation.status in ("ok", "incorrect"):
        return f"{profile.percent_of_peak:.0%} of peak · {profile.bound}-bound"
    return evaluation.status.replace("_", " ")


def kernel_lenses(
    uri: str, kernel: KernelInfo, outcome: ProfileOutcome | None, search_note: str | None
) -> list[types.CodeLens]:
    line_range = types.Range(
        start=types.Position(line=kernel.first_line, character=0),
        end=types.Position(line=kernel.first_line, character=0),
    )
    # An empty command id makes a lens a label: VS Code shows it without making it clickable.
    status = types.CodeLens(range=line_range, command=types.Command(title=status_title(outcome), command=""))
    optimize = types.CodeLens(
        range=line_range,
        command=types.Command(
            title=search_note or "Optimize", command=OPTIMIZE_COMMAND, arguments=[uri, kernel.name]
        ),
    )
    return [status, optimize]
