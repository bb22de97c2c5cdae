"""Buffer counts of directly allocated tiles, on our own kernels in both styles: more physical
tiles for a tensor whose loads wait on one buffer make the simulated Trainium1 latency lower and
compute the same; a count whose buffers would reach into another tensor's is refused."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.profiling.metrics import profile_trace

from .helpers import CASES, assert_matches_reference, run

BUFFERS = get_rewrite("buffer_count")


def _latency_ms(name: str, text: str) -> float:
    case = CASES[name]
    trace = run(text, case.name, case.inputs(np.random.default_rng(0)), numerics=False).trace
    return profile_trace(trace, hardware="trn1")[0].latency_ms


@pytest.mark.parametrize(("name", "tensor"), [("hw_direct", "t"), ("cg_direct", "v3")])
def test_a_second_buffer_for_the_loaded_tiles_overlaps_the_loads_and_stays_correct(name: str, tensor: str) -> None:
    case = CASES[name]
    (site,) = [s for s in BUFFERS.sites(case.text, case.name) if f"for {tensor} " in s.title]
    more = BUFFERS.apply(case.text, case.name, site.id, {"count": 2})
    assert "num_free_tiles=(2,)" in more
    assert_matches_reference(case, more)
    before, after = _latency_ms(name, case.text), _latency_ms(name, more)
    assert after < 0.9 * before, f"{before:.4f} -> {after:.4f} ms"


def test_buffers_reaching_into_another_tensor_are_not_offered() -> None:
    case = CASES["hw_direct"]
    (site,) = [s for s in BUFFERS.sites(case.text, case.name) if "for t " in s.title]
    # t's 2 KiB tiles start at 0 and s at 8 KiB: four fit, eight would overlap s.
    assert {v["count"] for v in site.variants} == {2, 3, 4}
    with pytest.raises(Exception, match="not legal"):
        get_rewrite("tune").apply(case.text, case.name, "buffer_count#0:count=8")
