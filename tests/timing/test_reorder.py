"""The compiler's scheduler reorders independent instructions ([NKI-SCHED] in hardware/specs.py),
so an instruction whose inputs are ready runs in an idle stretch its engine left while waiting on
another engine (timeline._Slots), not after everything written before it."""

from __future__ import annotations

import itertools

import pytest

from accelopt.hardware.specs import TRN1
from accelopt.nki.trace import Engine
from accelopt.profiling.timeline import ModelOptions, Timeline, schedule

from .tracebuild import TraceBuilder, full

FREE = 2048


def _wait_then_independent() -> TraceBuilder:
    """Scalar: a long activation; Vector: a copy of its result (must wait for it), then a copy
    of an unrelated resident tile (could run while the Vector Engine waits)."""
    b = TraceBuilder("reorder")
    tile = full((128, FREE))
    src = b.tensor("src", (128, FREE))
    other = b.tensor("other", (128, FREE))
    a = b.tensor("a", (128, FREE))
    c = b.tensor("c", (128, FREE))
    d = b.tensor("d", (128, FREE))
    b.compute(Engine.VECTOR, "memset", [], [(src, tile)], free_size=FREE, line=2)
    b.compute(Engine.GPSIMD, "memset", [], [(other, tile)], free_size=FREE, line=3)
    b.compute(Engine.SCALAR, "activation", [(src, tile)], [(a, tile)], free_size=4 * FREE, line=4)
    b.compute(Engine.VECTOR, "tensor_copy", [(a, tile)], [(c, tile)], free_size=FREE, line=5)
    b.compute(Engine.VECTOR, "tensor_copy", [(other, tile)], [(d, tile)], free_size=FREE, line=6)
    return b


def _start(timeline: Timeline, line: int) -> float:
    return next(op.start for op in timeline.ops if op.line == line)


def test_a_ready_instruction_runs_while_its_engine_waits_for_another() -> None:
    trace = _wait_then_independent().trace
    in_order = schedule(trace, TRN1, ModelOptions(reorder_compute=False))
    reordered = schedule(trace, TRN1, ModelOptions(reorder_compute=True))
    # in program order the independent copy queues behind the one waiting for the activation
    assert _start(in_order, 6) >= _start(in_order, 5)
    # reordered, it runs in the Vector Engine's idle stretch, before the dependent copy
    assert _start(reordered, 6) < _start(reordered, 5)
    assert reordered.total_time < in_order.total_time
    # the dependent copy still waits for its producer, and nothing else moves
    assert _start(reordered, 5) == pytest.approx(_start(in_order, 5))


def test_reordering_never_overlaps_two_instructions_of_one_engine() -> None:
    timeline = schedule(_wait_then_independent().trace, TRN1, ModelOptions(reorder_compute=True))
    for engine in ("vector", "scalar", "gpsimd"):
        spans = sorted((op.start, op.end) for op in timeline.ops if op.engine == engine)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-15
