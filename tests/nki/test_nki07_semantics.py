"""The nki.* language (NKI 0.2-0.7) on the emulator: API generation detection and the rules it
selects, destination passing, nc_matmul accumulation, registers and compiled loops, views,
indirect DMA, and the new ops, each checked against numpy on kernels written here (in both
styles where both exist)."""

from __future__ import annotations

import numpy as np
import pytest
from nki_helpers import rel_l2

from accelopt.nki import apiversion
from accelopt.nki.errors import NkiError

# --- API generation ---------------------------------------------------------------------------


def test_generation_is_read_from_the_imports():
    legacy = apiversion.detect("import neuronxcc.nki.language as nl\n")
    current = apiversion.detect("import nki\nimport nki.language as nl\n")
    old = apiversion.detect("import nki.language as nl\nfor i in nl.dynamic_range(3):\n    pass\n")
    assert (legacy.generation, legacy.default_hardware, legacy.label) == (
        "legacy",
        "trn1",
        "legacy NKI (neuronxcc.nki)",
    )
    assert (current.generation, current.release, current.default_hardware) == ("nki", "0.7", "trn2")
    assert current.label == "NKI 0.7 (nki.*)"
    assert old.release == "0.6"
    assert apiversion.detect("x = 1\n").legacy  # nothing to tell by: the historical rules


def test_the_run_applies_the_generation_of_the_kernel(kernel, nki_kernel):
    body = """
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t)
        return out
    """
    x = np.ones((128, 4), np.float32)
    assert kernel(body).run("k", x).trace.records  # legacy header
    legacy_ctx_api = apiversion.detect(kernel(body).text)
    current_ctx_api = apiversion.detect(nki_kernel(body).text)
    assert legacy_ctx_api.legacy and not current_ctx_api.legacy


BLOCK_DIMS = """
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    blocks = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    blocks[0] = nl.load(x)
    nl.store(out, blocks[0])
    return out
"""


def test_block_dimensions_exist_only_in_legacy_kernels(kernel, nki_kernel):
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(kernel(BLOCK_DIMS).run("k", x).outputs[0], x)
    k = nki_kernel(BLOCK_DIMS)
    with pytest.raises(NkiError) as err:
        k.run("k", x)
    assert err.value.code == "err_unsupported_block_dimension"
    assert err.value.path == str(k.path) and err.value.line == k.line_of("blocks = nl.ndarray")
    assert "NKI 0.7 (nki.*)" in err.value.message


TILES_IN_A_LIST = """
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(4):
        t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, i * 32:(i + 1) * 32])
        tiles.append(t)
    for i in nl.affine_range(4):
        doubled = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=tiles[i], op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[:, i * 32:(i + 1) * 32], src=doubled)
    return out
"""


def test_tiles_kept_in_a_list_outlive_their_loop_in_nki_kernels_only(kernel, nki_kernel, rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    for numerics in (True, False):
        run = nki_kernel(TILES_IN_A_LIST).run("k", x, numerics=numerics)
        if numerics:
            np.testing.assert_allclose(run.outputs[0], 2 * x, rtol=1e-6)
    with pytest.raises(NkiError) as err:
        kernel(TILES_IN_A_LIST).run("k", x)
    assert err.value.code == "err_local_variable_used_out_of_scope"


# --- nc_matmul accumulation -------------------------------------------------------------------

MATMUL_NKI = """
def k(a_t, b):
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for rep in range(2):
        for k in nl.affine_range(K // 128):
            at = nl.ndarray((128, M), dtype=a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(bt, b[k * 128:(k + 1) * 128, :])
            nisa.nc_matmul(acc, at, bt)
        res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(res, acc)
    nisa.dma_copy(out, res)
    return out
"""

MATMUL_LEGACY = """
def k(a_t, b):
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(at, bt)
    nl.store(out, nl.copy(acc))
    return out
"""


@pytest.mark.parametrize("style", ["nki", "legacy"])
def test_a_k_loop_of_nc_matmul_into_psum_accumulates(kernel, nki_kernel, rng, style):
    a_t = rng.standard_normal((512, 128)).astype(np.float32)
    b = rng.standard_normal((512, 256)).astype(np.float32)
    k = nki_kernel(MATMUL_NKI) if style == "nki" else kernel(MATMUL_LEGACY)
    run = k.run("k", a_t, b)
    # nki: the second pass over k starts a new accumulation group after the copy read it
    assert rel_l2(run.outputs[0], a_t.T @ b) < 1e-6
    traced = k.run("k", a_t, b, numerics=False)
    flags = [r.accumulate for r in traced.trace.records if r.opcode == "nc_matmul"]
    assert flags == ([False, True, True, True] * 2 if style == "nki" else [True] * 4)


def test_accumulate_false_overwrites_and_only_nki_0_6_refuses_it_in_an_affine_loop(nki_kernel, rng):
    overwrite = MATMUL_NKI.replace("nisa.nc_matmul(acc, at, bt)", "nisa.nc_matmul(acc, at, bt, accumulate=False)")
    a_t = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    # NKI 0.7: affine_range is a Python range; the last k block's product is what remains
    out = nki_kernel(overwrite).run("k", a_t, b).outputs[0]
    assert rel_l2(out, a_t[128:].T @ b[128:]) < 1e-6
    # NKI 0.6 (a kernel still naming nl.dynamic_range): affine iterations must be independent
    k = nki_kernel("OLD_LOOPS = nl.dynamic_range\n" + overwrite)
    assert apiversion.detect(k.text).release == "0.6"
    with pytest.raises(NkiError) as err:
        k.run("k", a_t, b)
    assert err.value.code == "err_unexpected_output_dependencies"
    assert err.value.line == k.line_of("accumulate=False")


# --- destination-passing ops ------------------------------------------------------------------

OPS_NKI = """
def k(x, y):
    P, F = x.shape
    out = nl.ndarray((P, 8 * F + 8), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    yt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(xt, x)
    nisa.dma_copy(yt, y)
    filled = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(filled, 3.0)
    summed = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(summed, xt, yt, nl.add)
    act = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    rowsum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(act, nl.exp, xt, reduce_op=nl.add, reduce_res=rowsum,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    scaled = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    rowmax = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=scaled, data=xt, op0=nl.multiply, operand0=2.0,
                              reduce_op=nl.max, reduce_res=rowmax, reduce_res_negate=True)
    gelu = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    rowsum2 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(gelu, nl.gelu_apprx_sigmoid, xt, nl.add, rowsum2)
    ramp = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(ramp, [[1, F]], offset=5, channel_multiplier=F)
    causal = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(causal, [[-1, F]], 1, xt, -9.0, cmp_op=nl.greater_equal)
    colsum = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(colsum, nl.add, xt)
    reduced = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(reduced, nl.add, yt, axis=1)
    pieces = [filled, summed, act, scaled, gelu, ramp, causal]
    for i, piece in enumerate(pieces):
        nisa.dma_copy(out[:, i * F:(i + 1) * F], piece)
    nisa.dma_copy(out[0:1, 7 * F:8 * F], colsum)
    for j, col in enumerate([rowsum, rowmax, rowsum2, reduced]):
        nisa.dma_copy(out[:, 8 * F + j:8 * F + j + 1], col)
    return out
"""


def _gelu_sigmoid(x):
    return x / (1 + np.exp(-1.702 * x))


def test_destination_passing_ops_match_numpy(nki_kernel, rng):
    P, F = 64, 16
    x = rng.standard_normal((P, F)).astype(np.float32)
    y = rng.standard_normal((P, F)).astype(np.float32)
    k = nki_kernel(OPS_NKI)
    out = k.run("k", x, y).outputs[0]
    p, f = np.arange(P)[:, None], np.arange(F)[None, :]
    expected = [
        np.full((P, F), 3.0),
        x + y,
        np.exp(x),
        2 * x,
        _gelu_sigmoid(x),
        5 + P * 0 + F * p + f,
        np.where(p - f >= 0, x, -9.0),
    ]
    for i, want in enumerate(expected):
        np.testing.assert_allclose(out[:, i * F : (i + 1) * F], want, rtol=1e-5, atol=1e-5, err_msg=str(i))
    np.testing.assert_allclose(out[0, 7 * F : 8 * F], x.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(out[:, 8 * F], np.exp(x).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 8 * F + 1], -(2 * x).max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out[:, 8 * F + 2], _gelu_sigmoid(x).sum(axis=1), rtol=1e-4)
    np.testing.assert_allclose(out[:, 8 * F + 3], y.sum(axis=1), rtol=1e-5)
    # the trace-only run records the same instructions
    numeric = k.run("k", x, y).trace.records
    traced = k.run("k", x, y, numerics=False).trace.records
    assert [(r.opcode, r.engine, r.line) for r in numeric] == [(r.opcode, r.engine, r.line) for r in traced]


LEGACY_OPS = """
def k(x):
    P, F = x.shape
    out = nl.ndarray((P, 2 * F), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.load(x)
    g = nl.gelu_apprx_sigmoid(xt)
    s = nisa.tensor_scalar(xt, np.multiply, 2.0)
    nl.store(out[:, 0:F], g)
    nl.store(out[:, F:2 * F], s)
    return out
"""


def test_the_activation_functions_of_the_reference_in_legacy_kernels(kernel, rng):
    x = rng.standard_normal((32, 8)).astype(np.float32)
    out = kernel(LEGACY_OPS).run("k", x).outputs[0]
    np.testing.assert_allclose(out[:, :8], _gelu_sigmoid(x), rtol=1e-5)
    np.testing.assert_allclose(out[:, 8:], 2 * x, rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("gelu_dx", lambda x: 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
         + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)),
        ("silu_dx", lambda x: (1 / (1 + np.exp(-x))) * (1 + x * (1 - 1 / (1 + np.exp(-x))))),
        ("erf_dx", lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)),
        ("gelu_apprx_sigmoid_dx", lambda x: (s := 1 / (1 + np.exp(-1.702 * x))) + 1.702 * x * s * (1 - s)),
    ],
)
def test_derivative_activations(nki_kernel, rng, name, reference):
    k = nki_kernel(f"""
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(r, nl.{name}, t)
        nisa.dma_copy(out, r)
        return out
    """)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(k.run("k", x).outputs[0], reference(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_dma_transpose_in_both_styles(kernel, nki_kernel, rng):
    x = rng.standard_normal((32, 64)).astype(np.float32)
    new = nki_kernel("""
    def k(x):
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=x, axes=(1, 0))
        nisa.dma_copy(out, t)
        return out
    """)
    old = kernel("""
    def k(x):
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.dma_transpose(x))
        return out
    """)
    for k in (new, old):
        np.testing.assert_array_equal(k.run("k", x).outputs[0], x.T)
        record = next(r for r in k.run("k", x, numerics=False).trace.records if r.is_transpose)
        assert record.engine.value == "dma"


# --- registers and compiled loops -------------------------------------------------------------

LOOPS = """
def k(x, count):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(n_sb, count)
    n = nisa.register_alloc()
    nisa.register_load(n, n_sb)

    def add_block(i):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x[:, i * 8:(i + 1) * 8])
        nisa.tensor_tensor(acc, acc, t, nl.add)

    nl.fori_loop(0, n, add_block)

    flag = nisa.register_alloc(3)

    def countdown(r):
        nisa.tensor_scalar(acc, acc, nl.multiply, 2.0)
        left = nisa.register_alloc(r - 1)
        return left

    nl.while_loop(flag, countdown)
    for j in nl.static_range(2):
        nisa.tensor_scalar(acc, acc, nl.add, 1.0)
    for j in range(x.shape[1] // 8):
        nisa.dma_copy(out[:, j * 8:(j + 1) * 8], acc)
    return out
"""


def test_fori_loop_while_loop_registers_static_range_and_range(nki_kernel, rng):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    count = np.array([[3]], dtype=np.int32)
    k = nki_kernel(LOOPS)
    run = k.run("k", x, count)
    block = (x[:, 0:8] + x[:, 8:16] + x[:, 16:24]) * 8 + 2
    np.testing.assert_allclose(run.outputs[0], np.tile(block, (1, 4)), rtol=1e-5)
    trips = sorted(info.trip_count for info in run.trace.loops.values())
    assert trips == [2, 3, 4, 4]  # static_range, fori_loop, while_loop (3 bodies + the test), range
    # a trace-only run has no tensor values: a loop bound read from memory is an NKI error
    with pytest.raises(NkiError) as err:
        k.run("k", x, count, numerics=False)
    assert err.value.code == "err_dynamic_value_unknown"
    assert err.value.line == k.line_of("nl.fori_loop(0, n, add_block)")


def test_fori_loop_with_a_constant_bound_runs_trace_only(nki_kernel, rng):
    k = nki_kernel(LOOPS.replace("nl.fori_loop(0, n, add_block)", "nl.fori_loop(0, 3, add_block)"))
    x = rng.standard_normal((128, 32)).astype(np.float32)
    traced = k.run("k", x, np.array([[0]], np.int32), numerics=False)
    assert sum(r.opcode == "dma_copy" and r.line == k.line_of("nisa.dma_copy(t, x[") for r in traced.trace.records) == 3


# --- views and indirect DMA -------------------------------------------------------------------

VIEWS = """
def k(x):
    out = nl.ndarray((64, 3 * 32 + 16), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x.reshape(shape=(64, 4, 8)))
    nisa.dma_copy(out[:, 0:32], t.reshape((64, 32)))
    swapped = nl.ndarray((64, 8, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(swapped, t.permute((0, 2, 1)))
    nisa.dma_copy(out[:, 32:64], swapped.reshape((64, 32)))
    picked = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(picked, t.select(1, 2))
    nisa.dma_copy(out[:, 64:72], picked)
    nisa.dma_copy(out.slice(1, 72, 96), x.slice(1, 8, 32))
    nisa.dma_copy(out[:, 96:112], x.ap([[32, 64], [2, 16]]))
    return out
"""


def test_nki_tensor_views(nki_kernel, rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    run = nki_kernel(VIEWS).run("k", x)
    out = run.outputs[0]
    t = x.reshape(64, 4, 8)
    np.testing.assert_array_equal(out[:, 0:32], x)
    np.testing.assert_array_equal(out[:, 32:64], t.transpose(0, 2, 1).reshape(64, 32))
    np.testing.assert_array_equal(out[:, 64:72], t[:, 2, :])
    np.testing.assert_array_equal(out[:, 72:96], x[:, 8:32])
    np.testing.assert_array_equal(out[:, 96:112], x[:, 0:32:2])


GATHER_SCATTER = """
def k(table, idx):
    P = idx.shape[0]
    F = table.shape[1]
    out = nl.ndarray((table.shape[0], F), dtype=table.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((table.shape[0], F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(zero, 0.0)
    nisa.dma_copy(out, zero)
    ids = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    rows = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap(pattern=[[F, P], [1, F]], vector_offset=ids, indirect_dim=0))
    nisa.tensor_scalar(rows, rows, nl.add, 100.0)
    nisa.dma_copy(dst=out.ap(pattern=[[F, P], [1, F]], vector_offset=ids, indirect_dim=0), src=rows)
    return out
"""

GATHER_LEGACY = """
def k(table, idx):
    P = idx.shape[0]
    out = nl.ndarray((P, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    ids = nl.load(idx)
    rows = nl.load(table[ids, 0:table.shape[1]])
    nl.store(out, rows)
    return out
"""


def test_indirect_dma_gather_and_scatter(nki_kernel, kernel, rng):
    table = rng.standard_normal((40, 16)).astype(np.float32)
    idx = rng.permutation(40)[:8].reshape(8, 1).astype(np.uint32)
    k = nki_kernel(GATHER_SCATTER)
    out = k.run("k", table, idx).outputs[0]
    want = np.zeros_like(table)
    want[idx[:, 0]] = table[idx[:, 0]] + 100
    np.testing.assert_allclose(out, want, rtol=1e-6)
    records = k.run("k", table, idx, numerics=False).trace.records
    gather = next(r for r in records if r.line == k.line_of("src=table.ap"))
    ids_tid = next(r.writes[0].tensor_id for r in records if r.line == k.line_of("src=idx"))
    assert ids_tid in {region.tensor_id for region in gather.reads}  # the index tile is read
    np.testing.assert_array_equal(kernel(GATHER_LEGACY).run("k", table, idx).outputs[0], table[idx[:, 0]])


def test_an_out_of_range_gather_index_is_an_nki_error(kernel, rng):
    table = rng.standard_normal((4, 8)).astype(np.float32)
    k = kernel(GATHER_LEGACY)
    with pytest.raises(NkiError) as err:
        k.run("k", table, np.array([[1], [9]], dtype=np.uint32))
    assert err.value.code == "err_tensor_access_out_of_bound"
    assert err.value.line == k.line_of("rows = nl.load")


# --- names: constants, finfo, dtype attributes, annotations -----------------------------------

NAMES = """
import nki.language.constants as constants

def k(x: nki.tensor, scale: float = 1.0) -> nki.tensor:
    assert isinstance(x, nl.NkiTensor)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    low = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(low, t, nl.maximum, nl.fp32.min)
    nisa.tensor_scalar(low, low, nl.minimum, nl.finfo(nl.bfloat16).max)
    nisa.tensor_scalar(low, low, nl.add, float(constants.sizeinbytes(nl.bfloat16)))
    nisa.dma_copy(out, low)
    return out
"""


def test_constants_finfo_fp32_and_annotations(nki_kernel):
    x = np.array([[1.0, -3e38, 3e38, 0.0]], dtype=np.float32)
    out = nki_kernel(NAMES).run("k", x).outputs[0]
    bf16_max = float(np.finfo(np.float32).max)  # bf16 max rounds above every value here
    assert out[0, 0] == 3.0 and out[0, 3] == 2.0
    assert out[0, 1] == np.float32(-3e38) + 2 and out[0, 2] <= bf16_max


# --- more Vector / GpSimd instructions ----------------------------------------------------------

MORE_OPS = """
def k(x, idx, pred):
    P, F = x.shape
    out = nl.ndarray((P, 8 + 3 * F), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    ids = nl.ndarray((P, F), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(ids, idx)
    keep = nl.ndarray((P, F), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(keep, pred)
    top = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(top, t)
    gathered = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_n_gather(gathered, t, ids)
    chosen = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(chosen, -1.0)
    nisa.tensor_copy_predicated(dst=chosen, src=t, predicate=keep)
    running = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(running, t, nl.multiply, nl.add, 2.0)
    nisa.dma_copy(out[:, 0:8], top)
    nisa.dma_copy(out[:, 8:8 + F], gathered)
    nisa.dma_copy(out[:, 8 + F:8 + 2 * F], chosen)
    nisa.dma_copy(out[:, 8 + 2 * F:8 + 3 * F], running)
    return out
"""


def test_max8_gather_predicated_copy_and_cumulative_scan(nki_kernel, rng):
    P, F = 16, 32
    x = rng.standard_normal((P, F)).astype(np.float32)
    idx = rng.integers(0, F, (P, F)).astype(np.uint32)
    pred = (rng.random((P, F)) > 0.5).astype(np.uint8)
    out = nki_kernel(MORE_OPS).run("k", x, idx, pred).outputs[0]
    np.testing.assert_array_equal(out[:, 0:8], -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_array_equal(out[:, 8 : 8 + F], np.take_along_axis(x, idx.astype(np.int64), axis=1))
    np.testing.assert_array_equal(out[:, 8 + F : 8 + 2 * F], np.where(pred != 0, x, -1.0))
    np.testing.assert_allclose(out[:, 8 + 2 * F :], np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)


def test_accumulator_commands_that_need_register_state_are_refused(nki_kernel):
    k = nki_kernel("""
    def k(x):
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(t, nl.exp, t, reduce_op=nl.add, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        return x
    """)
    with pytest.raises(NkiError) as err:
        k.run("k", np.zeros((4, 4), np.float32))
    assert err.value.code == "err_unsupported_api"
    assert "nisa.activation is not supported by the emulator yet" in err.value.message
    assert err.value.line == k.line_of("reduce_cmd=nisa.reduce_cmd.reduce")


VIEWS_MORE = """
def k(x: nki.tensor, scale: nki.dtype = nl.float32):
    P, F = x.shape
    out = nl.ndarray((P, 3 * F), dtype=nl.float32, buffer=nl.shared_hbm)
    assert nl.is_hbm(x.buffer) and nl.is_sbuf(nl.MemoryRegion.sbuf) and nl.is_on_chip(nl.psum)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    bits = t.view(nl.int32)
    as_int = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(as_int, bits)
    wide = t.expand_dim(1)
    assert wide.shape == (P, 1, F) and wide.squeeze_dim(1).shape == (P, F)
    eye = nl.shared_identity_matrix(P, dtype=nl.float32)
    nisa.dma_copy(out[:, 0:F], nl.copy(as_int, dtype=nl.float32))
    nisa.dma_copy(out[:, F:2 * F], wide.squeeze_dim(1))
    nisa.dma_copy(out[:, 2 * F:3 * F], eye[:, 0:F])
    return out
"""


def test_dtype_views_dims_buffers_and_identity(nki_kernel, rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    out = nki_kernel(VIEWS_MORE).run("k", x).outputs[0]
    np.testing.assert_array_equal(out[:, 0:8], x.view(np.int32).astype(np.float32))
    np.testing.assert_array_equal(out[:, 8:16], x)
    np.testing.assert_array_equal(out[:, 16:24], np.eye(16, dtype=np.float32)[:, 0:8])


def test_rms_norm_in_both_styles(kernel, nki_kernel, rng):
    body = """
    def k(x, w):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        g = nl.load(w)
        nl.store(out, nl.rms_norm(t, g, axis=1, n=x.shape[1]))
        return out
    """
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, (32, 64)).astype(np.float32)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6) * w
    for k in (kernel(body), nki_kernel(body)):
        assert rel_l2(k.run("k", x, w).outputs[0], want) < 1e-6


TOPK = """
def k(x):
    P, F = x.shape
    out = nl.ndarray((P, 16 + F), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    top = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(top, t)
    where = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(where, t, top)
    replaced = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    positions = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=replaced, data=t, vals=top, imm=-1e9, dst_idx=positions)
    nisa.dma_copy(out[:, 0:8], nl.copy(where, dtype=nl.float32))
    nisa.dma_copy(out[:, 8:16], nl.copy(positions, dtype=nl.float32))
    nisa.dma_copy(out[:, 16:16 + F], replaced)
    return out
"""


def test_top_k_with_max8_find_index8_and_match_replace8(nki_kernel, rng):
    P, F = 8, 40
    x = rng.permutation(P * F).reshape(P, F).astype(np.float32)  # distinct values
    out = nki_kernel(TOPK).run("k", x).outputs[0]
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(out[:, 0:8], order)
    np.testing.assert_array_equal(out[:, 8:16], order)
    want = x.copy()
    np.put_along_axis(want, order, -1e9, axis=1)
    np.testing.assert_array_equal(out[:, 16:], want)


def test_atomic_rmw_updates_hbm(kernel, rng):
    k = kernel("""
    def k(acc, x):
        for i in nl.affine_range(2):
            t = nl.load(x[i * 4:(i + 1) * 4, :])
            nl.atomic_rmw(acc[0:4, :], value=t, op=np.add)
        return acc
    """)
    acc = rng.standard_normal((4, 8)).astype(np.float32)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(k.run("k", acc, x).outputs[0], acc + x[:4] + x[4:], rtol=1e-6)


def test_exponential_with_a_row_max_and_its_sum(nki_kernel, rng):
    k = nki_kernel("""
    def k(x):
        P, F = x.shape
        out = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(row_max, nl.maximum, t, axis=1, keepdims=True)
        e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e, src=t, max_value=row_max, reduce_res=total,
                         reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.dma_copy(out[:, 0:F], e)
        nisa.dma_copy(out[:, F:F + 1], total)
        return out
    """)
    x = rng.standard_normal((16, 24)).astype(np.float32)
    out = k.run("k", x).outputs[0]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out[:, :24], e, rtol=1e-6)
    np.testing.assert_allclose(out[:, 24], e.sum(axis=1), rtol=1e-5)


def test_range_select_keeps_a_per_row_window_and_its_max(nki_kernel, rng):
    k = nki_kernel("""
    def k(x, lo, hi):
        P, F = x.shape
        out = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        b0 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        b1 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(b0, lo)
        nisa.dma_copy(b1, hi)
        kept = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        top = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=kept, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=b0, bound1=b1, reduce_res=top, reduce_op=nl.maximum,
                          reduce_cmd=nisa.reduce_cmd.reset_reduce, range_start=2, on_false_value=-5.0)
        nisa.dma_copy(out[:, 0:F], kept)
        nisa.dma_copy(out[:, F:F + 1], top)
        return out
    """)
    P, F = 8, 16
    x = rng.standard_normal((P, F)).astype(np.float32)
    lo = rng.integers(0, 8, (P, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 8, (P, 1)).astype(np.float32)
    out = k.run("k", x, lo, hi).outputs[0]
    index = 2 + np.arange(F)[None, :]
    want = np.where((index >= lo) & (index < hi), x, -5.0)
    np.testing.assert_array_equal(out[:, :F], want)
    np.testing.assert_array_equal(out[:, F], want.max(axis=1))


def test_select_reduce_with_a_row_fallback_and_its_max(nki_kernel, rng):
    k = nki_kernel("""
    def k(x, pred, fallback):
        P, F = x.shape
        out = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        p = nl.ndarray((P, F), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(p, pred)
        f = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(f, fallback)
        picked = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        top = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=picked, predicate=p, on_true=t, on_false=f, reduce_res=top,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, reverse_pred=True)
        nisa.dma_copy(out[:, 0:F], picked)
        nisa.dma_copy(out[:, F:F + 1], top)
        return out
    """)
    P, F = 8, 16
    x = rng.standard_normal((P, F)).astype(np.float32)
    pred = (rng.random((P, F)) > 0.5).astype(np.uint8)
    fallback = rng.standard_normal((P, 1)).astype(np.float32)
    out = k.run("k", x, pred, fallback).outputs[0]
    want = np.where(pred == 0, x, fallback)
    np.testing.assert_array_equal(out[:, :F], want)
    np.testing.assert_array_equal(out[:, F], want.max(axis=1))


def test_view_strides_offsets_and_patterns_round_trip_through_ap(nki_kernel, rng):
    k = nki_kernel("""
    def k(x):
        out = nl.ndarray((16, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        v = x[2:18, 1:9:2]
        assert v.strides == (32, 2) and v.offset == 2 * 32 + 1
        assert v.get_pattern() == [[32, 16], [2, 4]]
        assert not v.is_contiguous() and x.is_contiguous() and not v.is_indirect()
        nisa.dma_copy(out, x.ap(v.get_pattern(), offset=v.offset))
        return out
    """)
    x = rng.standard_normal((32, 32)).astype(np.float32)
    np.testing.assert_array_equal(k.run("k", x).outputs[0], x[2:18, 1:9:2])


def test_reshape_dim_and_flatten_dims(nki_kernel, rng):
    k = nki_kernel("""
    def k(x):
        out = nl.ndarray((16, 24), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((16, 24), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        split = t.reshape_dim(1, (4, -1))
        assert split.shape == (16, 4, 6)
        swapped = nl.ndarray((16, 6, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(swapped, split.permute((0, 2, 1)))
        back = split.flatten_dims(1, 2)
        assert back.shape == (16, 24)
        nisa.dma_copy(out[:, 0:12], back.slice(1, 0, 12))
        nisa.dma_copy(out[:, 12:24], swapped.flatten_dims(1, 2).slice(1, 0, 12))
        return out
    """)
    x = rng.standard_normal((16, 24)).astype(np.float32)
    out = k.run("k", x).outputs[0]
    np.testing.assert_array_equal(out[:, :12], x[:, :12])
    np.testing.assert_array_equal(out[:, 12:], x.reshape(16, 4, 6).transpose(0, 2, 1).reshape(16, 24)[:, :12])
