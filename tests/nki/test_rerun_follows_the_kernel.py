"""The verified re-run runs under the kernel's own rules, and what an instruction touches does not
depend on input values: tiles kept in lists across loops (nki.* only), gathers whose rows come
from an index tile, DMAs that cast. Each kernel is ours; every result is checked against numpy."""

from __future__ import annotations

import numpy as np

from accelopt.hardware.roofline import work_from_trace
from accelopt.nki import runtime
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Memory, Trace

PATH = "/virtual/rerun_rules.py"

NKI07_LISTS = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def row_blocks_times(a, b):
    """out = a.T @ b with a's K blocks loaded once into a list, then used in a later loop."""
    K, M = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    blocks = []
    for k in nl.affine_range(K // 128):
        t = nl.ndarray((128, M), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[k * 128:(k + 1) * 128, 0:M])
        blocks.append(t)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        r = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=r, src=b[k * 128:(k + 1) * 128, 0:N])
        nisa.nc_matmul(dst=acc, stationary=blocks[k], moving=r)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''

LEGACY_GATHER = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def pick_rows(table, rows):
    """out[p, :] = table[rows[p], :] + 1 (the rows are data: an index tile from HBM)."""
    out = nl.ndarray((32, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(32)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    which = nl.load(rows[i_p])
    picked = nl.load(table[which[i_p, 0], i_f])
    nl.store(out, value=picked + 1.0)
    return out
'''

LEGACY_CAST_STORE = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def halve_precision(x):
    """Squares x in bfloat16 and stores the bf16 tile into a float32 output (the DMA casts)."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.square(nl.load(x), dtype=nl.bfloat16)
    nl.store(out, value=t)
    return out
'''


def logged(source: str, name: str, inputs: list[np.ndarray]) -> runtime.KernelRun:
    fn = runtime.load_kernel(source, name, PATH)
    return runtime.run_kernel(fn, inputs, record_calls=True, source_path=PATH)


def returned(run: runtime.KernelRun) -> Trace:
    return Trace.from_json(run.trace.to_json())  # as it crosses the sandbox boundary


def test_an_nki_kernel_keeping_tiles_in_a_list_reruns_under_nki_rules():
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (256, 128)))
    a2, b2 = (rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (256, 128)))
    trace = returned(logged(NKI07_LISTS, "row_blocks_times", [a, b]))
    assert trace.nki_api == "nki 0.7" and trace.calls_failure is None
    trusted = rerun(trace, [a2, b2])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_allclose(trusted.outputs[0], a2.T @ b2, rtol=1e-4, atol=1e-4)


def test_a_gather_reruns_with_the_rows_of_the_new_inputs_and_the_same_trace():
    rng = np.random.default_rng(4)
    table = rng.standard_normal((100, 64)).astype(np.float32)
    rows, other_rows = (rng.integers(0, 100, 32).astype(np.int32) for _ in range(2))
    run = logged(LEGACY_GATHER, "pick_rows", [table, rows])
    np.testing.assert_allclose(run.outputs[0], table[rows] + 1.0, rtol=1e-6)
    trace = returned(run)
    assert trace.nki_api == "legacy"
    trusted = rerun(trace, [table, other_rows])
    assert compare_traces(trace, trusted.trace) is None  # the records do not depend on the rows
    np.testing.assert_allclose(trusted.outputs[0], table[other_rows] + 1.0, rtol=1e-6)
    gather = next(r for r in trace.records if r.opcode == "dma_load" and r.extra.get("indirect"))
    assert gather.reads[0].box == ((0, 100), (0, 64))  # any row of the table may be read
    # the roofline counts what the gather moved (32 rows), not the whole table it may touch
    work = work_from_trace(trace)
    assert work.hbm_bytes == 32 * 4 + 32 * 64 * 4 + 32 * 64 * 4


def test_a_dma_into_a_wider_dtype_writes_the_destinations_bytes():
    x = np.random.default_rng(5).standard_normal((128, 256)).astype(np.float32)
    run = logged(LEGACY_CAST_STORE, "halve_precision", [x])
    expected = np.square(x).astype(np.float32)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-2)
    assert run.outputs[0].dtype == np.float32
    store = next(r for r in run.trace.records if r.dst_memory is Memory.HBM)
    assert store.bytes == 128 * 256 * 4  # float32 elements reach HBM, not bfloat16 ones


NKI07_BITS = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def absolute_by_bits(x):
    """|x| by clearing the sign bit of the float32 pattern (a dtype view made inside the kernel)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    bits = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=bits, data=t.view(nl.int32), op0=nl.bitwise_and, operand0=0x7FFFFFFF)
    nisa.dma_copy(dst=out, src=bits.view(nl.float32))
    return out
'''


def test_a_dtype_view_made_in_the_kernel_is_remade_by_the_rerun():
    rng = np.random.default_rng(6)
    x, y = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    run = logged(NKI07_BITS, "absolute_by_bits", [x])
    np.testing.assert_array_equal(run.outputs[0], np.abs(x))
    trace = returned(run)
    trusted = rerun(trace, [y])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], np.abs(y))


LEGACY_GATHER_TRANSPOSE = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.isa.constants import dge_mode


@nki.jit
def gather_then_transpose(src, rows):
    """out = transpose(src[rows], (2, 1, 0)) by one transposing DMA with a gathered source."""
    _, d1, d2 = src.shape
    out = nl.ndarray((d2, d1, 16), dtype=src.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(16)[:, None]
    idx = nl.load(rows)
    iy = nl.arange(d1)[None, :, None]
    iz = nl.arange(d2)[None, None, :]
    assert nisa.dge_mode is dge_mode
    moved = nisa.dma_transpose(src[idx[i_p, 0], iy, iz], axes=(2, 1, 0))
    nl.store(out, moved)
    return out
'''


def test_a_transposing_dma_from_a_gathered_source_reads_the_index_tile_and_reruns():
    rng = np.random.default_rng(9)
    src = rng.standard_normal((40, 4, 8)).astype(np.float32)
    rows, other = (rng.integers(0, 40, (16, 1)).astype(np.int32) for _ in range(2))
    run = logged(LEGACY_GATHER_TRANSPOSE, "gather_then_transpose", [src, rows])
    np.testing.assert_array_equal(run.outputs[0], np.transpose(src[rows[:, 0]], (2, 1, 0)))
    transpose = next(r for r in run.trace.records if r.extra.get("api") == "nisa.dma_transpose")
    assert transpose.extra.get("indirect") and len(transpose.reads) == 2  # the data and the index tile
    trace = returned(run)
    trusted = rerun(trace, [src, other])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], np.transpose(src[other[:, 0]], (2, 1, 0)))
