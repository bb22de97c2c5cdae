"""Vector Engine instruction costs against the NKI ISA reference's "Estimated instruction cost"
notes (hardware/specs.py: [ISA-TT], [ISA-STT], [ISA-COPYPRED], [ISA-TR])."""

from __future__ import annotations

import dataclasses

import pytest

from accelopt.hardware.specs import TRN1
from accelopt.nki.trace import Engine, Memory
from accelopt.profiling.lowering import lower_compute

from .tracebuild import TraceBuilder, full

N = 2048


def _vector_cycles(opcode: str, dtype: str, inputs: int, psum_input: bool = False, **extra: object) -> float:
    """Vector cycles of one [128, N] instruction on trn1, without the per-access overhead."""
    b = TraceBuilder()
    tile = full((128, N))
    reads = []
    for i in range(inputs):
        memory = Memory.PSUM if psum_input and i == 0 else Memory.SBUF
        reads.append((b.tensor(f"in{i}", (128, N), memory, dtype=dtype), tile))
    out = b.tensor("out", (128, N), dtype=dtype)
    b.compute(Engine.VECTOR, opcode, reads, [(out, tile)], free_size=N, dtype=dtype, **extra)
    memory_of = {tid: info.memory for tid, info in b.trace.tensors.items()}
    seconds = dict(lower_compute(b.trace.records[-1], memory_of, TRN1, True).options)["vector"]
    return seconds * TRN1.vector_clock_hz - TRN1.access_init_cycles * inputs


@pytest.mark.parametrize(
    ("dtype", "op", "cycles"),
    [
        ("bfloat16", "add", N),  # all bf16, add/multiply/subtract: one pass
        ("bfloat16", "multiply", N),
        ("bfloat16", "maximum", 2 * N),  # any other operator: 2N
        ("float16", "add", 2 * N),  # the one-pass case is bf16 only
        ("float32", "add", 2 * N),
    ],
)
def test_tensor_tensor_with_both_inputs_in_sbuf(dtype: str, op: str, cycles: int) -> None:
    assert _vector_cycles("tensor_tensor", dtype, 2, op=op) == pytest.approx(cycles)


def test_tensor_tensor_with_one_input_in_psum_is_one_pass() -> None:
    assert _vector_cycles("tensor_tensor", "float32", 2, psum_input=True, op="add") == pytest.approx(N)


@pytest.mark.parametrize(
    ("dtype", "op0", "op1", "cycles"),
    [
        ("float32", "multiply", "add", 2 * N),
        ("bfloat16", "multiply", "add", 2 * N),
        ("bfloat16", "subtract", "multiply", N),  # the one documented one-pass combination
    ],
)
def test_scalar_tensor_tensor_streams_two_tiles(dtype: str, op0: str, op1: str, cycles: int) -> None:
    """[ISA-STT]: 2N Vector cycles (it reads `data` and `operand1`), N only for bf16 with
    op0=subtract, op1=multiply and an even N; a tensor_scalar over the same tile costs N."""
    assert _vector_cycles("scalar_tensor_tensor", dtype, 2, op=op0, op1=op1) == pytest.approx(cycles)
    assert _vector_cycles("tensor_scalar", dtype, 1, op=op0) == pytest.approx(N)


def test_predicated_copy_reads_its_source_and_predicate() -> None:
    """[ISA-COPYPRED]: 2N with source and predicate both in SBUF, N with one of them in PSUM."""
    assert _vector_cycles("tensor_copy_predicated", "float32", 2) == pytest.approx(2 * N)
    assert _vector_cycles("tensor_copy_predicated", "float32", 2, psum_input=True) == pytest.approx(N)


@pytest.mark.parametrize(
    ("dtype", "out_dtype", "op", "cycles"),
    [
        ("bfloat16", "bfloat16", "add", N // 2),  # bf16 in and out, add or maximum: N/2
        ("bfloat16", "bfloat16", "maximum", N // 2),
        ("bfloat16", "float32", "add", N),  # an fp32 result: N
        ("float16", "float16", "add", N),  # the fast case is bf16 only
        ("bfloat16", "bfloat16", "multiply", N),
    ],
)
def test_tensor_reduce_halves_only_for_bf16_add_or_max(dtype: str, out_dtype: str, op: str, cycles: int) -> None:
    b = TraceBuilder()
    src = b.tensor("src", (128, N), dtype=dtype)
    out = b.tensor("out", (128, 1), dtype=out_dtype)
    b.compute(Engine.VECTOR, "tensor_reduce", [(src, full((128, N)))], [(out, full((128, 1)))], free_size=N, dtype=dtype, op=op)
    rec = b.trace.records[-1]
    rec = dataclasses.replace(rec, out_dtype=out_dtype)
    memory_of = {tid: info.memory for tid, info in b.trace.tensors.items()}
    seconds = dict(lower_compute(rec, memory_of, TRN1, True).options)["vector"]
    assert seconds * TRN1.vector_clock_hz - TRN1.access_init_cycles == pytest.approx(cycles)


def _small_copy_cycles(**extra: object) -> float:
    """Vector cycles of a [128, 16] fp32 SBUF copy on trn1, without the per-access overhead."""
    b = TraceBuilder()
    tile = full((128, 16))
    src = b.tensor("src", (128, 16), Memory.SBUF, dtype="float32")
    out = b.tensor("out", (128, 16), dtype="float32")
    b.compute(
        Engine.VECTOR, "tensor_copy", [(src, tile)], [(out, tile)], free_size=16, dtype="float32", **extra
    )
    memory_of = {tid: info.memory for tid, info in b.trace.tensors.items()}
    seconds = dict(lower_compute(b.trace.records[-1], memory_of, TRN1, True).options)["vector"]
    return seconds * TRN1.vector_clock_hz - TRN1.access_init_cycles


def test_a_copy_at_a_run_time_offset_waits_for_its_offset() -> None:
    """[ISA-DYNCOPY]: max(MIN_II_DYNAMIC ~600, N) cycles, where an ordinary copy pays the
    64-cycle initiation interval (plus the static overhead of a tiny instruction, in both)."""
    plain = _small_copy_cycles()
    dynamic = _small_copy_cycles(dynamic=True)
    assert dynamic - plain == pytest.approx(TRN1.dynamic_min_initiation_cycles - TRN1.min_initiation_cycles)
