"""fold_loop: an outer elementwise loop over a tensor dimension (heads) runs F entries per
instruction as an extra free axis. Applies on compiler-generated kernels, refuses what is not
purely elementwise or not indexed by whole entries, and stays correct in the emulator."""

from __future__ import annotations

from accelopt.agents.offline.catalogue import get_rewrite

from .helpers import CASES, Case, assert_matches_reference

REWRITE = get_rewrite("fold_loop")

HEADS = CASES["cg_heads"]


def squash(text: str) -> str:
    return "".join(text.split())


def reasons(case: Case, text: str | None = None) -> list[str]:
    return [r.reason for r in REWRITE.refusals(case.text if text is None else text, case.name)]


def test_folds_the_heads_loop_into_a_free_axis_of_every_tile():
    sites = REWRITE.sites(HEADS.text, HEADS.name)
    assert [s.title for s in sites] == ["fold the i0 loop into a free axis: 2 i0 entries per instruction"]
    assert sites[0].variants == [{"factor": 2}, {"factor": 4}]
    new = REWRITE.apply(HEADS.text, HEADS.name, sites[0].id, {"factor": 2})
    flat = squash(new)
    assert "fori0_blkinnl.affine_range(4//2):" in flat
    assert "x_t=nl.ndarray((4,2,nl.par_dim(128),2,64)" in flat
    assert (
        "x[2*i0_blk+nl.arange(2)[None,:,None],128*i1+nl.arange(128)[:,None,None],nl.arange(64)[None,None,:]]"
        in flat
    )
    assert (
        "x_t[i0_blk,i1,nl.arange(128)[:,None,None],nl.arange(2)[None,:,None],nl.arange(64)[None,None,:]]"
        in flat
    )
    assert_matches_reference(HEADS, new)


def test_every_factor_stays_correct():
    site = REWRITE.sites(HEADS.text, HEADS.name)[0]
    for params in site.variants:
        assert_matches_reference(HEADS, REWRITE.apply(HEADS.text, HEADS.name, site.id, params))


def test_refuses_a_loop_variable_used_as_an_offset():
    text = HEADS.text.replace("y[i0, 128 * i1 +", "y[i0, 128 * i1 + 0 * i0 +")
    assert any("i0 is used in" in r and "not only as a whole index" in r for r in reasons(HEADS, text))


def test_refuses_a_reduction_in_the_loop():
    text = HEADS.text.replace(
        "op=np.multiply,\n            )\n            res",
        "op=np.multiply,\n            )\n            s = nisa.tensor_reduce(np.add, prod[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]], axis=1)\n            res",
    )
    assert "axis=1" in text
    assert any(
        "nisa.tensor_reduce (line" in r and "not an elementwise step" in r for r in reasons(HEADS, text)
    )


def test_refuses_a_trip_count_without_a_factor():
    text = HEADS.text.replace("for i0 in nl.affine_range(4)", "for i0 in nl.affine_range(3)")
    assert any("trip count 3 has no factor" in r for r in reasons(HEADS, text))


def test_hand_written_slices_become_grids_of_a_three_dimensional_tile():
    case = CASES["hw_heads"]
    (site,) = REWRITE.sites(case.text, case.name)
    new = REWRITE.apply(case.text, case.name, site.id, {"factor": 2})
    flat = squash(new)
    assert "assertheads%2==0" in flat and "forh_blkinnl.affine_range(heads//2):" in flat
    assert (
        "x[2*h_blk+nl.arange(2)[None,:,None],t*128+nl.arange(128)[:,None,None],nl.arange(dim)[None,None,:]]"
        in flat
    )
    assert "gated=nl.multiply(nl.sigmoid(xt),yt)" in flat  # the elementwise steps are untouched
    for params in site.variants:
        assert_matches_reference(case, REWRITE.apply(case.text, case.name, site.id, params))


def test_refuses_a_tile_made_outside_the_loop():
    """A [P, C] tile from outside would not line up with the [P, F, C] tiles of the folded loop."""
    case = CASES["hw_heads"]
    text = case.text.replace(
        "    for h in nl.affine_range(heads):",
        "    bias = nl.load(y[0, 0:128, 0:dim])\n    for h in nl.affine_range(heads):",
    ).replace("value=nl.add(gated, 1.0)", "value=nl.add(gated, bias)")
    assert any("the tile bias is made outside the loop" in r for r in reasons(case, text))


def test_two_dimensional_tiles_have_no_loop_to_fold():
    case = CASES["hw_silu"]
    assert REWRITE.sites(case.text, case.name) == []
