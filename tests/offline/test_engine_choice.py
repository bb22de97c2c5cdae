"""The planner moves work only to an engine the timing model expects to finish it sooner
(engine_choice.py), and the simulator agrees on the test kernels: on Trainium1, where GpSimd
streams elementwise work at half the Vector Engine's rate and shares its SBUF ports, Vector work
does not go to GpSimd; a reciprocal still leaves the Vector Engine for the Scalar Engine."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.planner import OfflinePlanner, choose_params
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.profile import Profile
from accelopt.search.roles import PlanRequest

from .helpers import CASES, run

# A speedup the planner is expected to find (see the test below).
CLEAR_GAIN = 1.05


def simulated(case: str, text: str, hardware: str) -> Profile:
    source = CASES[case]
    trace = run(text, source.name, source.inputs(np.random.default_rng(0)), numerics=False).trace
    return profile_trace(trace, hardware=hardware)[0]


def proposed_moves(case: str, profile: Profile, rewrite: str = "rebalance_engines") -> set[tuple[str, str]]:
    source = CASES[case]
    kernel = KernelSource(text=source.text, name=source.name, path=source.file)
    result = OfflinePlanner().plan_now(PlanRequest(kernel=kernel, profile=profile, count=60))
    return {(p.site or "", str(p.params["engine"])) for p in result.plans if p.rewrite == rewrite}


@pytest.mark.parametrize(
    ("rewrite_name", "case", "hardware"),
    [
        ("rebalance_engines", "cg_silu_chain", "trn1"),
        ("rebalance_engines", "cg_silu_chain", "trn2"),
        ("rebalance_engines", "hw_scale_recip", "trn1"),
        ("rebalance_engines", "hw_scale_recip", "trn2"),
        # work the kernel left to the compiler: DMA-bound, no pinning pays; Vector-bound on trn2,
        # the add pays on GpSimd
        ("assign_engine", "cg_scale_shift", "trn1"),
        ("assign_engine", "hw_heads", "trn2"),
    ],
)
def test_the_planner_proposes_only_engine_moves_the_simulator_finds_faster_and_the_fastest(
    rewrite_name, case, hardware
):
    source = CASES[case]
    before = simulated(case, source.text, hardware)
    proposed = proposed_moves(case, before, rewrite_name)
    rewrite = get_rewrite(rewrite_name)
    speedups: dict[tuple[str, str], float] = {}
    sites = rewrite.sites(source.text, source.name)
    assert sites
    for site in sites:
        for variant in site.variants:
            after = simulated(case, rewrite.apply(source.text, source.name, site.id, variant), hardware)
            speedups[(site.id, str(variant["engine"]))] = before.latency_ms / after.latency_ms
    faster = {move for move, speedup in speedups.items() if speedup > 1.0}
    # Every proposed move is faster, and the fastest one is proposed when it pays clearly
    # (pinning compiler-placed work where the compiler already runs most of it is expected to
    # change nothing: not proposed). The planner weighs engines' busy horizons; on a DMA-bound
    # kernel a pin can still save a cross-engine hand-off of a few percent (cg_scale_shift on
    # trn1: the compiler puts the add of a constant on Vector, pinning it beside the multiply on
    # Scalar gains 2%), which it neither sees nor chases.
    assert proposed <= faster
    clear = {move for move in faster if speedups[move] >= CLEAR_GAIN}
    if clear:
        assert max(clear, key=lambda move: speedups[move]) in proposed


def test_gpsimd_takes_scalar_work_only_where_it_does_not_share_the_vector_engines_ports():
    source = CASES["hw_scale_recip"]
    site = next(
        s for s in get_rewrite("rebalance_engines").sites(source.text, source.name) if "activation" in s.title
    )
    busy = {
        "backend": "simulator",
        "latency_ms": 1.0,
        "bound": "vector",
        "vector_engine_active_time_percent": 0.9,
        "scalar_engine_active_time_percent": 0.95,
        "gpsimd_engine_active_time_percent": 0.0,
    }
    # Trainium2: GpSimd is idle and has its own ports; half-rate work there still finishes first.
    assert choose_params(site, Profile(hardware="trn2", **busy)) == {"engine": "gpsimd"}
    assert (site.id, "gpsimd") in proposed_moves("hw_scale_recip", Profile(hardware="trn2", **busy))
    # Trainium1: GpSimd's SBUF work waits on the busy Vector Engine's, so neither target pays.
    assert not any(
        move[0] == site.id for move in proposed_moves("hw_scale_recip", Profile(hardware="trn1", **busy))
    )
