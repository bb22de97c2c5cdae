"""The rewrites that matter most make the simulated Trainium1 latency lower on kernels built to
need them (timing model: accelopt.profiling.metrics.profile_trace on the emulator's trace)."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.profiling.metrics import profile_trace

from .helpers import CASES, run
from .test_rewrites import find_site


def latency_ms(case: str, text: str) -> float:
    source = CASES[case]
    inputs = source.inputs(np.random.default_rng(0))
    trace = run(text, source.name, inputs, numerics=False).trace
    return profile_trace(trace, hardware="trn1")[0].latency_ms


@pytest.mark.parametrize(
    ("rewrite", "case", "title", "params", "at_least"),
    [
        # one Scalar pass instead of Scalar + Vector; the stream's 1 KiB transfers bound it once
        # three buffers per tile let the loads run ahead, so the Vector multiply is a few percent
        ("fuse_silu", "hw_silu", "sigmoid", {}, 1.02),
        ("widen_free_dim", "hw_silu", "j loop", {"factor": 4}, 1.3),  # 4x fewer DMAs and instructions
        ("widen_free_dim", "cg_silu", "i1 loop", {"factor": 2}, 1.1),
        ("preload_operand", "hw_matmul_bias", "load rhs once before the m loop", {}, 1.05),  # HBM traffic
        ("preload_operand", "cg_matmul", "load v1 once before the i1 loop", {}, 1.03),
        # exp -> add -> reciprocal -> multiply becomes one Scalar Engine silu
        ("fuse_elementwise_chain", "cg_silu_chain", "into one silu activation", {}, 1.2),
        # a reciprocal is up to 8x slower on the Vector Engine than as a Scalar Engine activation
        ("rebalance_engines", "hw_scale_recip", "reciprocal at line 15", {"engine": "scalar"}, 1.2),
    ],
)
def test_rewrite_lowers_simulated_latency(rewrite, case, title, params, at_least):
    source = CASES[case]
    site = find_site(rewrite, case, title)
    new = get_rewrite(rewrite).apply(source.text, source.name, site.id, params or None)
    before, after = latency_ms(case, source.text), latency_ms(case, new)
    assert before / after >= at_least, f"{before:.4f} ms -> {after:.4f} ms"
