"""The timeline view's schedule, from a real simulated run of the SiLU example: every bar lies in
its lane's busy time, and a tight bar limit coalesces bars of one line without losing the
span they cover."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.schedule_view import schedule_of
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

SILU = Path(__file__).resolve().parents[2] / "kernels_examples" / "silu.py"


def simulated_run():
    kernel = KernelSource(text=SILU.read_text(), name="silu_kernel", path=str(SILU))
    task = task_for_kernel(kernel, size="small")
    backend = SimulatorBackend(max_workers=1)

    async def run():
        try:
            return await backend.evaluate_detailed(kernel, task, EvaluationOptions(check_correctness=False, seeds=1))
        finally:
            await backend.aclose()

    return asyncio.run(run())


def test_bars_cover_the_busy_time_and_coalescing_keeps_the_span():
    run = simulated_run()
    assert run.timeline is not None and run.evaluation.profile is not None
    full = schedule_of(run.timeline, run.evaluation.profile, "silu_kernel")
    assert not full.coalesced and full.roofline is not None
    for index, lane in enumerate(full.lanes[:4]):
        drawn = sum(end - start for lane_of, start, end, _, _ in full.bars if lane_of == index)
        assert drawn <= lane.busy_us * 1.001 + 1e-6  # bars never claim more than the engine's busy time
    few = schedule_of(run.timeline, run.evaluation.profile, "silu_kernel", max_bars=12)
    assert few.coalesced and len(few.bars) <= 12
    for lane in {b[0] for b in few.bars}:
        mine = [b for b in full.bars if b[0] == lane]
        kept = [b for b in few.bars if b[0] == lane]
        assert min(b[1] for b in kept) == min(b[1] for b in mine)
        assert max(b[2] for b in kept) <= max(b[2] for b in mine) + 1e-6
