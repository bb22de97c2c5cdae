"""Engines for elementwise work the kernel left to the compiler, against the NKI API Common Fields
page ([NKI-OPS] in hardware/specs.py): which engine implements which operator, the Scalar
Engine's activation functions, and the throughput of the operators supported on two engines
(reciprocal 8x slower on Vector than on Scalar, rsqrt 4x slower on GpSimd than on Scalar)."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.hardware.specs import TRN1, TRN2, HardwareSpec
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.nki.trace import Engine, Memory
from accelopt.profiling.lowering import lower_compute
from accelopt.profiling.metrics import profile_trace

from .tracebuild import TraceBuilder, full

N = 2048


def _options(hw: HardwareSpec, **extra: object) -> dict[str, float]:
    """Engine -> cycles (without the per-access overhead) of one [128, N] fp32 tensor_scalar the
    kernel left to the compiler, legal (as the emulator says) on every ALU engine."""
    b = TraceBuilder()
    tile = full((128, N))
    data = b.tensor("data", (128, N), Memory.SBUF)
    out = b.tensor("out", (128, N), Memory.SBUF)
    extra.setdefault("engines", ["vector", "scalar", "gpsimd"])
    b.compute(Engine.UNASSIGNED, "tensor_scalar", [(data, tile)], [(out, tile)], free_size=N, **extra)
    memory_of = {tid: info.memory for tid, info in b.trace.tensors.items()}
    options = lower_compute(b.trace.records[-1], memory_of, hw, True).options
    return {e: s * hw.engine_clock_hz(e) - hw.access_init_cycles for e, s in options}


@pytest.mark.parametrize("hw", [TRN1, TRN2], ids=["trn1", "trn2"])
def test_reciprocal_runs_on_scalar_at_n_and_on_vector_at_8n(hw: HardwareSpec) -> None:
    # "Reciprocal can run on Vector Engine ... or on Scalar Engine with
    # nki.isa.activation(nl.reciprocal)": max(MIN_II, N) on Scalar, max(MIN_II, 8*N) on Vector
    # (the old model kept nl.reciprocal on the Vector Engine at N)
    options = _options(hw, op="reciprocal")
    assert set(options) == {"vector", "scalar"}
    assert options["scalar"] == pytest.approx(N)
    assert options["vector"] == pytest.approx(8 * N)


@pytest.mark.parametrize("op", ["square", "abs", "relu", "sign"])
def test_activation_table_functions_may_run_on_the_scalar_engine(op: str) -> None:
    # "Supported Activation Functions for NKI ISA": every one of these is an activation on the
    # Scalar Engine, at one pass (the old model allowed only the Vector Engine)
    options = _options(TRN1, op=op)
    assert "scalar" in options
    assert options["scalar"] == pytest.approx(N)


def test_rsqrt_on_gpsimd_is_four_times_slower_than_on_scalar() -> None:
    # "the computation throughput of reverse square root on GpSIMD Engine is 4x lower than Scalar
    # Engine" (the old model charged GpSimd twice the Vector Engine's one pass)
    options = _options(TRN1, op="rsqrt")
    assert set(options) == {"gpsimd", "scalar"}
    assert options["gpsimd"] == pytest.approx(4 * options["scalar"])


def test_operators_only_the_vector_engine_implements_stay_there() -> None:
    # max/min/subtract run on the Vector Engine only ("Supported Engine" column)
    for op in ("maximum", "subtract"):
        assert set(_options(TRN2, op=op)) == {"vector"}


KERNEL = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def inverse(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.reciprocal(t))
    return out
"""


def test_nl_reciprocal_lands_on_the_scalar_engine_when_it_is_free() -> None:
    fn = load_kernel(KERNEL, "inverse", "inverse.py")
    run = run_kernel(fn, [np.zeros((1024, N), np.float32)], numerics=False, kernel_name="inverse")
    _, timeline = profile_trace(run.trace, "trn1", source_text=KERNEL)
    engines = {op.engine for op in timeline.ops if op.kind == "tensor_scalar"}
    assert engines == {"scalar"}


@pytest.mark.parametrize(
    ("op", "op1", "tiles", "on_scalar"),
    [
        ("multiply", None, [False, False], True),  # the activation's constant scale
        ("multiply", None, [True, False], True),  # its [P, 1] scale
        ("add", None, [True, False], True),  # its [P, 1] bias
        ("add", None, [False, False], False),  # a constant bias: not on NeuronCore-v2
        ("multiply", "add", [False, True], True),
        ("multiply", "add", [True, False], False),
    ],
)
def test_neuroncore_v2_scalar_engine_takes_multiply_add_only_as_activation_scale_and_bias(
    op: str, op1: str | None, tiles: list[bool], on_scalar: bool
) -> None:
    # [NKI-OPS]: "Add and Multiply are supported on Scalar Engine only from NeuronCore-v3";
    # [TRN-ARCH]: the activation's scale is a tile or a constant, "the bias can only be a tile";
    # [PERF-GUIDE] Opt #5a: IDENTITY activations with scale/bias on NeuronCore-v2 are
    # tensor_scalar(multiply, add). NeuronCore-v3 takes every one of these (the old model took
    # every one on NeuronCore-v2 too).
    assert ("scalar" in _options(TRN1, op=op, op1=op1, tile_operands=tiles)) is on_scalar
    assert "scalar" in _options(TRN2, op=op, op1=op1, tile_operands=tiles)
