"""The random operations. nisa.dropout / nl.dropout: zeroes elements with the given drop
probability, keeps the rest unscaled, is the same on every run of the same tile (the verified
re-run agrees), and refuses a probability tile that is not one value per partition. nl.rand:
uniform draws in [0, 1), different per call, the same on every run."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Trace

KERNEL = """
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def drop(x, p):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    probs = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=probs, src=p)
    kept = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=kept, data=t, prob=probs)
    nisa.dma_copy(dst=out, src=kept)
    nl.store(half, value=nl.dropout(nl.load(x), 0.5))
    return out, half
"""
PATH = "/virtual/dropout_kernels.py"


def run(x: np.ndarray, p: np.ndarray, record: bool = False) -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNEL, "drop", PATH)
    return runtime.run_kernel(fn, [x, p], record_calls=record, source_path=PATH)


def test_dropout_drops_at_the_rate_per_partition_and_keeps_values_unscaled():
    x = np.random.default_rng(3).uniform(1.0, 2.0, size=(128, 2048)).astype(np.float32)
    p = np.linspace(0.0, 1.0, 128, dtype=np.float32)[:, None]
    out, half = run(x, p).outputs
    dropped = out == 0
    assert not dropped[0].any() and dropped[-1].all()  # probability 0 keeps all, 1 drops all
    np.testing.assert_array_equal(out[~dropped], x[~dropped])  # survivors are not rescaled
    rates = dropped.mean(axis=1)
    assert np.abs(rates - p[:, 0]).max() < 0.06  # 2048 draws per partition
    assert abs((half == 0).mean() - 0.5) < 0.01
    assert not np.array_equal(half == 0, out == 0)


def test_dropout_is_the_same_on_every_run_and_its_verified_rerun_agrees():
    x = np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32)
    y = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
    p = np.full((64, 1), 0.3, dtype=np.float32)
    first, again = run(x, p, record=True), run(x, p)
    for a, b in zip(first.outputs, again.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    returned = Trace.from_json(first.trace.to_json())
    trusted = rerun(returned, [y, p])
    assert compare_traces(returned, trusted.trace) is None
    direct = run(y, p).outputs
    for a, b in zip(trusted.outputs, direct, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_probability_tile_must_hold_one_value_per_partition():
    bad = KERNEL.replace("(x.shape[0], 1), dtype=nl.float32", "(x.shape[0], 2), dtype=nl.float32")
    fn = runtime.load_kernel(bad, "drop", PATH)
    x = np.ones((8, 16), dtype=np.float32)
    with pytest.raises(NkiError, match="one value per partition") as error:
        runtime.run_kernel(fn, [x, np.ones((8, 2), dtype=np.float32)], source_path=PATH)
    assert error.value.line == bad.splitlines().index("    nisa.dropout(dst=kept, data=t, prob=probs)") + 1


RAND = """
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def draws():
    a = nl.rand((64, 512))
    b = nl.rand((64, 512))
    out = nl.ndarray((2, 64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0], src=a)
    nisa.dma_copy(dst=out[1], src=b)
    return out
"""


def test_rand_draws_uniformly_differently_per_call_and_the_same_per_run():
    fn = runtime.load_kernel(RAND, "draws", "/virtual/rand.py")
    first = runtime.run_kernel(fn, [], record_calls=True, source_path="/virtual/rand.py")
    (out,) = first.outputs
    assert 0.0 <= out.min() and out.max() < 1.0 and abs(out.mean() - 0.5) < 0.01
    assert np.corrcoef(out[0].ravel(), out[1].ravel())[0, 1] < 0.05  # two calls, two streams
    (again,) = runtime.run_kernel(fn, [], source_path="/virtual/rand.py").outputs
    np.testing.assert_array_equal(out, again)
    returned = Trace.from_json(first.trace.to_json())
    trusted = rerun(returned, [])
    np.testing.assert_array_equal(trusted.outputs[0], out)
