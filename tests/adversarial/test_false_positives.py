"""The false-positive side of verification: every honest kernel we ship still verifies.

Every example kernel and every NKIBench baseline, at its reference module's small size: the
logged run on one seed's inputs, the trusted re-run of its call log on another seed's inputs,
the returned trace must be the re-run's, the re-run's outputs must match the reference module's
`forward` on those inputs, and the re-run's profile must be plausible for the task's work.

These are our own trusted files, so the kernels run in-process (as in tests/examples); the
sandboxed path is covered by the backend tests.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Trace
from accelopt.profiling.compare import compare_outputs
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.plausibility import implausibility
from accelopt.profiling.profile import Work

ROOT = Path(__file__).resolve().parents[2]


def honest_kernels() -> list[tuple[Path, str, Path, float]]:
    found = []
    for task in json.loads((ROOT / "nkibench" / "index.json").read_text())["tasks"]:
        bench = ROOT / "nkibench"
        found.append((bench / task["kernel"], task["kernel_name"], bench / task["reference"], task["tolerance"]))
    for path in sorted((ROOT / "kernels_examples").glob("*.py")):
        text = path.read_text()
        reference = re.search(r"# accelopt: reference (\S+)", text)
        names = re.findall(r"@nki\.jit\s*\ndef (\w+)", text)
        if reference and names:
            found.append((path, names[0], path.parent / reference.group(1), 2e-5))
    return found


KERNELS = honest_kernels()


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"honest_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_walk_covers_every_example_and_baseline():
    examples = [p for p in (ROOT / "kernels_examples").glob("*.py") if not p.name.endswith("_ref.py")]
    assert len(KERNELS) == len(json.loads((ROOT / "nkibench" / "index.json").read_text())["tasks"]) + len(examples)


@pytest.mark.parametrize(
    ("kernel_path", "name", "reference_path", "tolerance"),
    KERNELS,
    ids=[f"{k.parent.name}/{k.stem}" for k, *_ in KERNELS],
)
def test_honest_kernel_verifies(kernel_path: Path, name: str, reference_path: Path, tolerance: float):
    reference = load_module(reference_path)
    inputs = []
    for seed in (11, 12):
        np.random.seed(seed)
        raw = list(reference.get_inputs("small"))
        inputs.append((raw, [np.array(a, copy=True) for a in reference.transform_to_nki_inputs(raw)]))
    fn = runtime.load_kernel(kernel_path.read_text(), name, str(kernel_path))
    logged = runtime.run_kernel(fn, inputs[0][1], record_calls=True, source_path=str(kernel_path))
    returned = Trace.from_json(logged.trace.to_json())
    assert returned.calls_failure is None

    trusted = rerun(returned, inputs[1][1])
    assert compare_traces(returned, trusted.trace) is None

    raw = inputs[1][0]
    expected = reference.forward(*raw)
    kernel_out = trusted.outputs[0] if trusted.single and len(trusted.outputs) == 1 else tuple(trusted.outputs)
    k_list, r_list = reference.transform_nki_outputs(kernel_out, expected)
    verdict = compare_outputs([np.asarray(a) for a in k_list], [np.asarray(a) for a in r_list], tolerance)
    assert verdict.ok, verdict.message

    work = Work(**reference.work(*raw), source="task") if hasattr(reference, "work") else None
    profile, _ = profile_trace(trusted.trace, "trn1", work)
    assert implausibility(profile, trusted.trace) is None
