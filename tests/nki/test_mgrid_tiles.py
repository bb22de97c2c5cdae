"""Tiles indexed by grids from a larger `nl.mgrid` than the index uses: the tile has one axis
per index expression (mgrid is numpy's mgrid: every grid has the mesh's rank), as the NKI
tutorials' RMSNorm/LayerNorm kernels read them. Our own kernels, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from nki_helpers import rel_l2

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError

PATH = "/virtual/mgrid_tiles.py"

KERNELS = '''
import math
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def scaled_rows(x, w):
    """out = x / sqrt(mean(x**2, row) + 1e-6) * w, rows in tiles of 128 with a ragged last one;
    the grids come from one rank-3 mesh whose middle axis has size 1."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    ip, iw, jf = nl.mgrid[0:128, 0:1, 0:cols]
    w_row = nl.load(w.reshape((1, cols))[iw, jf])
    for t in nl.affine_range(math.ceil(rows / 128)):
        tile = nl.load(x[t * 128 + ip, jf], mask=(t * 128 + ip < rows))
        ms = nl.sum(nl.square(tile), axis=[1]) / cols
        scaled = nl.multiply(tile, nl.rsqrt(ms + 1e-6))
        res = nl.multiply(scaled, w_row.broadcast_to((128, cols)), mask=(t * 128 + ip < rows))
        nl.store(out[t * 128 + ip, jf], value=res, mask=(t * 128 + ip < rows))
    return out


@nki.jit
def shifted_rows(x, b):
    """out = x - mean(x, row) + b, with the parameter row indexed [size-1 grid, column grid]
    where the size-1 grid is the mesh's last axis, and per-row statistics through bn_stats on
    a second, rank-2 mesh."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    ip, jf, one = nl.mgrid[0:128, 0:cols, 0:1]
    b_row = nl.load(b.reshape((1, cols))[one, jf])
    tile = nl.load(x[ip, jf])
    jb, js = nl.mgrid[0:cols, 0:6]
    stats = nl.ndarray((128, 6), dtype=np.float32)
    stats[ip, js] = nisa.bn_stats(tile[ip, jb])
    mean_var = nisa.bn_aggr(stats)
    centred = nisa.tensor_scalar(data=tile, op0=np.subtract, operand0=mean_var[ip, 0])
    nl.store(out[ip, jf], value=centred + b_row.broadcast_to((128, cols)))
    return out
'''


def run(name: str, *inputs: np.ndarray) -> np.ndarray:
    fn = runtime.load_kernel(KERNELS, name, PATH)
    numeric = runtime.run_kernel(fn, list(inputs), source_path=PATH)
    traced = runtime.run_kernel(fn, list(inputs), numerics=False, source_path=PATH)
    assert [r.opcode for r in traced.trace.records] == [r.opcode for r in numeric.trace.records]
    return numeric.outputs[0]


def test_a_rank_3_mesh_with_a_size_1_axis_reads_row_tiles_and_a_parameter_row():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((200, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    expected = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6) * w
    assert rel_l2(run("scaled_rows", x, w), expected) < 1e-5


def test_the_tile_axes_follow_the_index_order_and_a_second_mesh_indexes_the_free_axis():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    expected = x - x.mean(axis=1, keepdims=True) + b
    assert rel_l2(run("shifted_rows", x, b), expected) < 1e-5


BAD_BROADCAST = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rank_mismatch(w):
    out = nl.ndarray((128, 8), dtype=w.dtype, buffer=nl.shared_hbm)
    row = nl.load(w.reshape((1, 1, 8)))
    nl.store(out, value=row.broadcast_to((128, 8)))
    return out
'''


def test_an_error_numpy_raises_inside_an_api_call_is_an_nki_error_at_the_kernel_line():
    fn = runtime.load_kernel(BAD_BROADCAST, "rank_mismatch", PATH)
    with pytest.raises(NkiError) as err:
        runtime.run_kernel(fn, [np.ones(8, np.float32)], source_path=PATH)
    assert err.value.line == 10 and "broadcast_to" in str(err.value)
    assert "accelopt" not in str(err.value) and "numpy" not in str(err.value)
