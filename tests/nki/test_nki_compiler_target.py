"""nki.compiler (direct allocation, decorators, no_reorder), the Tensor Engine transpose written
into an SBUF tile, nisa.get_nc_version per target, and the trn3 (NeuronCore-v4) instructions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.mx import quantize_values, unpack_x4
from accelopt.profiling.metrics import profile_trace

LEGACY = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.compiler as ncc
from neuronxcc.nki.language import par_dim
"""
CURRENT = """\
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa
"""


def _load(tmp_path: Path, text: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return runtime.load_kernel(path.read_text(), name, str(path))


# --- direct allocation --------------------------------------------------------------------------

DIRECT = LEGACY + """
@ncc.skip_middle_end_transformations
@nki.jit
def direct(a, bufs):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((8, par_dim(128), 512), dtype=a.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(bufs,)))
    for i in nl.affine_range(8):
        t[i] = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(t[i]))
    return out
"""


def test_mod_alloc_places_blocks_modulo_and_times_with_that_placement(tmp_path):
    fn = _load(tmp_path, DIRECT, "direct")
    a = np.random.default_rng(1).standard_normal((1024, 512)).astype(np.float32)
    run = runtime.run_kernel(fn, [a, 2])
    np.testing.assert_allclose(run.outputs[0], np.exp(a), rtol=1e-6)
    assert run.trace.compiler_flags == ("skip_middle_end_transformations",)
    (_, name, shape, memory, entries) = run.trace.placements[0]
    assert (name, shape, memory) == ("t", [8, 128, 512], "sbuf")
    # the mod_alloc page's rule: byte address = base + (block % tiles) * bytes per partition
    assert [e[-1] for e in entries] == [(i % 2) * 512 * 4 for i in range(8)]
    latency = {}
    for bufs in (1, 2, 8):
        trace = runtime.run_kernel(fn, [a, bufs], numerics=False).trace
        profile, timeline = profile_trace(trace, "trn2")
        # the loop's time, without the device's fixed kernel start (hardware/specs.py)
        latency[bufs] = profile.latency_ms - timeline.kernel_start_s * 1e3
    # one physical tile serialises the loop; two let a load overlap the previous block's work
    assert latency[1] > 1.3 * latency[2]
    assert latency[8] <= latency[2]


def test_psum_mod_alloc_alloc_and_decorators_are_accepted(tmp_path):
    text = LEGACY + """
@ncc.enable_stack_allocator
@nki.jit
def acc(a, b):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    lhs = nl.ndarray((par_dim(128), 128), dtype=a.dtype, buffer=ncc.sbuf.alloc(lambda idx, p, f: (0, 0)))
    rhs = nl.ndarray((par_dim(128), 512), dtype=b.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    ps = nl.ndarray((2, par_dim(128), 512), dtype=np.float32, buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)))
    res = nl.ndarray((par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.auto_alloc())
    lhs[...] = nl.load(a)
    rhs[...] = nl.load(b)
    with ncc.no_reorder():
        ps[0] = nisa.nc_matmul(lhs, rhs)
        ps[1] = nisa.nc_matmul(lhs, rhs)
    res[...] = nl.copy(ps[0])
    res[...] = nl.add(res, ps[1])
    nl.store(out, value=res)
    return out
"""
    fn = _load(tmp_path, text, "acc")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)
    run = runtime.run_kernel(fn, [a, b])
    np.testing.assert_allclose(run.outputs[0], 2 * (a.T @ b), rtol=1e-4, atol=1e-4)
    psum = next(p for p in run.trace.placements if p[3] == "psum")
    assert [e[1] for e in psum[4]] == [0, 1]  # banks 0 and 1
    ordered = [r for r in run.trace.records if "no_reorder" in r.extra]
    assert [r.opcode for r in ordered] == ["nc_matmul", "nc_matmul"]
    _, timeline = profile_trace(run.trace, "trn2")
    first, second = (op for op in timeline.ops if op.record in {r.index for r in ordered})
    assert second.start >= first.end


# --- Tensor Engine transpose into SBUF ----------------------------------------------------------

TRANSPOSE = LEGACY + """
@nki.jit
def transposed(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    t = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nisa.nc_transpose(x)
    nl.store(out, value=t)
    return out
"""


def test_transpose_left_to_the_compiler_lands_in_sbuf_through_psum(tmp_path):
    fn = _load(tmp_path, TRANSPOSE, "transposed")
    a = np.random.default_rng(3).standard_normal((128, 96)).astype(np.float32)
    for numerics in (True, False):
        run = runtime.run_kernel(fn, [a], numerics=numerics)
        kinds = [(r.opcode, r.engine.value, r.dst_memory.value) for r in run.trace.records]
        assert ("transpose", "tensor", "psum") in kinds and ("psum_copy", "unassigned", "sbuf") in kinds
    np.testing.assert_array_equal(runtime.run_kernel(fn, [a]).outputs[0], a.T)


def test_explicit_tensor_engine_transpose_still_writes_only_psum(tmp_path):
    fn = _load(tmp_path, TRANSPOSE.replace("nisa.nc_transpose(x)", "nisa.nc_transpose(x, engine=nisa.tensor_engine)"), "transposed")
    with pytest.raises(NkiError, match="err_unsupported_memory"):
        runtime.run_kernel(fn, [np.zeros((128, 96), np.float32)])


# --- the target's NeuronCore generation ------------------------------------------------------------

VERSION = LEGACY + """
@nki.jit
def version(a):
    out = nl.ndarray((1, 1), dtype=np.float32, buffer=nl.shared_hbm)
    v = nisa.get_nc_version()
    gen = 2 if v == nisa.nc_version.gen2 else 3 if v == nisa.nc_version.gen3 else 4
    nl.store(out, value=nl.full((1, 1), float(gen), dtype=np.float32))
    return out
"""


@pytest.mark.parametrize(("target", "gen"), [(None, 2), ("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_get_nc_version_follows_the_target(tmp_path, target, gen):
    fn = _load(tmp_path, VERSION, "version")
    run = runtime.run_kernel(fn, [np.zeros((1, 1), np.float32)], target=target)
    assert run.outputs[0][0, 0] == gen and run.trace.target == (target or "trn1")


def test_platform_target_on_jit_wins(tmp_path):
    fn = _load(tmp_path, VERSION.replace("@nki.jit", '@nki.jit(platform_target="trn3")'), "version")
    assert runtime.run_kernel(fn, [np.zeros((1, 1), np.float32)], target="trn2").outputs[0][0, 0] == 4


# --- trn3: MX quantization and matmul, activate2, abs_max ----------------------------------------

MX = CURRENT + """
@nki.jit(platform_target="trn3")
def mx_matmul(a, b):
    out = nl.ndarray((a.shape[1] // 4, b.shape[1] // 4), dtype=np.float32, buffer=nl.shared_hbm)
    k = a.shape[0]
    a_sb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    b_sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_sb, src=a)
    nisa.dma_copy(dst=b_sb, src=b)
    a_q = nl.ndarray((k, a.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    b_q = nl.ndarray((k, b.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    a_s = nl.ndarray((k // 8, a.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
    b_s = nl.ndarray((k // 8, b.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=a_q, src=a_sb, dst_scale=a_s)
    nisa.quantize_mx(dst=b_q, src=b_sb, dst_scale=b_s)
    res = nl.ndarray((a.shape[1] // 4, b.shape[1] // 4), dtype=np.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=res, stationary=a_q, moving=b_q, stationary_scale=a_s, moving_scale=b_s)
    res_sb = nl.ndarray(res.shape, dtype=np.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res_sb, src=res)
    nisa.dma_copy(dst=out, src=res_sb)
    return out
"""


def _mx_reference(x: np.ndarray) -> np.ndarray:
    """What the docs' layout means, straight from numpy: dequantized logical [4K, F/4] matrix."""
    data, exponents = quantize_values(x.astype(np.float32), np.dtype([("float8_e4m3fn_x4", "<u4")]))
    values = unpack_x4(data).reshape(x.shape[0], x.shape[1] // 4, 4)
    scale = np.repeat(np.ldexp(1.0, exponents), 8, axis=0)[:, :, None]
    return (values * scale).transpose(0, 2, 1).reshape(4 * x.shape[0], x.shape[1] // 4)


def test_mx_quantize_and_matmul_match_numpy(tmp_path):
    fn = _load(tmp_path, MX, "mx_matmul")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    run = runtime.run_kernel(fn, [a, b])
    # against the exact product of the dequantized operands
    np.testing.assert_allclose(run.outputs[0], _mx_reference(a).T @ _mx_reference(b), rtol=1e-5, atol=1e-4)
    # and MX-accurate against the bf16 product: FP8 e4m3 keeps 3 mantissa bits
    exact = a.astype(np.float32).reshape(128, 64, 4).transpose(0, 2, 1).reshape(512, 64)
    exact_b = b.astype(np.float32).reshape(128, 128, 4).transpose(0, 2, 1).reshape(512, 128)
    err = np.linalg.norm(run.outputs[0] - exact.T @ exact_b) / np.linalg.norm(exact.T @ exact_b)
    assert err < 0.05
    mm = next(r for r in run.trace.records if r.opcode == "nc_matmul_mx")
    assert (mm.engine.value, mm.matmul_kmn, mm.dtype) == ("tensor", (512, 64, 128), "float8_e4m3fn_x4")
    q = [r for r in run.trace.records if r.opcode == "quantize_mx"]
    assert len(q) == 2 and all(r.engine.value == "vector" for r in q)


def test_mx_ops_need_neuroncore_v4(tmp_path):
    fn = _load(tmp_path, MX.replace('@nki.jit(platform_target="trn3")', "@nki.jit"), "mx_matmul")
    a = np.zeros((128, 256), ml_dtypes.bfloat16)
    with pytest.raises(NkiError, match="err_unsupported_on_target") as info:
        runtime.run_kernel(fn, [a, a], target="trn2")
    assert "quantize_mx" in info.value.message and info.value.line > 0


def test_activate2_and_abs_max(tmp_path):
    text = CURRENT + """
@nki.jit(platform_target="trn3")
def act2(a, b):
    out = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=np.float32, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), dtype=np.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    m = nl.abs_max(x, y)
    nisa.activate2(dst=x, op=nl.exp, data=m, op0=nl.multiply, imm0=-0.5, op1=nl.add, imm1=0.25,
                   reduce_op=nl.add, reduce_res=r)
    nisa.dma_copy(dst=out, src=x)
    nisa.dma_copy(dst=red, src=r)
    return out, red
"""
    fn = _load(tmp_path, text, "act2")
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    out, red = runtime.run_kernel(fn, [a, b]).outputs
    expected = np.exp(np.maximum(np.abs(a), np.abs(b)) * -0.5 + 0.25)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(red[:, 0], expected.sum(axis=1), rtol=1e-5)


def test_ndarray_address_places_the_tile_in_nki_07_style(tmp_path):
    text = CURRENT + """
@nki.jit
def pinned(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, address=(0, 4096))
        nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out
"""
    fn = _load(tmp_path, text, "pinned")
    a = np.random.default_rng(6).standard_normal((512, 256)).astype(np.float32)
    run = runtime.run_kernel(fn, [a])
    np.testing.assert_array_equal(run.outputs[0], a)
    assert run.trace.placements[0][3:] == ["sbuf", [[0, 4096]]]
    pinned_ms = profile_trace(runtime.run_kernel(fn, [a], numerics=False).trace, "trn2")[0].latency_ms
    free = _load(tmp_path, text.replace(", address=(0, 4096)", ""), "pinned")
    auto_ms = profile_trace(runtime.run_kernel(free, [a], numerics=False).trace, "trn2")[0].latency_ms
    assert pinned_ms > auto_ms  # one fixed buffer: each iteration waits for the previous store
