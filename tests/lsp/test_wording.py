"""What the hover card and the search's progress say, from the models alone (no server)."""

from __future__ import annotations

import re

from accelopt.lsp.codelens import STOPPING, search_title, status_title
from accelopt.lsp.engine import ProfileOutcome
from accelopt.lsp.hover import BOUND_LABELS, profile_markdown
from accelopt.lsp.optimize import SearchSession
from accelopt.profiling.evaluation import Evaluation
from accelopt.profiling.profile import LineCost, Profile


def profile(bound: str = "hbm", lines: list[LineCost] | None = None) -> Profile:
    return Profile(
        backend="simulator",
        hardware="trn2",
        latency_ms=2.5,
        peak_latency_ms=0.5,
        percent_of_peak=0.2,
        bound=bound,  # type: ignore[arg-type]
        hbm_read_bytes=3 << 20,
        hbm_write_bytes=1 << 20,
        tensor_engine_active_time_percent=0.05,
        dma_active_time_percent=0.7,
        vector_engine_active_time_percent=0.4,
        lines=lines or [],
    )


def session(**fields: object) -> SearchSession:
    base: dict[str, object] = dict(
        id="s",
        uri="file:///k.py",
        kernel_name="k",
        start_version=1,
        start_text="",
        path="/k.py",
        backend="simulator",
        hardware="trn1",
        max_candidates=3,
        total_iterations=4,
    )
    return SearchSession(**{**base, **fields})  # type: ignore[arg-type]


def test_every_bound_has_a_human_label_in_the_card_and_the_lens():
    for bound, label in BOUND_LABELS.items():
        card = profile_markdown("k", profile(bound))
        assert f"· {label}  \n" in card
        assert bound + "-bound" not in card and f"({label})" not in card
        outcome = ProfileOutcome(kernel_name="k", evaluation=Evaluation(status="ok", profile=profile(bound)))
        assert status_title(outcome) == f"20% of peak · {label}"


def test_the_card_leads_with_the_headline_and_sorts_engines_by_how_busy_they_are():
    card = profile_markdown("k", profile())
    assert card.splitlines()[:5] == [
        "**`k`** · simulated on trn2",
        "",
        "**2.5 ms** · 20% of peak (roofline 500 µs) · HBM-bandwidth bound  ",
        "HBM traffic: 3.0 MiB read · 1.0 MiB written  ",
        "Engines busy: DMA 70% · Vector 40% · Tensor 5% · Scalar 0% · GpSimd 0%",
    ]
    assert "Costliest" not in card  # no lines attributed: no empty heading


def test_costliest_lines_are_three_short_lines_of_code():
    long = "result = nl.multiply(" + ", ".join(f"operand_{i}" for i in range(12)) + ")"
    lines = [
        LineCost(line=10 + i, time_ms=1.0 + i, fraction=0.3, instructions=1, text=text)
        for i, text in enumerate(["    " + long, "x = `odd`", "", "never shown"])
    ]
    card = profile_markdown("k", profile(lines=lines))
    listed = re.findall(r"^(\d)\. line (\d+) · 30% · ([\d.]+ ms)(.*)$", card, re.MULTILINE)
    assert [(rank, line) for rank, line, _, _ in listed] == [("1", "10"), ("2", "11"), ("3", "12")]
    first, second, third = (code for _, _, _, code in listed)
    assert first.startswith(" `result = nl.multiply(operand_0") and first.endswith("…`")
    assert len(first) <= 64
    assert second == " `` x = `odd` ``"  # a backtick in the code gets a longer fence
    assert third == ""


def test_iterations_are_counted_from_one_while_running_and_as_completed_when_done():
    assert session(iteration=0).iteration_label() == "iteration 1 of 4"
    assert session(iteration=1).iteration_label() == "iteration 2 of 4"
    assert session(iteration=4).iteration_label() == "iteration 4 of 4"
    assert session(iteration=3, running=False).iteration_label() == "iteration 3 of 4"
    assert (
        search_title(session(iteration=1, best_speedup=1.25)) == "Optimizing… iteration 2 of 4 · best 1.25×"
    )


def test_a_cancelled_search_says_stopping_and_tells_its_host_once():
    told: list[str] = []
    running = session(on_cancel=lambda: told.append("refresh"))
    running.cancel("test")
    running.cancel("again")
    assert running.stopping and told == ["refresh"]
    assert search_title(running) == STOPPING
    done = session(running=False, on_cancel=lambda: told.append("late"))
    done.cancel("after the end")
    assert not done.stopping and told == ["refresh"]


def test_the_progress_message_leaves_out_a_cost_of_nothing():
    assert session(iteration=0, evaluations=3).progress_message() == (
        "iteration 1 of 4 · no faster kernel yet · 3 evaluated"
    )
    assert session(iteration=2, best_speedup=1.5, dollars=0.25).progress_message() == (
        "iteration 3 of 4 · best 1.50× · 0 evaluated · $0.25"
    )


class _Host:
    """A SearchHost that records nothing: only the session's own counts are under test."""

    def notify(self, method: str, payload: dict) -> None: ...

    def search_progress(self, token: str | int, value: object) -> None: ...

    def search_changed(self, uri: str) -> None: ...


def test_evaluated_counts_what_the_backend_ran_and_ends_at_the_searchs_own_figure():
    from accelopt.lsp.config import ServerSettings
    from accelopt.lsp.optimize import SearchManager
    from accelopt.profiling.evaluation import KernelSource
    from accelopt.search.candidate import Candidate
    from accelopt.search.events import CandidateEvent, Finished

    kernel = KernelSource(text="def k(x):\n    return x\n", name="k", path="/k.py")
    manager = SearchManager(ServerSettings, _Host())
    running = session()
    for cid, status, duplicate_of in (
        ("c1", "ok", None),
        ("c2", "ok", "c1"),  # the same kernel again: served from the cache
        ("c3", "agent_error", None),  # the agent wrote no kernel
        ("c4", "incorrect", None),
    ):
        candidate = Candidate(
            id=cid,
            parent_id="c0",
            iteration=0,
            kernel=kernel,
            status=status,
            duplicate_of=duplicate_of,  # type: ignore[arg-type]
        )
        manager._apply(running, CandidateEvent(search_id="s", candidate=candidate))
    assert "2 evaluated" in running.progress_message()
    manager._apply(running, Finished(search_id="s", reason="completed", evaluations=3))  # with the baseline
    assert "3 evaluated" in running.progress_message()
