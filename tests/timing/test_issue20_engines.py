"""Which engines the compiler may place work left to it on ([ISA-TS], [NKI-OPS] in hardware/specs.py):
`nisa.tensor_scalar` runs on the Scalar Engine only for (multiply, add), (multiply, -) and
(add, -) (those from NeuronCore-v3 on), and on GpSimd only for rsqrt; every other operator pair
stays on the Vector Engine.
`nisa.memset` runs on the Vector or the GpSimd Engine ([ISA-MEMSET]), N/2 cycles for a zero
value into bf16/fp16, N otherwise."""

from __future__ import annotations

import numpy as np

from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.profiling.metrics import profile_trace

KERNELS = """
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def scale_and_shift(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        y = nisa.tensor_scalar(t, np.multiply, 2.0, op1=np.add, operand1=1.0)
        nl.store(out[i * 128:(i + 1) * 128, :], value=y)
    return out


@nki.jit
def shift_and_scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        y = nisa.tensor_scalar(t, np.subtract, 1.0, op1=np.multiply, operand1=2.0)
        nl.store(out[i * 128:(i + 1) * 128, :], value=y)
    return out


@nki.jit
def fills(x):
    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nisa.memset(shape=(128, 2048), value=0.0, dtype=nl.bfloat16)
    b = nisa.memset(shape=(128, 2048), value=0.0, dtype=nl.float32)
    c = nisa.memset(shape=(128, 2048), value=1.0, dtype=nl.bfloat16)
    nl.store(out, value=nl.add(nl.add(a, b), c))
    return out
"""


def _engines(kernel: str, hardware: str = "trn2") -> set[str]:
    fn = load_kernel(KERNELS, kernel, "engines.py")
    run = run_kernel(fn, [np.zeros((1024, 2048), np.float32)], numerics=False, kernel_name=kernel)
    _, timeline = profile_trace(run.trace, hardware, source_text=KERNELS)
    return {op.engine for op in timeline.ops if op.kind == "tensor_scalar"}


def test_tensor_scalar_lands_only_on_engines_that_implement_its_operators() -> None:
    # (multiply, add) may go to the Scalar Engine of NeuronCore-v3, which is free and faster
    # here; (subtract, multiply) may not, so every one of its instructions stays on the Vector
    # Engine
    assert "scalar" in _engines("scale_and_shift")
    assert _engines("shift_and_scale") == {"vector"}


def test_tensor_scalar_multiply_add_stays_on_the_vector_engine_of_neuroncore_v2() -> None:
    # [NKI-OPS]: "Add and Multiply are supported on Scalar Engine only from NeuronCore-v3"
    assert _engines("scale_and_shift", "trn1") == {"vector"}


def test_memset_runs_on_vector_or_gpsimd_at_half_cost_for_zero_half_precision() -> None:
    fn = load_kernel(KERNELS, "fills", "engines.py")
    run = run_kernel(fn, [np.zeros((128, 2048), np.float32)], numerics=False, kernel_name="fills")
    _, timeline = profile_trace(run.trace, "trn1", source_text=KERNELS)
    fills = {}
    for op in timeline.ops:
        if op.kind == "memset":
            rec = run.trace.records[op.record]
            fills[(rec.out_dtype or rec.dtype, float(rec.extra["value"]))] = op
    assert len(fills) == 3
    assert {op.engine for op in fills.values()} <= {"vector", "gpsimd"}
    zero_bf16 = fills[("bfloat16", 0.0)]
    for other in (fills[("float32", 0.0)], fills[("bfloat16", 1.0)]):
        if other.engine == zero_bf16.engine:  # same engine, same clock: N/2 against N
            assert zero_bf16.busy < 0.6 * other.busy
