"""Loop fusion on our own two-pass kernels in both styles: the fused kernel computes the numpy
reference, reads the intermediate back from SBUF (the scratch tensor and its HBM round trip are
gone) and is faster on the simulated Trainium1; a second pass that needs more than what the first
pass's same iteration wrote is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.profiling.metrics import profile_trace

from .helpers import CASES as ALL_CASES
from .helpers import Case, assert_matches_reference, run

CASES = {name: ALL_CASES[name] for name in ("hw_two_pass", "cg_two_pass")}
FUSION = get_rewrite("loop_fusion")


def _latency_ms(case: Case, text: str) -> float:
    trace = run(text, case.name, case.inputs(np.random.default_rng(0)), numerics=False).trace
    return profile_trace(trace, hardware="trn1")[0].latency_ms


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_loops_compute_the_reference_without_the_scratch_round_trip(name: str) -> None:
    case = CASES[name]
    (site,) = FUSION.sites(case.text, case.name)
    fused = FUSION.apply(case.text, case.name, site.id)
    assert fused.count("affine_range") == 1
    assert fused.count("nl.store(") == 1 and fused.count("nl.load(") == 1  # the scratch is gone
    assert_matches_reference(case, fused)
    before, after = _latency_ms(case, case.text), _latency_ms(case, fused)
    assert after < before, f"{before:.4f} ms -> {after:.4f} ms"


def test_a_second_pass_reading_another_iterations_tile_is_refused() -> None:
    case = Case("hw_two_pass_reduce.py", "two_pass_reduce_kernel", "hand-written", lambda r: [], lambda: [])
    assert FUSION.sites(case.text, case.name) == []
    (refusal,) = FUSION.refusals(case.text, case.name)
    assert "not only where the first loop's iteration wrote it" in refusal.reason
