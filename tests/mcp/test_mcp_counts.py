"""What `get_search` and the progress messages count while a search runs: evaluations the
backend really ran, never more than the search's own final count (a client polling get_search
saw it drop at the end: duplicates of earlier kernels and agents' failures were counted)."""

from __future__ import annotations

from accelopt.mcp.searches import SearchRun
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Candidate
from accelopt.search.config import SearchConfig
from accelopt.search.events import CandidateEvent, Finished, IterationEvent, Started

KERNEL = KernelSource(text="def k(x):\n    return x\n", name="k", path="k.py")


def _candidate(cid: str, status: str, duplicate_of: str | None = None) -> Candidate:
    return Candidate.model_validate(
        {
            "id": cid,
            "parent_id": "c0",
            "iteration": 0,
            "kernel": KERNEL,
            "status": status,
            "duplicate_of": duplicate_of,
        }
    )


def test_duplicates_and_agent_failures_move_the_progress_but_are_not_evaluations() -> None:
    config = SearchConfig(iterations=2, beam_width=1, plans_per_kernel=4, samples_per_plan=1, search_id="s")
    run = SearchRun(id="s", kernel=KERNEL, config=config, agents="offline", backend="simulator")
    baseline = Candidate(id="c0", parent_id=None, iteration=0, kernel=KERNEL, status="ok")
    run.apply(
        Started(
            search_id="s",
            kernel_name="k",
            backend="simulator",
            hardware="trn1",
            agents="offline",
            baseline=baseline,
            config=config,
        )
    )
    for candidate in (
        _candidate("c1", "ok"),
        _candidate("c2", "ok", duplicate_of="c1"),  # the same kernel again: served from the cache
        _candidate("c3", "agent_error"),  # the agent wrote no kernel
        _candidate("c4", "incorrect"),
    ):
        run.apply(CandidateEvent(search_id="s", candidate=candidate, ranking=["c1", "c0"]))
    assert run.judged == 4  # each moved the progress bar
    assert run.evaluated == 2 and run.result(5).evaluations == 2

    # the iteration's own count (the baseline's evaluation too) wins when it is higher
    run.apply(IterationEvent(search_id="s", iteration=1, total_iterations=2, best_speedup=1.0, evaluations=3))
    assert run.result(5).evaluations == 3
    run.apply(Finished(search_id="s", reason="completed", evaluations=3))
    assert run.result(5).evaluations == 3
