"""What the OS isolation costs per evaluation: a worker's start-to-finish time with and without
bubblewrap (namespaces, read-only mounts, seccomp), on a job that does nothing (probe mode), a
reference-module job and a small kernel job, and what the parent then spends reading a trace.

Run by hand (not a test):  .venv/bin/python benchmarks/sandbox_overhead.py [--runs 20]
It prints one line per configuration: median and 90th-percentile wall time per worker, and the
difference the OS layer makes. Numbers are this machine's (2 shared cores here); they say how
much of an evaluation the sandbox start is, not how fast the simulator is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from accelopt.nki.trace import Trace
from accelopt.profiling.isolation import detect
from accelopt.profiling.sandbox import Sandbox
from accelopt.profiling.worker_protocol import WorkerJob
from profiling.helpers import reference_job
from profiling.kernels import HAND_WRITTEN, PATH


def probe_job() -> tuple[WorkerJob, dict[str, np.ndarray]]:
    return WorkerJob(mode="probe", policy="kernel", source="", source_path="<probe>"), {}


def kernel_job() -> tuple[WorkerJob, dict[str, np.ndarray]]:
    x = np.ones((128, 256), np.float32)
    job = WorkerJob(
        mode="kernel",
        policy="kernel",
        source=HAND_WRITTEN,
        source_path=PATH,
        kernel_name="double_kernel",
        inputs=[[Sandbox.input_ref("s0_0", x)]],
    )
    return job, {"s0_0": x}


JOBS = {
    "probe (no untrusted code)": probe_job,
    "reference module": lambda: (reference_job(), {}),
    "kernel (128x256 double)": kernel_job,
}


def timed_runs(sandbox: Sandbox, make, runs: int) -> tuple[list[float], Trace | None]:
    times: list[float] = []
    trace = None
    for _ in range(runs):
        job, inputs = make()
        started = time.perf_counter()
        outcome = sandbox.run_sync(sandbox.prepare(job, inputs), 60)
        times.append(time.perf_counter() - started)
        assert outcome.kind == "finished", outcome.message
        assert outcome.result is not None and outcome.result.failure is None, outcome.result
        if outcome.trace_json is not None:
            trace = Trace.from_json(outcome.trace_json)
    return times, trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    isolation = detect()
    print(isolation.describe())
    configurations = {"before (process limits only)": Sandbox(os_isolation=False)}
    if isolation.kernel_enforced:
        configurations["bubblewrap + seccomp"] = Sandbox()
    for name, make in JOBS.items():
        times: dict[str, list[float]] = {label: [] for label in configurations}
        for sandbox in configurations.values():
            timed_runs(sandbox, make, 2)  # warm the page cache
        for _ in range(args.runs):  # interleaved, so that the machine's load drifts evenly
            for label, sandbox in configurations.items():
                times[label] += timed_runs(sandbox, make, 1)[0]
        medians = {}
        for label, samples in times.items():
            medians[label] = statistics.median(samples)
            p90 = statistics.quantiles(samples, n=10)[-1]
            print(f"{name:28s} {label:30s} median {medians[label] * 1e3:7.1f} ms   p90 {p90 * 1e3:7.1f} ms")
        if len(medians) == 2:
            before, after = medians.values()
            print(f"{name:28s} {'OS isolation adds':30s} {(after - before) * 1e3:+7.1f} ms per worker")


if __name__ == "__main__":
    main()
