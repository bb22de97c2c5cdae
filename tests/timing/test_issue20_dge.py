"""Pins of the trn2 descriptor generators ([DGE] in hardware/specs.py): two hardware DGE
instances per NeuronCore-v3, each DMA instruction ≈600 ns on one of them, when descriptors are
generated on the device (`ModelOptions(hardware_dge=True)`; off by default, as the product's
hardware backend compiles with `--disable-dge`)."""

from __future__ import annotations

import dataclasses

import pytest

from accelopt.hardware.specs import TRN1, TRN2
from accelopt.nki.trace import Memory
from accelopt.profiling.timeline import ModelOptions, schedule

from .tracebuild import TraceBuilder, full

DGE = ModelOptions(hardware_dge=True)


def _small_loads(count: int) -> TraceBuilder:
    """`count` independent loads of [128, 8] fp32 (32 B per partition) into their own tiles."""
    b = TraceBuilder()
    x = b.tensor("x", (128, 8 * count), Memory.HBM, is_input=True)
    for i in range(count):
        t = b.tensor(f"t{i}", (128, 8))
        b.load(t, full((128, 8)), x, ((0, 128), (8 * i, 8 * (i + 1))))
    return b


def test_trn2_starts_at_most_two_dma_instructions_per_descriptor_time() -> None:
    """A burst of tiny transfers is issued at the descriptor generators' pace: never more than
    two starting within 600 ns, so 32 of them take at least 16 generation times."""
    timeline = schedule(_small_loads(32).trace, TRN2, DGE)
    starts = sorted(op.start for op in timeline.ops if op.kind == "dma_load")
    assert len(starts) == 32
    window = TRN2.dma_fixed_latency_s
    for i in range(len(starts) - 2):
        assert starts[i + 2] - starts[i] >= window * (1 - 1e-9)
    assert starts[-1] - starts[0] >= 15 * window * (1 - 1e-9)


def test_descriptor_generators_cost_nothing_to_a_lone_transfer_and_trn1_has_none() -> None:
    """An isolated transfer times as before (the generator is free when it arrives); without
    generators (`--disable-dge`, the default; Trainium1; or trn2 with them taken away) the burst
    is bound by the engines only and runs faster than the generators allow."""
    lone = _small_loads(1).trace
    without = dataclasses.replace(TRN2, dge_instances=0)
    assert schedule(lone, TRN2, DGE).total_time == pytest.approx(schedule(lone, without, DGE).total_time)
    assert TRN1.dge_instances == 0 and TRN2.dge_instances == 2
    burst = _small_loads(32).trace
    capped = schedule(burst, TRN2, DGE).total_time - TRN2.kernel_start_s
    free = schedule(burst, without, DGE).total_time - TRN2.kernel_start_s
    assert capped > 1.5 * free
    assert capped >= 16 * TRN2.dma_fixed_latency_s
    assert schedule(burst, TRN2).total_time == pytest.approx(schedule(burst, without, DGE).total_time)
    assert schedule(burst, TRN1, DGE).total_time == pytest.approx(schedule(burst, TRN1).total_time)
