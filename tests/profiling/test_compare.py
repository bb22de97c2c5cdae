"""Output comparison: relative L2 error, NaN/unwritten outputs, counts, shapes and precision."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from accelopt.profiling.compare import compare_outputs, relative_l2


def test_identical_outputs_pass_with_zero_error():
    r = np.random.RandomState(0).randn(8, 16).astype(np.float32)
    verdict = compare_outputs([r.copy()], [r], 2e-5)
    assert verdict.ok and verdict.max_error == 0.0


def test_error_is_relative_l2_against_the_tolerance():
    r = np.ones((4, 4), dtype=np.float32)
    k = r.copy()
    k[0, 0] = 1.5  # ||k - r|| / ||r|| = 0.5 / 4
    assert relative_l2(k, r) == 0.125
    assert compare_outputs([k], [r], 0.2).ok
    failed = compare_outputs([k], [r], 0.1, seed=42)
    assert (
        not failed.ok
        and failed.output == 0
        and "exceeds tolerance" in failed.message
        and "seed 42" in failed.message
    )
    assert failed.max_error == 0.125


def test_nan_anywhere_is_an_unwritten_output():
    r = np.zeros((2, 3), dtype=np.float32)
    k = r.copy()
    k[1, 2] = np.nan
    failed = compare_outputs([k], [r], 1.0)
    assert not failed.ok and "1 of 6 values NaN (unwritten or invalid)" in failed.message
    k[1, 2] = np.inf
    assert "infinite" in compare_outputs([k], [r], 1.0).message


def test_count_and_shape_mismatches():
    r = np.zeros((2, 3), dtype=np.float32)
    assert "returned 2 output(s), the reference has 1" in compare_outputs([r, r], [r], 1.0).message
    assert "shape (3, 2), expected (2, 3)" in compare_outputs([r.T.copy()], [r], 1.0).message


def test_lower_precision_than_the_reference_is_refused():
    r = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    failed = compare_outputs([r.astype(ml_dtypes.bfloat16)], [r], 1.0)
    assert not failed.ok and "less precise" in failed.message
    assert compare_outputs([r.astype(np.float64)], [r], 1e-6).ok  # more precise is fine


def test_a_zero_reference_needs_a_zero_output():
    r = np.zeros(4, dtype=np.float32)
    assert compare_outputs([r.copy()], [r], 1e-6).ok
    assert not compare_outputs([r + 1e-30], [r], 1e-6).ok
