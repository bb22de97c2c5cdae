"""Calibration of the timing model against published Trainium1 measurements (NKI_NOTES §7).

Runs our own kernels with the published kernels' structures (benchmarks/calibration_kernels/)
through the emulator in trace-only mode and the timing model, and prints simulated vs
published latency, the ratios between versions of one kernel, and how long tracing and
scheduling took. Targets: every ordering right, every ratio within 25%, every absolute latency
within 35%.

    .venv/bin/python benchmarks/calibration.py                 # everything, full sizes
    .venv/bin/python benchmarks/calibration.py --only matmul   # one group
    .venv/bin/python benchmarks/calibration.py --json out.json # also write the figures
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.profiling.metrics import profile_trace

KERNELS = Path(__file__).resolve().parent / "calibration_kernels"


@dataclass(frozen=True)
class Case:
    group: str
    kernel_file: str
    kernel: str
    label: str
    published_ms: float
    inputs: Callable[[], list[np.ndarray]]


def _matmul_inputs() -> list[np.ndarray]:
    # [4096 x 8192] . [8192 x 8192], lhs given transposed; bf16. Values do not matter: trace-only.
    return [np.zeros((8192, 4096), ml_dtypes.bfloat16), np.zeros((8192, 8192), ml_dtypes.bfloat16)]


def _mamba_inputs(channels: int, seq: int, states: int = 16) -> Callable[[], list[np.ndarray]]:
    def make() -> list[np.ndarray]:
        f = np.float32
        return [
            np.zeros((channels, seq), f),
            np.zeros((channels, seq), f),
            np.zeros((channels, states), f),
            np.zeros((states, seq), f),
            np.zeros((states, seq), f),
        ]

    return make


def _layernorm_inputs() -> list[np.ndarray]:
    return [
        np.zeros((4096, 8192), np.float32),
        np.zeros((1, 8192), np.float32),
        np.zeros((1, 8192), np.float32),
    ]


CASES = [
    Case("matmul", "matmul.py", "matmul_tiled", "v1 tiled", 51.80, _matmul_inputs),
    Case("matmul", "matmul.py", "matmul_hoisted", "v2 hoisted loads", 42.96, _matmul_inputs),
    Case("matmul", "matmul.py", "matmul_block2x2", "v3 2x2 blocks", 22.07, _matmul_inputs),
    Case("matmul", "matmul.py", "matmul_blocked", "v4 fully blocked", 6.97, _matmul_inputs),
    Case("mamba C256 L512", "mamba.py", "mamba_v1", "v1", 0.17293, _mamba_inputs(256, 512)),
    Case("mamba C4096 L512", "mamba.py", "mamba_v1", "v1", 2.34, _mamba_inputs(4096, 512)),
    Case("mamba C4096 L512", "mamba.py", "mamba_v2", "v2", 1.61, _mamba_inputs(4096, 512)),
    Case("mamba C4096 L8192", "mamba.py", "mamba_v2", "v2 (spills)", 53.33, _mamba_inputs(4096, 8192)),
    Case("mamba C4096 L8192", "mamba.py", "mamba_v3", "v3 seq tiled", 27.8, _mamba_inputs(4096, 8192)),
    Case("layernorm 4096x8192", "layernorm.py", "layernorm_nl", "nl API", 2.31, _layernorm_inputs),
    Case("layernorm 4096x8192", "layernorm.py", "layernorm_bn", "bn_stats/bn_aggr", 1.97, _layernorm_inputs),
]


@dataclass
class Result:
    group: str
    label: str
    kernel: str
    published_ms: float
    simulated_ms: float
    records: int
    emulate_s: float
    schedule_s: float
    bound: str
    percent_of_peak: float
    hfu: float
    vector_busy: float
    tensor_busy: float
    dma_busy: float
    spill_bytes: int
    hoisted: int

    @property
    def error(self) -> float:
        return self.simulated_ms / self.published_ms - 1


def run_case(case: Case, hardware: str) -> Result:
    path = KERNELS / case.kernel_file
    text = path.read_text()
    fn = load_kernel(text, case.kernel, str(path))
    inputs = case.inputs()
    # CPU time, not wall time: the figures stay meaningful on a shared machine
    t0 = time.process_time()
    run = run_kernel(fn, inputs, numerics=False, kernel_name=case.kernel, source_path=str(path))
    t1 = time.process_time()
    profile, timeline = profile_trace(run.trace, hardware, source_text=text)
    t2 = time.process_time()
    return Result(
        group=case.group,
        label=case.label,
        kernel=case.kernel,
        published_ms=case.published_ms,
        simulated_ms=profile.latency_ms,
        records=len(run.trace.records),
        emulate_s=t1 - t0,
        schedule_s=t2 - t1,
        bound=profile.bound,
        percent_of_peak=profile.percent_of_peak,
        hfu=profile.hfu_estimated_percent,
        vector_busy=profile.vector_engine_active_time_percent,
        tensor_busy=profile.tensor_engine_active_time_percent,
        dma_busy=profile.dma_active_time_percent,
        spill_bytes=profile.spill_save_bytes + profile.spill_reload_bytes,
        hoisted=len(timeline.hoisted_records),
    )


def ratio_rows(results: list[Result]) -> list[tuple[str, float, float]]:
    """(versions, published ratio, simulated ratio) for consecutive versions of one kernel."""
    rows = []
    for a, b in itertools.pairwise(results):
        if a.group == b.group:
            rows.append(
                (
                    f"{a.group}: {a.label} / {b.label}",
                    a.published_ms / b.published_ms,
                    a.simulated_ms / b.simulated_ms,
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="run only the groups whose name contains this text")
    parser.add_argument("--hardware", default="trn1", choices=["trn1", "trn2"])
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)

    results = []
    for case in CASES:
        if args.only and args.only not in case.group:
            continue
        result = run_case(case, args.hardware)
        results.append(result)
        print(
            f"{case.group:22s} {case.label:18s} sim {result.simulated_ms:9.3f} ms  pub {case.published_ms:8.3f} ms"
            f"  err {result.error:+6.1%}  {result.records:7d} records  emulate {result.emulate_s:6.1f}s cpu"
            f"  model {result.schedule_s:6.1f}s cpu ({1e6 * result.schedule_s / max(1, result.records):5.1f} us/rec)"
            f"  bound {result.bound}  vec {result.vector_busy:.2f} te {result.tensor_busy:.2f} dma {result.dma_busy:.2f}"
            f"  hfu {result.hfu:.2f}  spill {result.spill_bytes / 2**20:.0f} MiB  hoisted {result.hoisted}",
            flush=True,
        )
    ratios = ratio_rows(results)
    print("\nratios between versions (published vs simulated):")
    for name, published, simulated in ratios:
        print(
            f"  {name:55s} pub {published:5.2f}  sim {simulated:5.2f}  err {simulated / published - 1:+6.1%}"
        )
    orderings = all((p > 1) == (s > 1) for _, p, s in ratios)
    worst_ratio = max((abs(s / p - 1) for _, p, s in ratios), default=0.0)
    worst_abs = max((abs(r.error) for r in results), default=0.0)
    print(
        f"\norderings right: {orderings}; worst ratio error {worst_ratio:.1%} (target 25%);"
        f" worst absolute error {worst_abs:.1%} (target 35%)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "hardware": args.hardware,
                    "results": [asdict(r) | {"error": r.error} for r in results],
                    "ratios": [{"versions": n, "published": p, "simulated": s} for n, p, s in ratios],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
