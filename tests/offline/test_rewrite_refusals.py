"""Rewrites that used to produce broken kernels where they should have refused, or that wrote a
correct change in the wrong order:

- widen_free_dim on the output of fold_loop: the folded head axis is an inner axis of on-chip
  buffers allocated outside the loop, so widening it would index past their allocation;
- block_accumulators with a trip count the source does not give: only the smallest block is
  offered (a larger one asserted at shapes with few tiles);
- preload_operand copying index definitions that build on each other (`cols` from `c0`): they
  must keep their source order in the copied loop nest;
- assign_engine offering GpSimd for a copy whose operand is a matmul call: GpSimd cannot read
  the PSUM result (the emulator rejects the kernel, as the compiler would).
"""

from __future__ import annotations

import numpy as np

from accelopt.agents.offline.catalogue import all_sites, get_rewrite

from .helpers import CASES, assert_matches_reference, relative_error, run


def test_widen_refuses_the_head_axis_that_fold_loop_made():
    case = CASES["cg_heads"]
    fold = next(s for s in all_sites(case.text, case.name) if s.rewrite == "fold_loop")
    folded = get_rewrite("fold_loop").apply(case.text, case.name, fold.id, {"factor": 2})
    assert_matches_reference(case, folded)
    widen = get_rewrite("widen_free_dim")
    assert not widen.sites(folded, case.name)
    reasons = [r.reason for r in widen.refusals(folded, case.name) if "i0_blk" in r.reason]
    assert reasons and "not on its last axis" in reasons[0]


UNKNOWN_TRIPS = """import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def proj_kernel(x_t, w):
    k, m = x_t.shape
    n = w.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mi in nl.affine_range(m // 128):
        for ni in nl.affine_range(n // 512):
            c0 = ni * 512
            cols = slice(c0, c0 + 512)
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // 128):
                x_tile = nl.load(x_t[ki * 128 : (ki + 1) * 128, mi * 128 : (mi + 1) * 128])
                w_tile = nl.load(w[ki * 128 : (ki + 1) * 128, cols])
                acc += nisa.nc_matmul(x_tile, w_tile)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(out[mi * 128 : (mi + 1) * 128, cols], value=res)
    return out
"""


def project(text: str) -> float:
    rng = np.random.default_rng(0)
    x_t = rng.standard_normal((256, 256)).astype(np.float32)
    w = rng.standard_normal((256, 1024)).astype(np.float32)
    (out,) = run(text, "proj_kernel", [x_t, w]).outputs
    return relative_error(out.astype(np.float64), x_t.T.astype(np.float64) @ w.astype(np.float64))


def test_blocking_offers_only_the_smallest_block_when_the_trip_count_is_unknown():
    sites = [s for s in all_sites(UNKNOWN_TRIPS, "proj_kernel") if s.rewrite == "block_accumulators"]
    assert sites
    for site in sites:
        assert site.variants == [{"factor": 2}]


def test_preload_copies_chained_index_definitions_in_source_order():
    site = next(
        s
        for s in all_sites(UNKNOWN_TRIPS, "proj_kernel")
        if s.rewrite == "preload_operand" and "load w once before the mi loop" in s.title
    )
    text = get_rewrite("preload_operand").apply(UNKNOWN_TRIPS, "proj_kernel", site.id, {})
    nest = text[: text.index("for mi in")]
    assert nest.index("c0 = ni * 512") < nest.index("cols = slice(c0, c0 + 512)")
    assert project(text) < 2e-5


ONE_K_TILE = """import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def one_tile_kernel(x_t, w):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x_tile = nl.load(x_t[0:128, 0:128])
    w_tile = nl.load(w[0:128, 0:512])
    res = nl.copy(nisa.nc_matmul(x_tile, w_tile), dtype=nl.float32)
    nl.store(out[0:128, 0:512], value=res)
    return out
"""


def test_assign_engine_keeps_gpsimd_off_a_matmul_result_read_in_place():
    (site,) = [s for s in all_sites(ONE_K_TILE, "one_tile_kernel") if s.rewrite == "assign_engine"]
    assert [p["engine"] for p in site.variants] == ["vector", "scalar"]
    rng = np.random.default_rng(0)
    x_t = rng.standard_normal((128, 128)).astype(np.float32)
    w = rng.standard_normal((128, 512)).astype(np.float32)
    for params in site.variants:
        rewritten = get_rewrite("assign_engine").apply(ONE_K_TILE, "one_tile_kernel", site.id, params)
        (out,) = run(rewritten, "one_tile_kernel", [x_t, w]).outputs
        assert relative_error(out.astype(np.float64), x_t.T.astype(np.float64) @ w.astype(np.float64)) < 2e-5


def test_a_place_becomes_its_site_or_its_refusal_in_one_wording():
    from accelopt.agents.offline.rewrites.base import Place, reason_or
    from accelopt.agents.offline.rewrites.errors import NotApplicable

    place = Place("fold_loop", "fold_loop:12", 12, "fold the i loop into a free axis")
    refused = place.refused("the i loop carries a dependence")
    assert (refused.rewrite, refused.id, refused.line) == ("fold_loop", "fold_loop:12", 12)
    assert refused.reason == "cannot fold the i loop into a free axis: the i loop carries a dependence"
    site = place.site(title="fold the i loop: 2 entries", line=14, variants=[{"factor": 2}], payload=3)
    assert (site.rewrite, site.id, site.line, site.title) == ("fold_loop", "fold_loop:12", 14, "fold the i loop: 2 entries")
    assert site.variants == [{"factor": 2}] and site.payload == 3 and place.site().variants == [{}]

    def analysis(width: int) -> int:
        if width > 4:
            raise NotApplicable("too wide")
        return width * 2

    assert reason_or(analysis, 2) == 4 and reason_or(analysis, width=8) == "too wide"
    # The rewrites word their refusals through it: the place's title, then the reason.
    case = CASES["cg_heads"]
    refusals = [r for name in ("fold_loop", "widen_free_dim") for r in get_rewrite(name).refusals(case.text, case.name)]
    assert all(r.reason.startswith("cannot ") and ": " in r.reason for r in refusals)
