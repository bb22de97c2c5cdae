"""fuse_activation_reduce: a free-axis sum of an activation's result folds into the activation
(activation_reduce) in both kernel styles; refused when the sum is not exactly of that result or
not along the free axis; the fused kernels still compute the numpy reference."""

from __future__ import annotations

from accelopt.agents.offline.catalogue import get_rewrite

from .helpers import CASES, assert_matches_reference

REWRITE = get_rewrite("fuse_activation_reduce")
SOFTMAX = CASES["hw_softmax_rows"]
SQUARES = CASES["cg_sum_squares"]


def squash(text: str) -> str:
    return "".join(text.split())


def test_hand_written_row_sum_goes_into_the_exp_activation():
    (site,) = REWRITE.sites(SOFTMAX.text, SOFTMAX.name)
    new = REWRITE.apply(SOFTMAX.text, SOFTMAX.name, site.id)
    flat = squash(new)
    assert "row_sum=nl.ndarray((128,1),dtype=nl.float32,buffer=nl.sbuf)" in flat
    assert (
        "probs=nisa.activation_reduce(op=nl.exp,data=t,bias=nl.multiply(row_max,-1.0),"
        "reduce_op=np.add,reduce_res=row_sum)" in flat
    )
    assert "nl.sum(" not in flat
    assert_matches_reference(SOFTMAX, new)


def test_compiler_generated_reduction_writes_its_buffer_in_place():
    (site,) = REWRITE.sites(SQUARES.text, SQUARES.name)
    new = REWRITE.apply(SQUARES.text, SQUARES.name, site.id)
    flat = squash(new)
    assert "reduce_res=v6[i0,nl.arange(128)[:,None],nl.arange(1)[None,:]]" in flat
    assert "tensor_reduce" not in flat and "nl.ndarray((128,1)" not in flat
    assert_matches_reference(SQUARES, new)


def test_an_activation_written_inside_the_sum_is_fused_too():
    """`nl.sum(nl.exp(shifted))`: the activation's own result is not kept, only its row sums."""
    text = SOFTMAX.text.replace(
        "        probs = nisa.activation(op=nl.exp, data=t, bias=nl.multiply(row_max, -1.0))\n"
        "        row_sum = nl.sum(probs, axis=1, keepdims=True)\n",
        "        shifted = nl.add(t, nl.multiply(row_max, -1.0))\n"
        "        probs = nl.exp(shifted)\n"
        "        row_sum = nl.sum(nl.exp(shifted), axis=1, keepdims=True)\n",
    )
    assert "nl.sum(nl.exp(shifted)" in text
    sites = [s for s in REWRITE.sites(text, SOFTMAX.name) if "nl.exp(shifted)" in s.title]
    assert sites
    new = REWRITE.apply(text, SOFTMAX.name, sites[0].id)
    flat = squash(new)
    assert "nisa.activation_reduce(op=nl.exp,data=shifted,reduce_op=np.add,reduce_res=row_sum)" in flat
    assert "probs=nl.exp(shifted)" in flat
    assert_matches_reference(SOFTMAX, new)


def test_refuses_a_sum_along_the_partition_axis_or_without_keepdims():
    for old, new in (("axis=1, keepdims=True", "axis=0, keepdims=True"), ("axis=1, keepdims=True", "axis=1")):
        text = SOFTMAX.text.replace(old, new)
        assert REWRITE.sites(text, SOFTMAX.name) == []


def test_refuses_when_the_summed_tile_changes_in_between():
    text = SOFTMAX.text.replace(
        "        row_sum = nl.sum(probs, axis=1, keepdims=True)\n",
        "        probs = nl.multiply(probs, 2.0)\n        row_sum = nl.sum(probs, axis=1, keepdims=True)\n",
    )
    assert REWRITE.sites(text, SOFTMAX.name) == []  # the sum is of the multiply, not of the exp


def test_refuses_when_the_partition_count_is_not_in_the_source():
    text = SOFTMAX.text.replace("t = nl.load(x[rows, 0:N])", "t = nl.load(x[rows, :])")
    reasons = [r.reason for r in REWRITE.refusals(text, SOFTMAX.name)]
    assert reasons == [] or any("partition count" in r for r in reasons)
    text = SOFTMAX.text.replace(
        "        t = nl.load(x[rows, 0:N])\n", "        t = nl.exp(nl.load(x[rows, 0:N]))\n"
    )
    assert any("partition count" in r.reason for r in REWRITE.refusals(text, SOFTMAX.name))
