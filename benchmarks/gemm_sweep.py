"""A bf16 GEMM sweep on the timing model: simulated share of the Tensor Engine's peak per shape,
kernel and layout (issue 20).

Runs our own nki.* kernels (benchmarks/gemm_sweep_kernels.py: tiled, hoisted and blocked, with
the left operand given pre-transposed [K, M] or as [M, K] and transposed in the kernel) through
the emulator in trace-only mode and the timing model (simulator backend), for square shapes
M = N = K. Prints, per run: simulated latency, the bf16 Tensor Engine ideal time (2MNK / peak),
the share of peak over the whole latency and over the latency without the device's kernel start,
engine busy shares, and how long the run took. Printed figures only: no published measurement
of these kernels exists, so nothing here is a target.

    .venv/bin/python benchmarks/gemm_sweep.py                        # 512..4096 and 5120, trn2
    .venv/bin/python benchmarks/gemm_sweep.py --sizes 2048,4096 --kernels blocked
    .venv/bin/python benchmarks/gemm_sweep.py --hardware trn1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

from accelopt.hardware.specs import get_hardware, hardware_label
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.profiling.metrics import profile_trace

KERNELS = Path(__file__).resolve().parent / "gemm_sweep_kernels.py"
VERSIONS = ("tiled", "hoisted", "blocked")
LAYOUTS = {"t": "lhs_t [K, M]", "n": "lhs [M, K]"}


def run(kernel: str, size: int, hardware: str) -> dict[str, float]:
    text = KERNELS.read_text()
    fn = load_kernel(text, kernel, str(KERNELS))
    operands = [np.zeros((size, size), ml_dtypes.bfloat16), np.zeros((size, size), ml_dtypes.bfloat16)]
    t0 = time.process_time()
    traced = run_kernel(fn, operands, numerics=False, kernel_name=kernel, source_path=str(KERNELS))
    profile, timeline = profile_trace(traced.trace, hardware, source_text=text)
    seconds = time.process_time() - t0
    latency = profile.latency_ms * 1e-3
    ideal = 2 * size**3 / get_hardware(hardware).tensor_bf16_flops
    return {
        "latency_us": latency * 1e6,
        "ideal_us": ideal * 1e6,
        "peak": ideal / latency,
        "peak_after_start": ideal / (latency - timeline.kernel_start_s),
        "tensor": profile.tensor_engine_active_time_percent,
        "vector": profile.vector_engine_active_time_percent,
        "scalar": profile.scalar_engine_active_time_percent,
        "dma": profile.dma_active_time_percent,
        "spill_mib": (profile.spill_save_bytes + profile.spill_reload_bytes) / 2**20,
        "cpu_s": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="512,1024,2048,4096,5120", help="comma-separated M = N = K")
    parser.add_argument("--kernels", default=",".join(VERSIONS), help="comma-separated versions")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="t (lhs given [K, M]), n ([M, K])")
    parser.add_argument("--hardware", default="trn2")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"simulator backend, {hardware_label(args.hardware)}, bf16 inputs, fp32 PSUM accumulation")
    print(
        f"{'kernel':8s} {'layout':13s} {'size':>5s} {'sim us':>9s} {'ideal us':>9s} {'% peak':>7s}"
        f" {'excl. start':>11s}  te   vec  sc   dma  spill MiB  cpu s"
    )
    shares: dict[str, list[float]] = {}
    for version in args.kernels.split(","):
        for layout in args.layouts.split(","):
            for size in sizes:
                r = run(f"gemm_{version}_{layout}", size, args.hardware)
                if size >= 2048:
                    shares.setdefault(version, []).append(r["peak"])
                print(
                    f"{version:8s} {LAYOUTS[layout]:13s} {size:5d} {r['latency_us']:9.1f} {r['ideal_us']:9.1f}"
                    f" {100 * r['peak']:6.1f}% {100 * r['peak_after_start']:10.1f}%"
                    f"  {r['tensor']:.2f} {r['vector']:.2f} {r['scalar']:.2f} {r['dma']:.2f}"
                    f" {r['spill_mib']:9.0f} {r['cpu_s']:6.1f}",
                    flush=True,
                )
    for version, values in shares.items():
        print(f"median share of peak from 2048 up, {version}: {100 * statistics.median(values):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
