"""What verifying an evaluation costs, per example kernel (and, with --nkibench, per baseline).

    .venv/bin/python benchmarks/verification_cost.py
    .venv/bin/python benchmarks/verification_cost.py --nkibench --repeat 5

Each kernel is evaluated by the real simulator backend (sandboxed worker, 5 seeds, its
reference module's small size) `--repeat` times after one warm-up evaluation. Printed per kernel:

- eval ms: the median wall time of a whole evaluation (reference results cached, as in a search);
- rerun ms: the part spent re-running the returned call log in the trusted process and comparing
  the returned trace with the re-run's (`profiling.verification.rerun_returned_calls`), and its
  share of the evaluation;
- log ms: what logging the calls adds to the sandboxed numeric run (measured in-process: the
  same kernel run with and without `record_calls`, the fastest of `--repeat` each);
- hidden ms: what the hidden-size run adds (the same evaluations with hidden sizes switched off,
  subtracted), and the hidden size used, if the module offers one.

Not in the per-evaluation figures: the verification seed's reference outputs and the hidden
size's reference, computed once per task (the first evaluation) and cached.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from accelopt.nki import runtime
from accelopt.profiling import simulator as simulator_module
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import hidden_sizes, task_for_kernel

ROOT = Path(__file__).resolve().parents[1]


def kernels(with_nkibench: bool) -> list[tuple[Path, str, Path]]:
    found = []
    for path in sorted((ROOT / "kernels_examples").glob("*.py")):
        text = path.read_text()
        reference = re.search(r"# accelopt: reference (\S+)", text)
        names = re.findall(r"@nki\.jit\s*\ndef (\w+)", text)
        if reference and names:
            found.append((path, names[0], path.parent / reference.group(1)))
    if with_nkibench:
        bench = ROOT / "nkibench"
        for task in json.loads((bench / "index.json").read_text())["tasks"]:
            found.append((bench / task["kernel"], task["kernel_name"], bench / task["reference"]))
    return found


def logging_cost_ms(path: Path, name: str, reference_path: Path, repeat: int) -> float:
    spec = importlib.util.spec_from_file_location("bench_reference", reference_path)
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    np.random.seed(0)
    inputs = list(reference.transform_to_nki_inputs(reference.get_inputs("small")))
    fn = runtime.load_kernel(path.read_text(), name, str(path))
    timings: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeat + 1):
        for record in (False, True):
            started = time.perf_counter()
            runtime.run_kernel(fn, inputs, record_calls=record, source_path=str(path))
            timings[record].append(time.perf_counter() - started)
    return 1e3 * (min(timings[True][1:]) - min(timings[False][1:]))  # min: the least disturbed run


async def measure(repeat: int, with_nkibench: bool) -> list[dict[str, Any]]:
    spent: list[float] = []
    real = simulator_module.rerun_returned_calls

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    simulator_module.rerun_returned_calls = timed
    rows = []
    backend = SimulatorBackend(max_workers=1)
    options = EvaluationOptions(seeds=5, timeout_s=600)
    try:
        for path, name, reference in kernels(with_nkibench):
            source = KernelSource(text=path.read_text(), name=name, path=str(path))
            task = task_for_kernel(source, reference=str(reference), size="small")
            warm = await backend.evaluate(source, task, options)
            if warm.status != "ok":
                rows.append({"kernel": f"{path.parent.name}/{path.stem}", "status": warm.message})
                continue
            walls, reruns, plain = [], [], []
            for _ in range(repeat):
                spent.clear()
                evaluation = await backend.evaluate(source, task, options)
                assert evaluation.status == "ok" and evaluation.verified, evaluation.message
                walls.append(evaluation.wall_time_s)
                reruns.append(sum(spent))
                simulator_module.hidden_sizes = lambda *_: []
                try:
                    plain.append((await backend.evaluate(source, task, options)).wall_time_s)
                finally:
                    simulator_module.hidden_sizes = hidden_sizes
            hidden = hidden_sizes(task.reference_text or "", task.size)
            rows.append(
                {
                    "kernel": f"{path.parent.name}/{path.stem}",
                    "eval_ms": 1e3 * statistics.median(walls),
                    "rerun_ms": 1e3 * statistics.median(reruns),
                    "log_ms": logging_cost_ms(path, name, reference, repeat),
                    "hidden_ms": 1e3 * (statistics.median(walls) - statistics.median(plain)) if hidden else 0.0,
                    "hidden": ",".join(hidden) or "-",
                }
            )
    finally:
        simulator_module.rerun_returned_calls = real
        await backend.aclose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nkibench", action="store_true", help="also every NKIBench baseline")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.repeat, args.nkibench))
    print(f"{'kernel':34} {'eval ms':>9} {'rerun ms':>9} {'share':>6} {'log ms':>7} {'hidden ms':>9}  size")
    shares = []
    for row in rows:
        if "eval_ms" not in row:
            print(f"{row['kernel']:34} not ok: {row['status']}")
            continue
        share = row["rerun_ms"] / row["eval_ms"]
        shares.append(share)
        print(
            f"{row['kernel']:34} {row['eval_ms']:9.1f} {row['rerun_ms']:9.1f} {share:6.1%} "
            f"{row['log_ms']:7.1f} {row['hidden_ms']:9.1f}  {row['hidden']}"
        )
    if shares:
        print(f"median share of the evaluation spent re-running and comparing: {statistics.median(shares):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
