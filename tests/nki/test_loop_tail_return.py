"""A `return` ending an nl.affine_range / nl.sequential_range body returns after the traced loop
(every iteration runs); under plain `range` and under a condition it keeps its Python meaning."""

from __future__ import annotations

import numpy as np


def test_a_return_ending_an_affine_range_body_returns_after_every_tile(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for p in nl.affine_range(x.shape[0] // 128):
                t = nl.load(x[p * 128:(p + 1) * 128, :])
                nl.store(out[p * 128:(p + 1) * 128, :], value=nl.exp(t))
                return out
        """
    )
    x = rng.standard_normal((384, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_the_same_return_in_a_plain_range_loop_stops_after_the_first_tile(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for p in range(x.shape[0] // 128):
                t = nl.load(x[p * 128:(p + 1) * 128, :])
                nl.store(out[p * 128:(p + 1) * 128, :], value=nl.exp(t))
                return out
        """
    )
    x = rng.standard_normal((256, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_allclose(out[:128], np.exp(x[:128]), rtol=1e-6)
    assert np.isnan(out[128:]).all()  # never written: Python returned in the first iteration


def test_a_conditional_return_inside_a_traced_loop_is_left_alone(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for p in nl.sequential_range(2):
                nl.store(out[p * 128:(p + 1) * 128, :], value=nl.load(x[p * 128:(p + 1) * 128, :]))
                if p == 0:
                    return out
            return out
        """
    )
    x = rng.standard_normal((256, 8)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out[:128], x[:128])
    assert np.isnan(out[128:]).all()
