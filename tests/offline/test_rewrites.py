"""Each rewrite of the offline catalogue on our own test kernels in both styles: it applies where
it should (the new source changes as expected, formatting and comments elsewhere kept), refuses
where it would be illegal (with the reason), and the rewritten kernel still computes the numpy
reference in the emulator."""

from __future__ import annotations

import pytest

from accelopt.agents.offline.catalogue import REWRITES, all_sites, get_rewrite
from accelopt.agents.offline.rewrites.base import Site
from accelopt.agents.offline.rewrites.errors import NotApplicable

from .helpers import CASES, assert_matches_reference


def find_site(rewrite: str, case: str, title: str) -> Site:
    source = CASES[case]
    sites = [s for s in get_rewrite(rewrite).sites(source.text, source.name) if title in s.title]
    assert sites, f"{rewrite} found no site titled {title!r} in {case}"
    return sites[0]


def squash(text: str) -> str:
    return "".join(text.split())


# (rewrite, case, words in the site title, params, text that must appear, text that must vanish)
APPLIES = [
    ("hoist_invariant", "hw_matmul_bias", "load of bias out of the n loop", {}, [], []),
    ("hoist_invariant", "hw_transpose_matmul", "computation of s1 out of the n loop", {}, [], []),
    ("hoist_invariant", "cg_matmul", "load of v3 out of the i1 loop", {}, [], []),
    ("preload_operand", "hw_matmul_bias", "load lhsT once before the n loop", {}, ["a = a_all[k, :, :]"], []),
    (
        "preload_operand",
        "cg_matmul",
        "load v1 once before the i1 loop",
        {},
        ["v5[i0, 0, i2,"],
        ["v5[i0, i1, i2,"],
    ),
    (
        "affine_range",
        "hw_silu",
        "run the j loop",
        {},
        ["for j in nl.affine_range(N // 256)"],
        ["for j in range"],
    ),
    (
        "affine_range",
        "cg_scale_shift",
        "run the i0 loop",
        {},
        ["for i0 in nl.affine_range(2)"],
        ["sequential_range"],
    ),
    ("loop_interchange", "hw_matmul_bias", "interchange the m and n loops", {}, [], []),
    ("loop_interchange", "cg_silu", "interchange the i0 and i1 loops", {}, [], []),
    (
        "widen_free_dim",
        "hw_silu",
        "j loop",
        {"factor": 2},
        ["j * 512 : (j + 1) * 512", "(N // 256) // 2"],
        [],
    ),
    ("widen_free_dim", "hw_silu", "j loop", {"factor": 4}, ["j * 1024 : (j + 1) * 1024"], []),
    ("widen_free_dim", "hw_rowsum", "j loop", {"factor": 2}, ["j * 512"], ["j * 256"]),
    (
        "widen_free_dim",
        "hw_silu_offsets",
        "j loop from 256 to 512 columns",
        {"factor": 2},
        [
            "c0 = j * TILE_COLS * 2",
            "x[r0 : r0 + 128, c0 : c0 + TILE_COLS * 2]",
            "out[r0 : r0 + 128, c0 : c0 + TILE_COLS * 2]",
            "nl.affine_range((N // TILE_COLS) // 2)",
            "assert (N // TILE_COLS) % 2 == 0",
        ],
        ["c0 + TILE_COLS]"],
    ),
    ("widen_free_dim", "hw_silu_offsets", "j loop", {"factor": 4}, ["c0 : c0 + TILE_COLS * 4"], []),
    (
        "widen_free_dim",
        "hw_silu_square",
        "j loop",
        {"factor": 4},
        ["x[i * 128 : (i + 1) * 128, j * 512 : (j + 1) * 512]", "nl.ndarray((128, 512)"],
        ["j * 128"],
    ),
    (
        "widen_free_dim",
        "cg_sigmoid_square",
        "i1 loop",
        {"factor": 2},
        ["128 * i0 + nl.arange(128)[:, None], 256 * i1 + nl.arange(256)[None, :]", "(nl.par_dim(128), 256)"],
        ["128 * i1"],
    ),
    (
        "widen_free_dim",
        "cg_silu",
        "i1 loop",
        {"factor": 2},
        ["512 * i1 + nl.arange(512)[None, :]"],
        ["nl.arange(256)"],
    ),
    ("fuse_silu", "hw_silu", "sigmoid", {}, ["y = nl.silu(t)"], ["nl.sigmoid", "nl.multiply"]),
    ("fuse_silu", "cg_silu", "sigmoid", {}, ["op=nl.silu"], ["nl.sigmoid", "tensor_tensor"]),
    (
        "fold_activation",
        "hw_matmul_bias",
        "exp",
        {},
        ["nisa.activation(op=nl.exp, data=s, bias=b, scale=0.5)"],
        ["nl.exp(nl.add"],
    ),
    ("fold_activation", "cg_matmul", "tanh", {}, ["scale=np.dtype(np.float32).type(2)"], ["v10 ="]),
    (
        "fuse_tensor_scalar",
        "hw_rowsum",
        "multiply and add",
        {},
        ["op0=np.multiply, operand0=3.0, op1=np.add, operand1=1.0", "import numpy as np"],
        ["nl.add(nl.multiply"],
    ),
    ("fuse_tensor_scalar", "cg_scale_shift", "multiply and add", {}, ["op1=np.add"], ["v4 ="]),
    (
        "remove_copy",
        "hw_matmul_bias",
        "PSUM→SBUF copy of acc",
        {},
        ["nl.multiply(acc, 0.5)"],
        ["s = nl.copy(acc)"],
    ),
    ("remove_copy", "cg_matmul", "PSUM→SBUF copy of v6", {}, [], ["v8 ="]),
    ("reuse_transpose", "hw_transpose_matmul", "line 22", {}, ["t2 = t1"], []),
    ("reuse_transpose", "cg_transpose", "reuse the transpose", {}, [], []),
    (
        "assign_engine",
        "hw_silu",
        "nl.sigmoid",
        {"engine": "scalar"},
        ["nisa.activation(op=nl.sigmoid, data=t)"],
        [],
    ),
    ("assign_engine", "cg_scale_shift", "line 18", {"engine": "scalar"}, ["engine=nisa.scalar_engine"], []),
    ("assign_engine", "hw_rowsum", "nl.multiply", {"engine": "gpsimd"}, ["engine=nisa.gpsimd_engine"], []),
]


@pytest.mark.parametrize(("rewrite", "case", "title", "params", "present", "absent"), APPLIES)
def test_rewrite_applies_and_stays_correct(rewrite, case, title, params, present, absent):
    source = CASES[case]
    site = find_site(rewrite, case, title)
    new = get_rewrite(rewrite).apply(source.text, source.name, site.id, params or None)
    assert new != source.text
    for text in present:
        assert squash(text) in squash(new), f"expected {text!r} in the rewritten kernel"
    for text in absent:
        assert squash(text) not in squash(new), f"expected {text!r} gone from the rewritten kernel"
    # Comments and docstrings survive (a moved statement takes its comment with it).
    new_lines = {line.strip() for line in new.splitlines()}
    for line in source.text.splitlines():
        if line.strip().startswith(("#", '"""')):
            assert line.strip() in new_lines
    assert_matches_reference(source, new)


def test_hoisted_statement_lands_before_its_loop():
    source = CASES["hw_matmul_bias"]
    site = find_site("hoist_invariant", "hw_matmul_bias", "load of bias")
    new = get_rewrite("hoist_invariant").apply(source.text, source.name, site.id)
    assert new.index("b = nl.load(bias") < new.index("for n in")
    assert "# the bias column does not depend on n" in new


def test_interchange_swaps_headers():
    source = CASES["hw_matmul_bias"]
    site = find_site("loop_interchange", "hw_matmul_bias", "m and n")
    new = get_rewrite("loop_interchange").apply(source.text, source.name, site.id)
    assert new.index("for n in") < new.index("for m in")


# (rewrite, case, words in the refusal reason)
REFUSES = [
    (
        "hoist_invariant",
        "hw_matmul_bias",
        "load of lhsT out of the k loop: it depends on the loop variable k",
    ),
    ("hoist_invariant", "cg_matmul", "load of v2 out of the i2 loop: it depends on the loop variable i2"),
    ("preload_operand", "cg_matmul", "v7 is allocated inside the i0 loop"),
    ("affine_range", "hw_rowsum", "every iteration writes the same part of acc"),
    ("loop_interchange", "hw_silu", "the i loop is sequential"),
    ("widen_free_dim", "hw_silu", "i loop: the loop variable tiles the partition axis"),
    ("widen_free_dim", "cg_silu", "i0 loop: the loop variable tiles the partition axis"),
    ("widen_free_dim", "hw_scan", "the tile width 256 also appears"),
    ("widen_free_dim", "hw_silu_offsets", "i loop: the loop variable tiles the partition axis"),
    (
        "widen_free_dim",
        "hw_column_ramp",
        "j loop: `j * TILE_COLS` is used as a value: c0 = j * TILE_COLS is used in `c0 * 1.0` (line 17), not only as the start of a `c0 : c0 + 256` slice",
    ),
    ("widen_free_dim", "hw_matmul_bias", "feeds the Tensor Engine"),
    ("fold_activation", "hw_softplus", "activation takes a [P, 1] bias tile, not a scalar"),
    ("remove_copy", "hw_transpose_matmul", "nl.store cannot read PSUM"),
    ("remove_copy", "hw_transpose_matmul", "nisa.nc_matmul cannot read PSUM"),
]


@pytest.mark.parametrize(("rewrite", "case", "reason"), REFUSES)
def test_rewrite_refuses_with_a_reason(rewrite, case, reason):
    source = CASES[case]
    refusals = [r for r in get_rewrite(rewrite).refusals(source.text, source.name) if reason in r.reason]
    assert refusals, f"no refusal mentioning {reason!r}"
    with pytest.raises(NotApplicable, match="cannot"):
        get_rewrite(rewrite).apply(source.text, source.name, refusals[0].id)
    assert all(s.id != refusals[0].id for s in get_rewrite(rewrite).sites(source.text, source.name))


def test_unknown_site_and_unknown_rewrite_are_refused():
    source = CASES["hw_silu"]
    with pytest.raises(NotApplicable, match="no site"):
        get_rewrite("fuse_silu").apply(source.text, source.name, "fuse_silu:999.1")
    with pytest.raises(NotApplicable, match="unknown rewrite"):
        get_rewrite("make_it_fast")


def test_every_rewrite_is_exercised_in_both_styles():
    styles: dict[str, set[str]] = {r.name: set() for r in REWRITES}
    for case in CASES.values():
        for site in all_sites(case.text, case.name):
            styles[site.rewrite].add(case.style)
    assert all(v == {"hand-written", "compiler-generated"} for v in styles.values()), styles


def test_site_ids_are_stable_for_a_source():
    case = CASES["hw_matmul_bias"]
    first = [s.id for s in all_sites(case.text, case.name)]
    assert first == [s.id for s in all_sites(case.text, case.name)]
    assert len(set(first)) == len(first)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_legal_site_keeps_the_kernel_correct(case):
    """Every site the catalogue calls legal (first parameter variant; others are covered above)."""
    source = CASES[case]
    for site in all_sites(source.text, source.name):
        for params in site.variants[:1]:
            new = get_rewrite(site.rewrite).apply(source.text, source.name, site.id, params)
            assert_matches_reference(source, new)
