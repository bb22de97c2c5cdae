"""How long the simulator takes to profile the whole NKIBench suite on this machine.

    .venv/bin/python benchmarks/bench_throughput.py                 # full shapes, trace-only
    .venv/bin/python benchmarks/bench_throughput.py --size small --check --jobs 2

Runs the same code path as `accelopt bench` (the simulator backend's sandboxed workers, --jobs
at a time) and prints, per task, the wall time of its evaluation and its trace length, then the
suite's total wall time and the simulated figures' geometric mean of percent of peak.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from accelopt.commands.bench import make_backend, run_bench, select_tasks
from accelopt.profiling.backend import EvaluationOptions


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=("full", "small"), default="full")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tasks", help="comma-separated subset")
    parser.add_argument("--check", action="store_true", help="include the 5-seed correctness check")
    parser.add_argument("--hardware", choices=("trn1", "trn2"), default="trn1")
    args = parser.parse_args()

    selection = select_tasks(args.tasks, args.size, None)
    options = EvaluationOptions(
        hardware=args.hardware,
        check_correctness=args.check,
        timeout_s=3600.0 if args.size == "full" else 600.0,
    )
    started = time.perf_counter()
    report = asyncio.run(
        run_bench(selection, make_backend("simulator", args.jobs), options, jobs=args.jobs, size=args.size)
    )
    total = time.perf_counter() - started

    print(
        f"NKIBench {args.size} shapes, {'trace + 5-seed check' if args.check else 'trace-only'}, "
        f"{args.jobs} job(s), {os.cpu_count()} CPU(s)"
    )
    print(f"{'task':<24}{'status':<10}{'wall s':>9}{'instructions':>14}{'% of peak':>11}")
    for r in report.tasks:
        instructions = r.profile.instruction_count if r.profile else 0
        percent = f"{100 * r.percent_of_peak:.1f}%" if r.percent_of_peak is not None else "-"
        print(f"{r.name:<24}{r.status:<10}{r.wall_time_s:>9.2f}{instructions:>14,}{percent:>11}")
    geomean = report.geomean_percent_of_peak
    print(
        f"suite wall time {total:.1f} s; sum of per-task wall times {sum(r.wall_time_s for r in report.tasks):.1f} s"
    )
    print(
        f"geometric mean percent of peak (simulated): {'-' if geomean is None else f'{100 * geomean:.1f}%'}"
    )
    return 0 if all(r.status == "ok" for r in report.tasks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
