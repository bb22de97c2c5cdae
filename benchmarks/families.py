"""Simulated latency of issue 25's profile-guided rewrite families, before and after, on the
small kernels of `tests/offline/kernels/` (one per family and kernel style).

    .venv/bin/python benchmarks/families.py
    .venv/bin/python benchmarks/families.py --only fill_psum_bank

Each kernel is evaluated by the simulator backend in its sandbox (the path `accelopt profile`
takes, at the shapes of the kernel's `# accelopt: inputs` line, trace only), then rewritten by
the catalogue's rewrite at its first site (`--times` applications for the rewrites that step,
such as fill_psum_bank's 128 -> 256 -> 512 columns) and evaluated again. Numerics of every
rewritten kernel are checked against numpy by tests/offline/test_families.py, not here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

KERNELS = Path(__file__).resolve().parent.parent / "tests" / "offline" / "kernels"

# (rewrite, kernel file, kernel function, hardware, applications)
CASES = [
    ("double_buffer_load", "hw_exp_rows.py", "exp_rows_kernel", "trn1", 1),
    ("double_buffer_load", "cg_exp_rows.py", "exp_rows_cg_kernel", "trn1", 1),
    ("double_buffer_load", "nki07_exp_rows.py", "exp_rows_07_kernel", "trn2", 1),
    ("accumulate_in_psum", "hw_psum_sum.py", "psum_sum_kernel", "trn1", 1),
    ("accumulate_in_psum", "cg_psum_sum.py", "psum_sum_cg_kernel", "trn1", 1),
    ("accumulate_in_psum", "nki07_psum_sum.py", "psum_sum_07_kernel", "trn2", 1),
    ("fill_psum_bank", "hw_narrow_psum.py", "narrow_psum_kernel", "trn1", 2),
    ("fill_psum_bank", "cg_narrow_psum.py", "narrow_psum_cg_kernel", "trn1", 1),
    ("fill_psum_bank", "nki07_narrow_psum.py", "narrow_psum_07_kernel", "trn2", 2),
    ("transpose_on_dma", "hw_load_transpose.py", "load_transpose_kernel", "trn1", 1),
    ("transpose_on_dma", "cg_load_transpose.py", "load_transpose_cg_kernel", "trn1", 1),
    ("transpose_on_dma", "nki07_load_transpose.py", "load_transpose_07_kernel", "trn2", 1),
    ("transpose_on_tensor_engine", "hw_dma_transpose.py", "dma_transpose_kernel", "trn1", 1),
    ("transpose_on_tensor_engine", "cg_dma_transpose.py", "dma_transpose_cg_kernel", "trn1", 1),
    ("transpose_on_tensor_engine", "nki07_dma_transpose.py", "dma_transpose_07_kernel", "trn2", 1),
]


def latency_us(backend: SimulatorBackend, kernel: KernelSource, hardware: str) -> float:
    task = task_for_kernel(kernel, None, size="full")
    options = EvaluationOptions(hardware=hardware, check_correctness=False, timeout_s=300.0)
    evaluation = backend.evaluate_sync(kernel, task, options).evaluation
    if evaluation.profile is None:
        raise SystemExit(f"{kernel.path}: {evaluation.status}: {evaluation.message}")
    return evaluation.profile.latency_ms * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="one rewrite's cases")
    args = parser.parse_args()
    backend = SimulatorBackend(max_workers=1)
    print(f"{'rewrite':28} {'kernel':26} {'hw':5} {'before µs':>10} {'after µs':>10} {'speedup':>8}")
    for rewrite_name, file, name, hardware, times in CASES:
        if args.only and rewrite_name != args.only:
            continue
        path = KERNELS / file
        text = path.read_text(encoding="utf-8")
        before = latency_us(backend, KernelSource(text=text, name=name, path=str(path)), hardware)
        rewrite = get_rewrite(rewrite_name)
        new = text
        for _ in range(times):
            site = rewrite.sites(new, name)[0]
            new = rewrite.apply(new, name, site.id)
        after = latency_us(backend, KernelSource(text=new, name=name, path=str(path)), hardware)
        label = f"{file}" + (f" (x{times})" if times > 1 else "")
        print(f"{rewrite_name:28} {label:26} {hardware:5} {before:10.1f} {after:10.1f} {before / after:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
