"""NkiTensor.ap over an HBM tensor with a pattern axis that walks across dimensions (the rows of
[H, P, N] read as H*P rows): the pattern addresses flat row-major storage."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/ap_across_dims.py"

SOURCE = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def heads_as_rows(x):
    H, P, N = x.shape
    out = nl.ndarray((H * P, N), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((H * P, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[N, H * P], [1, N]], offset=0))
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def past_the_end(x):
    H, P, N = x.shape
    out = nl.ndarray((H * P, N), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((H * P, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[N, H * P], [1, N]], offset=N))  # one row too far
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def logged(name: str, x: np.ndarray) -> runtime.KernelRun:
    fn = runtime.load_kernel(SOURCE, name, PATH)
    return runtime.run_kernel(fn, [x], record_calls=True, source_path=PATH)


def test_rows_of_two_heads_read_as_one_tile_and_the_rerun_agrees():
    x = np.arange(2 * 64 * 8, dtype=np.float32).reshape(2, 64, 8)
    run = logged("heads_as_rows", x)
    np.testing.assert_array_equal(run.outputs[0], x.reshape(128, 8))
    trace = Trace.from_json(run.trace.to_json())
    trusted = rerun(trace, [x * 3])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], (x * 3).reshape(128, 8))


def test_a_pattern_past_the_tensor_is_out_of_bounds_at_its_line():
    with pytest.raises(NkiError, match="reaches element 1031") as error:
        logged("past_the_end", np.zeros((2, 64, 8), np.float32))
    assert error.value.code == "err_tensor_access_out_of_bound"
    assert (
        error.value.line
        == SOURCE.splitlines().index(next(s for s in SOURCE.splitlines() if "one row too far" in s)) + 1
    )
