"""Evaluations per second: local worker processes against Ray tasks on a private local cluster,
with 1 and 2 evaluations in flight, on the same set of distinct kernels (the NKIBench baselines
at their small size, or the examples). Prints one line per setting.

    python benchmarks/ray_throughput.py                 # the examples, 2 seeds each
    python benchmarks/ray_throughput.py --repeat 3 --size full
    python benchmarks/ray_throughput.py --ray HOST:PORT # a running cluster instead of a local one
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a local cluster stays on loopback

from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.ray_backend import backend_for
from accelopt.profiling.task import Task, task_for_kernel

REPO = Path(__file__).resolve().parents[1]


def examples(size: str) -> list[tuple[KernelSource, Task]]:
    found = []
    for path in sorted((REPO / "kernels_examples").glob("*.py")):
        text = path.read_text()
        if "@nki.jit" not in text or path.stem.endswith("_ref"):
            continue
        name = next(line.split("def ", 1)[1].split("(")[0] for line in text.splitlines() if line.startswith("def "))
        kernel = KernelSource(text=text, name=name, path=str(path))
        try:
            found.append((kernel, task_for_kernel(kernel, size=size)))
        except Exception as exc:  # an example without a task is skipped, and said
            print(f"skipped {path.name}: {exc}")
    return found


async def throughput(backend: Backend, work: list[tuple[KernelSource, Task]], options: EvaluationOptions) -> float:
    # One warm-up evaluation per task first: reference outputs are computed once per worker.
    await asyncio.gather(*(backend.evaluate(k, t, options) for k, t in work))
    started = time.perf_counter()
    results = await asyncio.gather(*(backend.evaluate(k, t, options) for k, t in work))
    elapsed = time.perf_counter() - started
    failed = [r for r in results if r.status != "ok"]
    if failed:
        print(f"  ({len(failed)} evaluations not ok: {failed[0].status}: {failed[0].message[:100]})")
    return len(results) / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="each kernel evaluated this many times per round")
    parser.add_argument("--ray", default="local", help="'local' or a cluster address")
    args = parser.parse_args()
    work = examples(args.size) * args.repeat
    options = EvaluationOptions(seeds=args.seeds)
    print(f"{len(work)} evaluations a round ({args.size} size, {args.seeds} seeds), {os.cpu_count()} CPUs")
    opened: list[Backend] = []
    try:
        for ray in (None, args.ray):
            for workers in (1, 2):
                # Ray backends share one cluster (the first one starts it); all close at the end.
                backend = backend_for("simulator", max_workers=workers, ray=ray)
                opened.append(backend)
                rate = await throughput(backend, work, options)
                where = "local processes" if ray is None else f"Ray ({ray})"
                print(f"{where:22s} {workers} in flight: {rate:6.2f} evaluations/s")
    finally:
        for backend in reversed(opened):
            await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
