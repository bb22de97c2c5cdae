"""Property tests: views built from slices and arange grids read exactly what numpy indexing
reads, their trace boxes bound exactly the touched elements, and masks select the right ones."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelopt.nki import language as nl
from accelopt.nki.context import KernelContext, activate
from accelopt.nki.indexing import IndexExpr
from accelopt.nki.tensor import Tensor
from accelopt.nki.trace import Memory

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _hbm(ctx: KernelContext, data: np.ndarray) -> Tensor:
    tensor = Tensor(data.shape, data.dtype, nl.shared_hbm, 0, data.copy())
    ctx.register_tensor(tensor, "x", 0, is_input=True)
    return tensor


@st.composite
def slice_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=2, max_size=3)))
    key = []
    for n in shape:
        if draw(st.booleans()):
            key.append(draw(st.integers(0, n - 1)))
        else:
            start = draw(st.integers(0, n - 1))
            stop = draw(st.integers(start + 1, n))
            step = draw(st.integers(1, 2))
            key.append(slice(start, stop, step))
    if all(isinstance(k, int) for k in key):
        key[-1] = slice(0, shape[-1])
    return shape, tuple(key)


@SETTINGS
@given(slice_case())
def test_basic_views_match_numpy(case):
    shape, key = case
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ctx = KernelContext("k", "<test>", numerics=True)
    with activate(ctx):
        view = _hbm(ctx, data)[key]
        expected = data[key]
        np.testing.assert_array_equal(view._read(), expected)
        # the box is the bounding box of the touched flat indices
        touched = np.zeros(shape, bool)
        touched[key] = True
        idx = np.nonzero(touched)
        assert view._box() == tuple((int(i.min()), int(i.max()) + 1) for i in idx)


@st.composite
def grid_case(draw):
    rows = draw(st.integers(1, 8))
    cols = draw(st.integers(1, 8))
    r_off = draw(st.integers(0, 4))
    c_off = draw(st.integers(0, 4))
    r_step = draw(st.integers(1, 2))
    transpose = draw(st.booleans())
    shape = (
        r_off + r_step * (rows - 1) + 1 + draw(st.integers(0, 2)),
        c_off + cols + draw(st.integers(0, 2)),
    )
    return shape, rows, cols, r_off, c_off, r_step, transpose


@SETTINGS
@given(grid_case())
def test_arange_grids_match_numpy_fancy_indexing(case):
    shape, rows, cols, r_off, c_off, r_step, transpose = case
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ctx = KernelContext("k", "<test>", numerics=True)
    with activate(ctx):
        if transpose:
            i_r = r_off + r_step * nl.arange(rows)[None, :]
            i_c = c_off + nl.arange(cols)[:, None]
        else:
            i_r = r_off + r_step * nl.arange(rows)[:, None]
            i_c = c_off + nl.arange(cols)[None, :]
        view = _hbm(ctx, data)[i_r, i_c]
        expected = data[i_r.materialize(), i_c.materialize()]
        np.testing.assert_array_equal(view._read(), expected)
        assert view._box() == ((r_off, r_off + r_step * (rows - 1) + 1), (c_off, c_off + cols))


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 8), st.integers(0, 3))
def test_folded_aranges_in_one_axis(blocks, inner, block):
    """128*a + b style folding: one tensor axis indexed by two grid axes."""
    data = np.arange(blocks * inner * 4, dtype=np.float32).reshape(4, blocks * inner)
    ctx = KernelContext("k", "<test>", numerics=True)
    with activate(ctx):
        grid = inner * nl.arange(blocks)[None, :, None] + nl.arange(inner)[None, None, :]
        row = nl.arange(1)[:, None, None] + (block % 4)
        view = _hbm(ctx, data)[row, grid]
        np.testing.assert_array_equal(view._read(), data[block % 4].reshape(1, blocks, inner))
        assert view._contiguous_run() == blocks * inner


@SETTINGS
@given(
    st.integers(1, 16),
    st.integers(-20, 20),
    st.sampled_from([">=", ">", "<", "<=", "=="]),
    st.integers(-3, 3),
)
def test_mask_axis_ranges_bound_the_true_elements(n, offset, op, coef):
    expr = IndexExpr((n, 1), (coef, 0), offset)
    pred = {">=": expr >= 0, ">": expr > 0, "<": expr < 0, "<=": expr <= 0, "==": expr == 0}[op]
    grid = np.broadcast_to(pred.materialize(), (n, 3))
    ranges = pred.axis_ranges((n, 3))
    hits = np.flatnonzero(grid.any(axis=1))
    if hits.size == 0:
        assert ranges[0][0] >= ranges[0][1]
    else:
        assert ranges[0] == (int(hits[0]), int(hits[-1]) + 1)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 5))
def test_masked_tail_load_store_round_trip(rows, cols, valid):
    valid = min(valid, rows)
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + 1
    for numerics in (True, False):
        ctx = KernelContext("k", "<test>", numerics=numerics)
        with activate(ctx):
            x = _hbm(ctx, data)
            out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
            i_p = nl.arange(rows)[:, None]
            i_f = nl.arange(cols)[None, :]
            t = nl.load(x[i_p, i_f], mask=(i_p < valid))
            nl.store(out[i_p, i_f], value=t, mask=(i_p < valid))
            store = ctx.trace.records[-1]
            assert store.dst_memory is Memory.HBM
            assert store.writes[0].box == (((0, valid), (0, cols)) if valid else ((0, 0), (0, 0)))
            if numerics:
                expected = np.full((rows, cols), np.nan, np.float32)
                expected[:valid] = data[:valid]
                np.testing.assert_array_equal(out._data, expected)


def _same_view(a, b) -> None:
    assert (a.shape, a._offsets, a._terms, a._box(), a._oob, a._arrays) == (
        b.shape,
        b._offsets,
        b._terms,
        b._box(),
        b._oob,
        b._arrays,
    )


@st.composite
def site_form_case(draw):
    """A tensor with a block dimension and two keys of one form (ints and grids, or in-bounds
    slices) with different offsets, possibly reaching outside the tensor (grids only)."""
    blocks = draw(st.integers(1, 4))
    rows, cols = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    shape = (blocks, rows + draw(st.integers(0, 8)), cols + draw(st.integers(0, 8)))
    use_slices = draw(st.booleans())
    keys = []
    for _ in range(2):
        # negative block indices: grids only (a slice form accepts only in-range ints)
        b = draw(st.integers(0 if use_slices else -blocks, blocks - 1))
        if use_slices:
            r0 = draw(st.integers(0, shape[1] - rows))
            c0 = draw(st.integers(0, shape[2] - cols))
            keys.append((b, slice(r0, r0 + rows), slice(c0, c0 + cols)))
        else:
            r0 = draw(st.integers(-2, shape[1]))
            c0 = draw(st.integers(0, shape[2]))
            keys.append((b, r0 + nl.arange(rows)[:, None], c0 + nl.arange(cols)[None, :]))
    return shape, keys


@SETTINGS
@given(site_form_case())
def test_forms_compiled_at_a_call_site_build_the_parsers_views(case):
    """siteindex: a form learnt from one key builds, for another key of that form, exactly the
    view the general parser builds."""
    from accelopt.nki.fast import siteindex
    from accelopt.nki.tensor import _index_tensor

    shape, (first, second) = case
    ctx = KernelContext("k", "<test>", numerics=False)
    with activate(ctx):
        tensor = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
        site = (id(case), 1)  # a fresh site per example
        siteindex.learn(tensor, first, _index_tensor(tensor, first), site)
        (build,) = siteindex.SITE_FORMS.pop(site)
        _same_view(build(tensor, first), _index_tensor(tensor, first))
        _same_view(build(tensor, second), _index_tensor(tensor, second))
        # another form (one index fewer) is not this site's: the parser handles it
        assert build(tensor, second[1:]) is None


@SETTINGS
@given(st.integers(0, 40), st.integers(1, 300), st.integers(1, 4))
def test_arange_answers_every_int_like_spelling_with_one_grid(start, size, step):
    """nl.arange is answered from a cache of its calls: every spelling of one range (ints, numpy
    ints, loop variables, start/stop or stop alone) must still give the grid of that range."""
    from accelopt.nki.loopvar import LoopVar

    stop = start + size
    grid = nl.arange(start, stop, step)
    assert (grid.sizes, grid.coefs, grid.offset) == ((len(range(start, stop, step)),), (step,), start)
    assert nl.arange(np.int64(start), np.int32(stop), step) is grid
    assert nl.arange(LoopVar(start, 0), LoopVar(stop, 1), step=step) is grid
    if start == 0 and step == 1:
        assert nl.arange(stop) is grid
        assert nl.arange(LoopVar(stop, 2)) is grid
    np.testing.assert_array_equal(grid.materialize(), np.arange(start, stop, step))
    # a 0-d array bound cannot key the call cache, but is still a range bound
    assert nl.arange(np.array(start), np.array(stop), step) is grid
