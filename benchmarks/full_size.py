"""Checked profiles at the full NKIBench shapes: peak memory and seconds per seed.

    .venv/bin/python benchmarks/full_size.py                       # the four shapes, 2 seeds each
    .venv/bin/python benchmarks/full_size.py matmul --seeds 1      # one task
    .venv/bin/python benchmarks/full_size.py --no-check            # trace-only, for comparison
    .venv/bin/python benchmarks/full_size.py --published           # task files in the published form

The shapes (issue 19) are the suite's full sizes (`nkibench/index.json`): fp32 matmul
4096x5120 @ 5120x12288, LoRA 4096x12288x5120 rank 128, grouped-query attention over 4096
tokens (16 query heads, 8 KV heads, head size 128) and batched matmul + softmax 16x4096x4096.
Each task runs as `accelopt profile` runs it (the simulator backend, a correctness check on
secret seeds in sandboxed workers), in a fresh child process so its peak figures are its own.

With `--published` the reference modules are the ones in `benchmarks/full_size_tasks/`,
written in the published NKIBench task form (shapes fixed in the module, `get_inputs()` with no
argument, `transform_nki_outputs` returning the kernel outputs only), against the same kernels.

Per task it prints the status, the wall time and wall time per seed, the peak resident memory
of the trusted process (it compares outputs chunk by chunk and maps a big task's cached
reference data from files) and of the largest sandboxed worker (`ru_maxrss` of the children),
the memory the machine had available before the run, the workers' CPU seconds per seed and the
CPU seconds of the trusted process (the verification re-run, the comparisons). Figures are measured here, on this
machine, by the product; nothing is assumed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

TASKS = ("matmul", "lora", "gqa_full", "bmm_softmax")


PUBLISHED_TASKS = Path(__file__).resolve().parent / "full_size_tasks"


def measure(name: str, seeds: int, check: bool, timeout_s: float, published: bool) -> dict:
    """One task in this process (run in a child by `main`)."""
    from accelopt.profiling.backend import EvaluationOptions
    from accelopt.profiling.nkibench import bench_task, find_task
    from accelopt.profiling.simulator import SimulatorBackend
    from accelopt.profiling.task import task_for_kernel
    from accelopt.profiling.worker_memory import available_bytes

    kernel, task = bench_task(name, "full")
    if published:
        task = task_for_kernel(kernel, str(PUBLISHED_TASKS / f"{name}_ref.py")).model_copy(
            update={"tolerance": task.tolerance}
        )
    available = available_bytes()
    options = EvaluationOptions(seeds=seeds, timeout_s=timeout_s, check_correctness=check)
    started = time.perf_counter()
    run = SimulatorBackend(max_workers=1).evaluate_sync(kernel, task, options)
    wall = time.perf_counter() - started
    evaluation = run.evaluation
    return {
        "task": name,
        "shape": find_task(name).shapes["full"],
        "status": evaluation.status,
        "message": evaluation.message[:300],
        "seeds": len(evaluation.seeds) or seeds,
        "wall_s": wall,
        "max_error": evaluation.max_error,
        "latency_ms": evaluation.profile.latency_ms if evaluation.profile else None,
        "parent_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "worker_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        # CPU seconds of this process (the trusted re-run, comparisons) and of its workers:
        # on a shared machine the wall time says as much about the neighbours as about us
        "parent_cpu_s": _cpu(resource.RUSAGE_SELF),
        "worker_cpu_s": _cpu(resource.RUSAGE_CHILDREN),
        "available_before": available,
    }


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1 << 30):.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(TASKS), help=f"default: {' '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=1800.0, help="per worker run, seconds")
    parser.add_argument("--published", action="store_true", help="reference modules in the published form")
    parser.add_argument("--one", metavar="TASK", help=argparse.SUPPRESS)  # the child's entry point
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.seeds, args.check, args.timeout, args.published)))
        return 0
    header = f"{'task':12} {'status':14} {'seeds':>5} {'wall s':>8} {'s/seed':>8} {'parent peak':>12} "
    header += f"{'worker peak':>12} {'available':>10} {'worker cpu/seed':>15} {'parent cpu':>10}  max error"
    print(header)
    for name in args.tasks:
        command = [sys.executable, __file__, "--one", name, "--seeds", str(args.seeds)]
        command += ["--timeout", str(args.timeout), "--check" if args.check else "--no-check"]
        command += ["--published"] if args.published else []
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            print(f"{name:12} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        error = "-" if row["max_error"] is None else f"{row['max_error']:.2e}"
        print(
            f"{name:12} {row['status']:14} {row['seeds']:>5} {row['wall_s']:>8.1f} "
            f"{row['wall_s'] / max(row['seeds'], 1):>8.1f} {_gib(row['parent_peak_rss']):>12} "
            f"{_gib(row['worker_peak_rss']):>12} {_gib(row['available_before']):>10} "
            f"{row['worker_cpu_s'] / max(row['seeds'], 1):>15.1f} {row['parent_cpu_s']:>10.1f}  {error}"
        )
        if row["status"] != "ok":
            print(f"  {row['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
