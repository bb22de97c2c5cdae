"""The verified re-run remakes what these kernels made: a local_gather tile (logged as one call)
and tensors placed by nki.compiler allocations (re-run in their memory; placement is timing data).
Each kernel is ours; results are checked against numpy."""

from __future__ import annotations

import numpy as np

from accelopt.nki import runtime
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/rerun_gathers.py"

LEGACY = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.compiler as ncc


@nki.jit
def gather_groups(src, index):
    out = nl.ndarray((16, 1, 16, 2), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nisa.local_gather(nl.load(src), nl.load(index), 2)
    nl.store(out, g)
    return out


@nki.jit
def placed_double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.ndarray((nl.par_dim(128), 64), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t[...] = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t * 2.0)
    return out
"""


def logged(name: str, inputs: list[np.ndarray]) -> runtime.KernelRun:
    fn = runtime.load_kernel(LEGACY, name, PATH)
    return runtime.run_kernel(fn, inputs, record_calls=True, source_path=PATH)


def returned(run: runtime.KernelRun) -> Trace:
    return Trace.from_json(run.trace.to_json())  # as it crosses the sandbox boundary


def test_a_local_gather_reruns_on_new_offsets_with_the_same_trace():
    rng = np.random.default_rng(5)
    src = rng.standard_normal((16, 10)).astype(np.float32)
    first, second = (rng.integers(0, 9, size=(16, 1)).astype(np.uint16) for _ in range(2))
    trace = returned(logged("gather_groups", [src, first]))
    assert trace.calls_failure is None
    trusted = rerun(trace, [src, second])
    assert compare_traces(trace, trusted.trace) is None
    offsets = second[:, 0]
    expected = np.stack([src[:, o : o + 2] for o in offsets], axis=1)  # [16, 16 offsets, 2]
    np.testing.assert_array_equal(trusted.outputs[0].reshape(16, 16, 2), expected)


def test_tensors_placed_by_mod_alloc_rerun_in_their_memory():
    x = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    trace = returned(logged("placed_double", [x]))
    assert trace.calls_failure is None and trace.placements
    trusted = rerun(trace, [x + 1])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], (x + 1) * 2)
