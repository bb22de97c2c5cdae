"""Spills removed by reordering, on our own kernels in both styles: two [128, 20480] rows loaded
up front do not fit SBUF with the first result (the timing model spills); moving the second
load down to its first use removes the spill and the simulated latency drops. The planner
proposes the move only on a profile that reports spills: without them it would only delay a
prefetch."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.profile import Profile
from accelopt.profiling.timeline import ModelOptions
from accelopt.search.roles import PlanRequest

from .helpers import CASES, assert_matches_reference, run

SINK = get_rewrite("sink_to_first_use")
SECOND_LOAD = {"hw_two_rows": "producer of b", "cg_two_rows": "producer of v6"}


# The timing model's default now does this move itself: a load whose tile is evicted before
# anything reads it is dropped and issued where the tile is needed, and a loaded tile is
# reloaded from its input rather than saved (ModelOptions.rematerialize_loads, issue 20), so
# these kernels no longer spill there. The rewrite is pinned against a compiler that spills
# what it loaded up front, the model without that switch.
SPILLING_COMPILER = ModelOptions(rematerialize_loads=False)


def _profile(name: str, text: str) -> Profile:
    case = CASES[name]
    trace = run(text, case.name, case.inputs(np.random.default_rng(0)), numerics=False).trace
    return profile_trace(trace, hardware="trn1", options=SPILLING_COMPILER)[0]


@pytest.mark.parametrize("name", sorted(SECOND_LOAD))
def test_moving_the_second_load_to_its_use_removes_the_spill_and_stays_correct(name: str) -> None:
    case = CASES[name]
    (site,) = [s for s in SINK.sites(case.text, case.name) if SECOND_LOAD[name] in s.title]
    moved = SINK.apply(case.text, case.name, site.id)
    assert_matches_reference(case, moved)
    before, after = _profile(name, case.text), _profile(name, moved)
    assert before.spill_save_bytes > 0 and after.spill_save_bytes == 0
    assert after.latency_ms < before.latency_ms, f"{before.latency_ms:.4f} -> {after.latency_ms:.4f} ms"


def test_the_planner_proposes_the_reordering_only_when_the_profile_reports_spills() -> None:
    case = CASES["hw_two_rows"]
    kernel = KernelSource(text=case.text, name=case.name, path=case.file)
    spilling = _profile("hw_two_rows", case.text)
    planner = OfflinePlanner()

    def rewrites(profile: Profile) -> set[str | None]:
        result = planner.plan_now(PlanRequest(kernel=kernel, profile=profile, count=6))
        return {p.rewrite for p in result.plans}

    assert "sink_to_first_use" in rewrites(spilling)
    calm = spilling.model_copy(update={"spill_save_bytes": 0, "spill_reload_bytes": 0})
    assert "sink_to_first_use" not in rewrites(calm)
