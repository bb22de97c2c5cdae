"""nl.* against numpy semantics, on small tiles."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from nki_helpers import rel_l2

UNARY = {
    "exp": np.exp,
    "log": lambda x: np.log(np.abs(x) + 0.5),
    "sqrt": lambda x: np.sqrt(np.abs(x)),
    "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 0.5),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "relu": lambda x: np.maximum(x, 0),
    "square": np.square,
    "abs": np.abs,
    "negative": np.negative,
    "reciprocal": lambda x: 1 / (np.abs(x) + 0.5),
}
# inputs are shaped so that each function is well defined
PREP = {
    "log": "nl.add(nl.abs(t), 0.5)",
    "sqrt": "nl.abs(t)",
    "rsqrt": "nl.add(nl.abs(t), 0.5)",
    "reciprocal": "nl.add(nl.abs(t), 0.5)",
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(kernel, rng, name):
    k = kernel(
        f"""
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            u = {PREP.get(name, "t")}
            nl.store(out, value=nl.{name}(u))
            return out
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    assert rel_l2(out, UNARY[name](x.astype(np.float64))) < 2e-6


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "greater": lambda a, b: (a > b).astype(np.float32),
    "less_equal": lambda a, b: (a <= b).astype(np.float32),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tile_tile_and_tile_scalar(kernel, rng, name):
    k = kernel(
        f"""
        def k(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            b = nl.load(y)
            nl.store(out, value=nl.{name}(a, b))
            nl.store(out2, value=nl.{name}(a, 1.5))
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal((8, 16)).astype(np.float32) + 3
    out, out2 = k.run("k", x, y).outputs
    np.testing.assert_allclose(out, BINARY[name](x, y), rtol=1e-6)
    np.testing.assert_allclose(out2, BINARY[name](x, np.float32(1.5)), rtol=1e-6)


def test_python_operators_numpy_ufuncs_and_numpy_scalars(kernel, rng):
    k = kernel(
        """
        def k(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            b = nl.load(y)
            c = (a + b) * 2.0 - a / b
            d = np.maximum(c, np.dtype(np.float32).type(0.25))
            e = np.add(d, -a) ** 2
            nl.store(out, value=e)
            return out
        """
    )
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32) + 4
    (out,) = k.run("k", x, y).outputs
    c = (x + y) * 2 - x / y
    np.testing.assert_allclose(out, (np.maximum(c, 0.25) - x) ** 2, rtol=1e-5)


@pytest.mark.parametrize(
    ("call", "ref"),
    [
        ("nl.sum(t, axis=1)", lambda x: x.sum(1)),
        ("nl.sum(t, axis=[1], keepdims=True)", lambda x: x.sum(1, keepdims=True)),
        ("nl.max(t, axis=1, keepdims=True)", lambda x: x.max(1, keepdims=True)),
        ("nl.min(t, axis=(1,))", lambda x: x.min(1)),
        ("nl.mean(t, axis=1)", lambda x: x.mean(1)),
        ("nl.prod(t, axis=1, keepdims=True)", lambda x: x.prod(1, keepdims=True)),
        ("np.max(t, axis=1)", lambda x: x.max(1)),
    ],
)
def test_reductions_with_axis_and_keepdims(kernel, rng, call, ref):
    k = kernel(
        f"""
        def k(x):
            t = nl.load(x)
            r = {call}
            out = nl.ndarray(r.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=r)
            return out
        """
    )
    x = rng.uniform(0.5, 1.5, (8, 6)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out, ref(x), rtol=1e-5)


def test_partition_vector_broadcasts_along_free_axis(kernel, rng):
    """A [P] reduction meets a [P, F] tile along the free axis (not numpy's trailing rule)."""
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            s = nl.sum(t, axis=1)
            nl.store(out, value=nl.subtract(t, s))
            return out
        """
    )
    x = rng.standard_normal((8, 8)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out, x - x.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_bf16_results_round_to_nearest_even(kernel, rng):
    k = kernel(
        """
        def k(x, y):
            out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
            a = nl.load(x)
            b = nl.load(y)
            nl.store(out, value=nl.add(a, b, dtype=nl.bfloat16))
            return out
        """
    )
    x = rng.standard_normal((4, 32)).astype(np.float32)
    y = rng.standard_normal((4, 32)).astype(np.float32)
    (out,) = k.run("k", x, y).outputs
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), (x + y).astype(ml_dtypes.bfloat16).view(np.uint16))


def test_bf16_inputs_compute_in_fp32(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value=nl.multiply(t, t, dtype=nl.float32))
            return out
        """
    )
    x = np.array([[1.0078125, 3.0]], dtype=ml_dtypes.bfloat16)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x.astype(np.float32) ** 2)


def test_unwritten_output_reads_nan(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out[0:2, :], value=nl.load(x[0:2, :]))
            return out
        """
    )
    x = np.ones((4, 8), np.float32)
    (out,) = k.run("k", x).outputs
    assert np.all(out[:2] == 1) and np.all(np.isnan(out[2:]))


def test_full_zeros_ones_and_like(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((3, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out[0], value=nl.full((4, 8), 2.5, dtype=nl.float32))
            nl.store(out[1], value=nl.zeros_like(nl.load(x)))
            nl.store(out[2], value=nl.add(nl.ones((4, 8), dtype=nl.float32), 1))
            return out
        """
    )
    (out,) = k.run("k", np.zeros((4, 8), np.float32)).outputs
    np.testing.assert_array_equal(out[0], 2.5)
    np.testing.assert_array_equal(out[1], 0)
    np.testing.assert_array_equal(out[2], 2)


def test_matmul_transpose_x_and_plain(kernel, rng):
    k = kernel(
        """
        def k(a, b, at):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            out2 = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            xt = nl.load(at)
            nl.store(out, value=nl.matmul(x, y))
            res = nl.zeros((64, 32), dtype=nl.float32, buffer=nl.psum)
            res += nl.matmul(xt, y, transpose_x=True)
            nl.store(out2, value=res)
            return out, out2
        """
    )
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    out, out2 = k.run("k", a, b, np.ascontiguousarray(a.T)).outputs
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, a @ b, rtol=1e-5, atol=1e-5)


def test_transpose_copy_where_and_broadcast(kernel, rng):
    k = kernel(
        """
        def k(x, row):
            out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            out2 = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            r = nl.load(row)
            nl.store(out, value=nl.transpose(t))
            picked = nl.where(nl.greater(t, 0.0), t, r.broadcast_to((8, 16)))
            nl.store(out2, value=nl.copy(picked))
            return out, out2
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    row = rng.standard_normal((1, 16)).astype(np.float32)
    out, out2 = k.run("k", x, row).outputs
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(out2, np.where(x > 0, x, np.broadcast_to(row, x.shape)))


def test_loop_reduce_first_iteration_initialises(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(4):
                t = nl.load(x[i])
                acc = nl.loop_reduce(t, op=np.max, loop_indices=[i], dtype=nl.float32)
            nl.store(out, value=acc)
            return out
        """
    )
    x = rng.standard_normal((4, 8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x.max(0))


def test_softmax_and_mgrid_indexing(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            i_p, i_f = nl.mgrid[0:8, 0:16]
            t = nl.load(x[i_p, i_f])
            nl.store(out[i_p, i_f], value=nl.softmax(t, axis=1))
            return out
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    e = np.exp(x - x.max(1, keepdims=True))
    assert rel_l2(out, e / e.sum(1, keepdims=True)) < 1e-6


def test_load_transpose2d_and_shared_constant(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            ident = nl.shared_constant(np.eye(16, dtype=np.float32))
            t = nl.load_transpose2d(x)
            i = nl.load(ident)
            nl.store(out, value=nl.add(t, nl.sum(i, axis=1, keepdims=True)))
            return out
        """
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x.T + 1)


def test_program_id_and_tile_size(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            v = nl.full((1, 4), nl.program_id(0) + nl.tile_size.pmax + nl.tile_size.psum_fmax, dtype=nl.float32)
            nl.store(out, value=v)
            return out
        """
    )
    (out,) = k.run("k", np.zeros(1, np.float32)).outputs
    np.testing.assert_array_equal(out, 640)


def test_loop_reduce_assigned_into_a_tile_accumulates_there(kernel, rng):
    """Generated kernels assign the reduction into a block tile each iteration; that tile is the
    accumulator (no extra copies, no output-dependency error)."""
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            red = nl.ndarray((1, par_dim(8), 1), dtype=nl.float32, buffer=nl.sbuf)
            for i1 in nl.affine_range(4):
                t = nl.load(x[nl.arange(8)[:, None], 16 * i1 + nl.arange(16)[None, :]])
                s = nl.sum(t, axis=[1], keepdims=True)
                red[0, nl.arange(8)[:, None], 0] = nl.loop_reduce(s, op=np.add, loop_indices=[i1], dtype=nl.float32)
            nl.store(out, value=red[0])
            return out
        """
    )
    x = rng.standard_normal((8, 64)).astype(np.float32)
    run = k.run("k", x)
    np.testing.assert_allclose(run.outputs[0], x.sum(1, keepdims=True), rtol=1e-5)
    ops = [r.opcode for r in run.trace.records]
    assert ops.count("tensor_copy") == 1 and ops.count("tensor_tensor") == 3
    red_id = next(t.tensor_id for t in run.trace.tensors.values() if t.name == "red")
    reducers = [r for r in run.trace.records if r.extra.get("api") == "loop_reduce"]
    assert all(r.writes[0].tensor_id == red_id for r in reducers)


def test_integer_tiles_with_float_scalars_become_fp32(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            idx = nisa.iota(8 * nl.arange(4)[:, None] + nl.arange(8)[None, :], dtype=nl.int32)
            nl.store(out, value=nl.multiply(idx, 0.5))
            return out
        """
    )
    (out,) = k.run("k", np.zeros(1, np.float32)).outputs
    np.testing.assert_array_equal(out, np.arange(32).reshape(4, 8) * 0.5)


def test_fp8_results_round_like_ml_dtypes(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(x), 3.0, dtype=nl.float8_e4m3))
            return out
        """
    )
    x = rng.standard_normal((4, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    assert out.dtype == ml_dtypes.float8_e4m3
    np.testing.assert_array_equal(out.view(np.uint8), (x * 3).astype(ml_dtypes.float8_e4m3).view(np.uint8))
