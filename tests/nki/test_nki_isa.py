"""nisa.* against numpy semantics."""

from __future__ import annotations

import numpy as np
import pytest
from nki_helpers import rel_l2


def test_nc_matmul_accumulates_in_psum(kernel, rng):
    k = kernel(
        """
        def k(a_t, b):
            out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((32, 64), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(3):
                s = nl.load(a_t[kk * 16:(kk + 1) * 16, :])
                m = nl.load(b[kk * 16:(kk + 1) * 16, :])
                acc += nisa.nc_matmul(s, m)
            nl.store(out, value=nl.copy(acc))
            return out
        """
    )
    a_t = rng.standard_normal((48, 32)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    (out,) = k.run("k", a_t, b).outputs
    assert rel_l2(out, a_t.T.astype(np.float64) @ b) < 1e-6


def test_psum_slice_accumulation_and_is_transpose(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            ident = nl.load(nl.shared_constant(np.eye(32, dtype=np.float32)))
            ps = nl.zeros((2, par_dim(16), 32), dtype=nl.float32, buffer=nl.psum)
            ps[0, :, :] += nisa.nc_matmul(t, ident, is_transpose=True)
            ps[0, :, :] += nisa.nc_matmul(t, ident, is_transpose=True)
            nl.store(out, value=ps[0])
            return out
        """
    )
    x = rng.standard_normal((32, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out, 2 * x.T, rtol=1e-6)


def test_nc_transpose_tensor_and_vector_engines(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            out2 = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value=nl.copy(nisa.nc_transpose(t)))
            nl.store(out2, value=nisa.nc_transpose(t, engine=nisa.vector_engine))
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out, out2 = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(out2, x.T)


def test_activation_scale_bias(kernel, rng):
    k = kernel(
        """
        def k(x, b, s):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            bias = nl.load(b)
            scale = nl.load(s)
            nl.store(out, value=nisa.activation(op=nl.exp, data=t, bias=bias, scale=0.5))
            nl.store(out2, value=nisa.activation(np.tanh, t, scale=scale))
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((8, 1)).astype(np.float32)
    s = rng.standard_normal((8, 1)).astype(np.float32)
    out, out2 = k.run("k", x, b, s).outputs
    assert rel_l2(out, np.exp(x * 0.5 + b)) < 1e-6
    assert rel_l2(out2, np.tanh(x * s)) < 1e-6


def test_activation_reduce_writes_the_reduction(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            red = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)
            sq = nisa.activation_reduce(op=np.square, data=t, reduce_op=np.add, reduce_res=red)
            nl.store(out, value=red)
            return out
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out, (x * x).sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize(
    ("args", "ref"),
    [
        ("op0=np.subtract, operand0=2.0", lambda x, c: x - 2),
        ("op0=np.subtract, operand0=2.0, reverse0=True", lambda x, c: 2 - x),
        ("op0=nl.multiply, operand0=c, op1=np.add, operand1=1.0", lambda x, c: x * c + 1),
        (
            "op0=np.divide, operand0=c, reverse0=True, op1=np.subtract, operand1=3.0, reverse1=True",
            lambda x, c: 3 - c / x,
        ),
    ],
)
def test_tensor_scalar_ops_and_reversal(kernel, rng, args, ref):
    k = kernel(
        f"""
        def k(x, cc):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            c = nl.load(cc)
            nl.store(out, value=nisa.tensor_scalar(t, {args}, engine=nisa.unknown_engine))
            return out
        """
    )
    x = rng.uniform(1, 2, (8, 16)).astype(np.float32)
    c = rng.uniform(1, 2, (8, 1)).astype(np.float32)
    (out,) = k.run("k", x, c).outputs
    np.testing.assert_allclose(out, ref(x, c), rtol=1e-6)


def test_tensor_tensor_and_scalar_tensor_tensor(kernel, rng):
    k = kernel(
        """
        def k(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            b = nl.load(y)
            nl.store(out, value=nisa.tensor_tensor(a, b, op=np.maximum))
            nl.store(out2, value=nisa.scalar_tensor_tensor(data=a, op0=np.multiply, operand0=3.0, op1=np.subtract, operand1=b))
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal((8, 16)).astype(np.float32)
    out, out2 = k.run("k", x, y).outputs
    np.testing.assert_array_equal(out, np.maximum(x, y))
    np.testing.assert_allclose(out2, 3 * x - y, rtol=1e-6)


def test_tensor_tensor_scan_recurrence(kernel, rng):
    k = kernel(
        """
        def k(a, b, h0):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            init = nl.load(h0)
            nl.store(out, value=nisa.tensor_tensor_scan(x, y, initial=init, op0=np.multiply, op1=np.add))
            return out
        """
    )
    a = rng.uniform(0.5, 1, (4, 12)).astype(np.float32)
    b = rng.standard_normal((4, 12)).astype(np.float32)
    h0 = rng.standard_normal((4, 1)).astype(np.float32)
    (out,) = k.run("k", a, b, h0).outputs
    ref = np.empty_like(a)
    h = h0[:, 0].astype(np.float64)
    for i in range(12):
        h = a[:, i] * h + b[:, i]
        ref[:, i] = h
    assert rel_l2(out, ref) < 1e-6


def test_tensor_reduce_negate_keepdims(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value=nisa.tensor_reduce(np.max, t, axis=[1], negate=True, keepdims=True))
            return out
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out, -x.max(1, keepdims=True))


def test_iota_affine_select_memset_reciprocal(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            out2 = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            out3 = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            i_p = nl.arange(8)[:, None]
            i_f = nl.arange(8)[None, :]
            idx = nisa.iota(8 * i_p + i_f, dtype=nl.float32)
            nl.store(out, value=idx)
            t = nl.load(x)
            nl.store(out2, value=nisa.affine_select(i_p - i_f >= 0, t, -1e9))
            filled = nisa.memset((8, 8), 4.0, dtype=nl.float32)
            nl.store(out3, value=nisa.reciprocal(filled))
            return out, out2, out3
        """
    )
    x = rng.standard_normal((8, 8)).astype(np.float32)
    out, out2, out3 = k.run("k", x).outputs
    np.testing.assert_array_equal(out, np.arange(64).reshape(8, 8))
    np.testing.assert_array_equal(out2, np.where(np.tril(np.ones((8, 8), bool)), x, np.float32(-1e9)))
    np.testing.assert_array_equal(out3, 0.25)


def test_bn_stats_and_aggr_give_mean_and_variance(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            stats = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.sbuf)
            for c in nl.affine_range(2):
                t = nl.load(x[:, c * 10:(c + 1) * 10])
                stats[:, c * 6:(c + 1) * 6] = nisa.bn_stats(t)
            nl.store(out, value=nisa.bn_aggr(stats))
            return out
        """
    )
    x = rng.standard_normal((8, 20)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], x.var(1), rtol=1e-5)


def test_tensor_copy_and_dma_copy(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value=nisa.tensor_copy(t, engine=nisa.gpsimd_engine))
            nisa.dma_copy(dst=out2, src=x)
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out, out2 = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(out2, x)


def test_newer_api_dst_keyword_writes_into_the_destination(kernel, rng):
    k = kernel(
        """
        def k(a_t, b):
            out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.load(a_t)
            m = nl.load(b)
            ps = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(stationary=s, moving=m, dst=ps)
            sb = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(src=ps, dst=sb)
            nl.store(out, value=sb)
            return out
        """
    )
    a_t = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((8, 32)).astype(np.float32)
    run = k.run("k", a_t, b)
    np.testing.assert_allclose(run.outputs[0], a_t.T @ b, rtol=1e-5, atol=1e-6)
    assert [r.opcode for r in run.trace.records] == [
        "dma_load",
        "dma_load",
        "nc_matmul",
        "psum_copy",
        "dma_store",
    ]


NEWER_API_BODY = """
def k(a_t, b, x):
    out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(a_t)
    m = nl.load(b)
    t = nl.load(x)
    ps = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.psum)
    sb = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    act = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    both = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    scaled = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    {calls}
    nl.store(out, value=scaled)
    return out
"""
POSITIONAL_DST = """nisa.nc_matmul(ps, s, m)
    nisa.tensor_copy(sb, ps)
    nisa.activation(act, nl.exp, t)
    nisa.tensor_tensor(both, sb, act, nl.add)
    nisa.tensor_scalar(scaled, both, np.multiply, 0.5, op1=np.add, operand1=1.0)"""
LEGACY = """ps[...] = nisa.nc_matmul(s, m)
    sb[...] = nisa.tensor_copy(ps)
    act[...] = nisa.activation(nl.exp, t)
    both[...] = nisa.tensor_tensor(sb, act, nl.add)
    scaled[...] = nisa.tensor_scalar(both, np.multiply, 0.5, op1=np.add, operand1=1.0)"""


def test_newer_api_positional_dst_matches_the_legacy_assignment(kernel, rng):
    """`nisa.op(dst, *legacy args)` (the newer API) writes dst exactly as `dst[...] = nisa.op(...)`."""
    a_t = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((8, 32)).astype(np.float32)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    runs = [
        kernel(NEWER_API_BODY.format(calls=calls)).run("k", a_t, b, x) for calls in (POSITIONAL_DST, LEGACY)
    ]
    expected = ((a_t.T @ b) + np.exp(x)) * 0.5 + 1.0
    for run in runs:
        np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-5, atol=1e-5)
    new, legacy = (
        [(r.opcode, r.engine, r.reads, r.writes, r.dst_memory) for r in run.trace.records] for run in runs
    )
    assert new == legacy
    assert [op for op, *_ in new] == [
        "dma_load",
        "dma_load",
        "dma_load",
        "nc_matmul",
        "psum_copy",
        "activation",
        "tensor_tensor",
        "tensor_scalar",
        "dma_store",
    ]
