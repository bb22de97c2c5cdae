"""Trainium2 lifts Trainium1's SBUF port conflict between the Vector and GpSimd Engines, but the
Vector Engine's performance mode "leverages a shared memory bus between the VectorE and GpsimdE
engines" and the hardware arbitrates between them ([TRN2-ARCH] "Data Movement Updates" in
hardware/specs.py): a bf16 copy in performance mode and GpSimd's SBUF work take turns, while an
fp32 copy (no performance mode) overlaps it."""

from __future__ import annotations

import pytest

from accelopt.hardware.specs import TRN2
from accelopt.nki.trace import Engine
from accelopt.profiling.timeline import ModelOptions, schedule

from .tracebuild import TraceBuilder, full

FREE = 4096


def _overlap(dtype: str, reorder: bool) -> float:
    """Seconds a Vector tensor_copy of `dtype` and an independent GpSimd iota run at once."""
    b = TraceBuilder("bus")
    tile = full((128, FREE))
    src = b.tensor("src", (128, FREE), dtype=dtype)
    dst = b.tensor("dst", (128, FREE), dtype=dtype)
    idx = b.tensor("idx", (128, FREE), dtype="float32")
    b.compute(Engine.GPSIMD, "iota", [], [(idx, tile)], free_size=FREE, line=2)
    b.compute(Engine.VECTOR, "tensor_copy", [(src, tile)], [(dst, tile)], free_size=FREE, line=3, dtype=dtype)
    timeline = schedule(b.trace, TRN2, ModelOptions(reorder_compute=reorder))
    gpsimd = next(op for op in timeline.ops if op.engine == "gpsimd")
    vector = next(op for op in timeline.ops if op.engine == "vector")
    return max(0.0, min(gpsimd.end, vector.end) - max(gpsimd.start, vector.start))


@pytest.mark.parametrize("reorder", [True, False])
def test_performance_mode_copy_waits_for_gpsimd_sbuf_work(reorder: bool) -> None:
    assert _overlap("bfloat16", reorder) == 0.0  # the old model ran them side by side


@pytest.mark.parametrize("reorder", [True, False])
def test_a_copy_outside_performance_mode_overlaps_gpsimd(reorder: bool) -> None:
    assert _overlap("float32", reorder) > 0.0
