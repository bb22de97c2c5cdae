"""How each NKIBench baseline's work grows from its check size to its full size, against the
task's declared growth: the margin `profiling/work_scaling.py`'s floor leaves honest kernels.

    .venv/bin/python benchmarks/work_scaling.py [--tasks silu,bmm]

Per task and part (matmul, vector FLOPs): the declared growth (`work()` at full / at small),
the baseline trace's growth (trace-only at full / verified numeric run at small) and their
ratio; the floor rejects a timing run whose ratio is below `work_scaling.FLOOR`. Then the share
of the declared work done at each size ("eff") and the full size's share against the small one's
capped at 1 ("kept"), which must be at least `work_scaling.KEPT_FLOOR`. A line also names any
kind of instruction the full-size run issues that the small run never did (`real_size`), which
would reject the baseline.
"""

from __future__ import annotations

import argparse
import asyncio

from accelopt.hardware.roofline import compute_flops
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.nkibench import bench_task, load_index
from accelopt.profiling.real_size import unverified_sites
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.work_scaling import FLOOR, KEPT_FLOOR, MIN_RATIO


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    args = parser.parse_args()
    names = [t.name for t in load_index()]
    if args.tasks:
        names = [n for n in names if n in args.tasks.split(",")]
    backend = SimulatorBackend(max_workers=2)
    print(f"floor {FLOOR:g} of the declared growth, judged when the declared growth is >= {MIN_RATIO:g}x")
    print(
        f"{'task':24} {'part':7} {'declared':>10} {'baseline':>10} {'ratio':>7} "
        f"{'eff small':>9} {'eff full':>9} {'kept':>6}"
    )
    lowest = None
    lowest_kept = None
    try:
        for name in names:
            kernel, full = bench_task(name, "full")
            small = full.model_copy(update={"size": "small", "check_size": None})
            checked = await backend._evaluate(kernel, small, EvaluationOptions(seeds=1))
            timed = await backend._evaluate(kernel, full, EvaluationOptions(check_correctness=False))
            works = [
                run.evaluation.profile.work if run.evaluation.profile else None for run in (checked, timed)
            ]
            if checked.trace is None or timed.trace is None or works[0] is None or works[1] is None:
                print(
                    f"{name:24} (no trace or no declared work: {checked.evaluation.message or timed.evaluation.message})"
                )
                continue
            done = [compute_flops(run.trace) for run in (checked, timed) if run.trace is not None]
            unverified = unverified_sites(checked.trace, timed.trace)
            if unverified:
                shown = "; ".join(site.describe() for site in unverified[:3])
                print(f"{name:24} {len(unverified)} instruction kind(s) the small run never issued: {shown}")
            for part, index, declared in (
                ("matmul", 0, (works[0].matmul_flops, works[1].matmul_flops)),
                ("vector", 2, (works[0].vector_flops, works[1].vector_flops)),
            ):
                if declared[0] <= 0 or done[0][index] <= 0:
                    continue
                expected = declared[1] / declared[0]
                grown = done[1][index] / done[0][index]
                ratio = grown / expected
                # the share of the declared work done at each size, and the full size's share
                # against the small one's capped at 1 (what `work_scaling.KEPT_FLOOR` bounds)
                eff_small, eff_full = done[0][index] / declared[0], done[1][index] / declared[1]
                kept = eff_full / min(eff_small, 1.0)
                judged = expected >= MIN_RATIO
                if judged:
                    lowest = ratio if lowest is None else min(lowest, ratio)
                    lowest_kept = kept if lowest_kept is None else min(lowest_kept, kept)
                mark = "" if judged else "  (not judged)"
                print(
                    f"{name:24} {part:7} {expected:9.4g}x {grown:9.4g}x {ratio:7.3f} "
                    f"{eff_small:9.3f} {eff_full:9.3f} {kept:6.3f}{mark}"
                )
    finally:
        await backend.aclose()
    if lowest is not None:
        print(f"lowest judged ratio {lowest:.3f} (floor {FLOOR:g})")
    if lowest_kept is not None:
        print(f"lowest judged kept share {lowest_kept:.3f} (floor {KEPT_FLOOR:g})")


if __name__ == "__main__":
    asyncio.run(main())
