"""The optional list-scheduling window (ModelOptions.schedule_window, timeline._place_all):
held-back instructions are placed by when their inputs are ready, so two independent chains
that alternate between the Scalar and the Vector Engine interleave instead of running one after
the other; every instruction still follows all it depends on. Off by default (program order)."""

from __future__ import annotations

import itertools

from accelopt.hardware.specs import TRN1
from accelopt.nki.trace import Engine
from accelopt.profiling.timeline import ModelOptions, Timeline, schedule

from .tracebuild import TraceBuilder, full

FREE = 1024
STEPS = 8


def _two_chains() -> TraceBuilder:
    """Two independent chains (as two iterations of an affine_range body), each alternating a
    short Scalar activation and a long Vector tensor_tensor that reads the previous result."""
    b = TraceBuilder("chains")
    tile = full((128, FREE))
    for chain in range(2):
        previous = b.tensor(f"src{chain}", (128, FREE))
        other = b.tensor(f"other{chain}", (128, FREE))
        b.compute(Engine.SCALAR, "activation", [], [(previous, tile)], free_size=FREE, line=2)
        b.compute(Engine.SCALAR, "activation", [], [(other, tile)], free_size=FREE, line=3)
        for step in range(STEPS):
            scaled = b.tensor(f"s{chain}_{step}", (128, FREE))
            out = b.tensor(f"v{chain}_{step}", (128, FREE))
            b.compute(
                Engine.SCALAR,
                "activation",
                [(previous, tile)],
                [(scaled, tile)],
                free_size=FREE // 2,
                line=10,
            )
            b.compute(
                Engine.VECTOR,
                "tensor_tensor",
                [(scaled, tile), (other, tile)],
                [(out, tile)],
                free_size=FREE,
                line=11,
            )
            previous = out
    return b


def _timeline(window: int) -> Timeline:
    return schedule(_two_chains().trace, TRN1, ModelOptions(schedule_window=window))


def test_the_window_interleaves_independent_chains() -> None:
    in_order, windowed = _timeline(0), _timeline(8)
    assert windowed.total_time < 0.95 * in_order.total_time
    # the Vector Engine is busier: the second chain fills the waits of the first
    busy = windowed.engine_busy["vector"] / windowed.total_time
    assert busy > in_order.engine_busy["vector"] / in_order.total_time


def test_windowed_placement_keeps_every_dependency_and_program_order_listing() -> None:
    trace = _two_chains().trace
    timeline = schedule(trace, TRN1, ModelOptions(schedule_window=8))
    assert [op.record for op in timeline.ops] == list(range(len(trace.records)))
    written: dict[int, float] = {}
    for op in timeline.ops:
        rec = trace.records[op.record]
        for region in rec.reads:
            assert op.start >= written.get(region.tensor_id, 0.0)
        for region in rec.writes:
            written[region.tensor_id] = op.end
    for engine in ("vector", "scalar"):
        spans = sorted((op.start, op.end) for op in timeline.ops if op.engine == engine)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-15


def test_the_default_holds_a_window_of_instructions() -> None:
    assert ModelOptions().schedule_window == 8
