"""What a numeric (checked) kernel run costs inside the sandboxed worker, with and without the
Python guard: the CPU seconds the worker spends running the kernel on its seeds.

    .venv/bin/python benchmarks/worker_numeric.py                      # matmul 1024x2048x2048, 2 seeds
    .venv/bin/python benchmarks/worker_numeric.py --m 2048 --n 4096 --k 2048 --seeds 1 --rounds 3
    .venv/bin/python benchmarks/worker_numeric.py --profile            # cProfile of one run, in-process
    .venv/bin/python benchmarks/worker_numeric.py --hook               # the audit hook's cost per event

The kernel is the NKIBench matmul baseline (compiler-generated style: tiles declared with block
dimensions, one block per step), the case where the worker's NaN fill of declared tiles and the
guard's audit hook showed up (notes i19-full: 21 % and 12 % of a full-size seed). Each round
runs one worker with the guard installed and one without (`python_guard`, a test switch of the
worker job), interleaved, and prints the worker's own CPU seconds for its kernel runs (input
loading included; start-up excluded): figures from this machine, comparable when it is shared.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
from pathlib import Path

import numpy as np

from accelopt.profiling.sandbox import Sandbox
from accelopt.profiling.worker_protocol import ResourceLimits, WorkerJob

KERNEL = Path(__file__).resolve().parents[1] / "nkibench" / "matmul" / "kernel.py"


def inputs(m: int, n: int, k: int, seeds: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        [rng.standard_normal((k, m), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)]
        for _ in range(seeds)
    ]


def worker_cpu(sandbox: Sandbox, sets: list[list[np.ndarray]], guard: bool) -> float:
    named = {f"s{i}_{j}": a for i, run in enumerate(sets) for j, a in enumerate(run)}
    job = WorkerJob(
        mode="kernel",
        policy="kernel",
        source=KERNEL.read_text(),
        source_path=str(KERNEL),
        kernel_name="matmul_kernel",
        numerics=True,
        record_calls=True,  # as a checked evaluation's worker does
        python_guard=guard,
        inputs=[[Sandbox.input_ref(f"s{i}_{j}", a) for j, a in enumerate(run)] for i, run in enumerate(sets)],
    )
    outcome = sandbox.run_sync(sandbox.prepare(job, named, timeout_s=3000), 3000)
    if outcome.result is None or outcome.result.failure is not None:
        raise SystemExit(f"the worker failed: {outcome.message or outcome.result}")
    return outcome.result.cpu_seconds


def profile_in_process(sets: list[list[np.ndarray]]) -> None:
    import cProfile
    import pstats

    from accelopt.nki import runtime

    runtime.install_aliases()
    fn = runtime.load_kernel(KERNEL.read_text(), "matmul_kernel", str(KERNEL), {})
    profiler = cProfile.Profile()
    profiler.enable()
    for run in sets:
        runtime.run_kernel(fn, run, numerics=True, kernel_name="matmul_kernel", record_calls=True)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


_HOOK_CHILD = """
import os, sys, time
from accelopt.profiling import guard
roots = [os.path.dirname(os.path.dirname(guard.__file__)), os.path.dirname(os.__file__), os.path.dirname(__file__)]
events = ("sys._getframe", "builtins.id", "object.__getattr__")
def loop(n):
    frame = None
    for _ in range(n):
        frame = sys._getframe(0)  # what the emulator does per instruction (a trusted caller)
        id(frame)
        frame.f_code
def timed(n):
    start = time.process_time()
    loop(n)
    return time.process_time() - start
n = 200000
bare = min(timed(n) for _ in range(3))
guard.install(policy="kernel", user_files=[], trusted_roots=roots, read_roots=roots)
hooked = min(timed(n) for _ in range(3))
print(f"{(hooked - bare) / (3 * n) * 1e9:.0f}")
"""


def hook_cost() -> None:
    """ns the guard's audit hook adds per event raised by trusted code (sys._getframe, id(),
    frame.f_code: the three the emulator raises per instruction), in a child process."""
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as child:
        child.write(_HOOK_CHILD)
    figures = [
        int(subprocess.run([sys.executable, child.name], capture_output=True, text=True, check=True).stdout)
        for _ in range(3)
    ]
    os.unlink(child.name)
    print(f"audit hook: {statistics.median(figures)} ns per event raised by trusted code (runs: {figures})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one in-process run instead")
    parser.add_argument("--hook", action="store_true", help="the audit hook's cost per event instead")
    args = parser.parse_args()
    if args.hook:
        hook_cost()
        return 0
    sets = inputs(args.m, args.n, args.k, args.seeds)
    if args.profile:
        profile_in_process(sets)
        return 0
    tiles = 4 * (args.m * args.n * args.k // 128 // 512 // 128) * (128 * 128 + 128 * 512) // (1 << 20)
    print(f"matmul M={args.m} N={args.n} K={args.k}, {args.seeds} seed(s) per worker, declared tiles ~{tiles} MiB")
    sandbox = Sandbox(ResourceLimits(memory_bytes=16 << 30, cpu_seconds=3000))
    guarded: list[float] = []
    bare: list[float] = []
    for _ in range(args.rounds):
        guarded.append(worker_cpu(sandbox, sets, True))
        bare.append(worker_cpu(sandbox, sets, False))
    for label, values in (("with the guard", guarded), ("without it", bare)):
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"{label:15} CPU s per worker: median {statistics.median(values):.2f}  ({shown})")
    print(f"guard share of the guarded run: {1 - statistics.median(bare) / statistics.median(guarded):.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
