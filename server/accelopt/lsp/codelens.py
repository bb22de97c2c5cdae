"""Code lenses above each kernel: where it stands ("34% of peak · HBM-bandwidth bound") and
"Optimize", or how the kernel's search is going while one runs."""

from __future__ import annotations

from lsprotocol import types

from accelopt.lsp.discovery import KernelInfo
from accelopt.lsp.engine import ProfileOutcome
from accelopt.lsp.hover import PROFILING, bound_label
from accelopt.lsp.optimize import SearchSession

OPTIMIZE_COMMAND = "accelopt.optimize"
# A client command (the VS Code extension's): opens the engine timeline view of the kernel.
TIMELINE_COMMAND = "accelopt.showTimeline"
STOPPING = "Stopping the search…"


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
        return f"{profile.percent_of_peak:.0%} of peak · {bound_label(profile.bound)}"
    return evaluation.status.replace("_", " ")


def search_title(session: SearchSession) -> str:
    """The second lens while a search runs, in the words of the progress notification."""
    if session.stopping:
        return STOPPING
    best = f" · best {session.best_speedup:.2f}×" if session.best_speedup else ""
    return f"Optimizing… {session.iteration_label()}{best}"


def kernel_lenses(
    uri: str, kernel: KernelInfo, outcome: ProfileOutcome | None, running: SearchSession | None
) -> list[types.CodeLens]:
    line_range = types.Range(
        start=types.Position(line=kernel.first_line, character=0),
        end=types.Position(line=kernel.first_line, character=0),
    )
    # An empty command id makes a lens a label: VS Code shows it without making it clickable.
    status = types.CodeLens(range=line_range, command=types.Command(title=status_title(outcome), command=""))
    if running is not None and running.stopping:
        # nothing to click while the search winds down: a new one would be refused until it ends
        second = types.Command(title=STOPPING, command="")
    else:
        second = types.Command(
            title=search_title(running) if running is not None else "Optimize",
            command=OPTIMIZE_COMMAND,
            arguments=[uri, kernel.name],
        )
    lenses = [status, types.CodeLens(range=line_range, command=second)]
    profiled = outcome is not None and outcome.evaluation is not None and outcome.evaluation.profile is not None
    if profiled:
        timeline = types.Command(title="Timeline", command=TIMELINE_COMMAND, arguments=[uri, kernel.name])
        lenses.append(types.CodeLens(range=line_range, command=timeline))
    return lenses
