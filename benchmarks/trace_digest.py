"""Digests of what the NKI emulator produces for every example kernel and NKIBench task: a check
that a change to the emulator (or to its fast paths) leaves its behaviour exactly as it was.

    .venv/bin/python benchmarks/trace_digest.py --write before.json   # record
    .venv/bin/python benchmarks/trace_digest.py --check before.json   # compare; exit 1 on a change
    .venv/bin/python benchmarks/trace_digest.py --fast-paths off --check before.json

For each kernel (the examples and the NKIBench baselines at their "small" size, seed 0) it runs
the kernel trace-only twice (the first run logs and compiles what the fast paths reuse, the
second reuses it) and once with numerics, and prints a SHA-256 of each trace's JSON and of the
numeric outputs' bytes. Every figure is a digest of a real run of this checkout.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: as in the sandboxed worker
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from accelopt.nki import runtime

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "kernels_examples"
NKIBENCH = ROOT / "nkibench"


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"digest_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases() -> Iterator[tuple[str, Path, str, Path]]:
    """(label, kernel file, kernel function, reference module) of every kernel checked."""
    for reference in sorted(EXAMPLES.glob("*_ref.py")):
        name = reference.name.removesuffix("_ref.py")
        kernel = EXAMPLES / f"{name}.py"
        text = kernel.read_text()
        function = next(
            line.split("def ", 1)[1].split("(", 1)[0]
            for line in text.splitlines()
            if line.startswith("def ") and "_kernel" in line
        )
        yield f"example/{name}", kernel, function, reference
    index = json.loads((NKIBENCH / "index.json").read_text())
    for task in index["tasks"]:
        yield (
            f"nkibench/{task['name']}",
            NKIBENCH / task["kernel"],
            task["kernel_name"],
            NKIBENCH / task["reference"],
        )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def digests(kernel: Path, function: str, reference: Path, **options: Any) -> dict[str, str]:
    ref = _module(reference)
    np.random.seed(0)
    inputs = ref.transform_to_nki_inputs(ref.get_inputs("small"))
    fn = runtime.load_kernel(kernel.read_text(), function, str(kernel))

    def run(numerics: bool) -> runtime.KernelRun:
        return runtime.run_kernel(
            fn, list(inputs), numerics=numerics, kernel_name=function, source_path=str(kernel), **options
        )

    first, second, numeric = run(False), run(False), run(True)
    outputs = b"".join(np.ascontiguousarray(o).tobytes() for o in numeric.outputs)
    return {
        "trace_first": _sha(first.trace.to_json().encode()),
        "trace_warm": _sha(second.trace.to_json().encode()),
        "trace_numeric": _sha(numeric.trace.to_json().encode()),
        "outputs": _sha(outputs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="save the digests to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with digests saved by --write")
    parser.add_argument(
        "--fast-paths",
        choices=("on", "off"),
        default=None,
        help="run with the emulator's fast paths on or off (default: the emulator's default)",
    )
    args = parser.parse_args()
    runtime.install_aliases()
    options: dict[str, Any] = {} if args.fast_paths is None else {"fast_paths": args.fast_paths == "on"}
    found: dict[str, dict[str, str]] = {}
    for label, kernel, function, reference in cases():
        found[label] = digests(kernel, function, reference, **options)
        row = found[label]
        print(f"{label:<36} {row['trace_first']} {row['trace_warm']} {row['trace_numeric']} {row['outputs']}")
        sys.stdout.flush()
    warm_differs = [label for label, row in found.items() if row["trace_first"] != row["trace_warm"]]
    print(f"{len(found)} kernels; first and warm trace-only traces differ for: {warm_differs or 'none'}")
    if args.write:
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    if args.check:
        expected = json.loads(args.check.read_text())
        changed = [label for label in sorted(set(expected) | set(found)) if expected.get(label) != found.get(label)]
        print(f"against {args.check}: {'unchanged' if not changed else 'CHANGED: ' + ', '.join(changed)}")
        return 1 if changed or warm_differs else 0
    return 1 if warm_differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
