"""The NKI 0.7 (nki.*) versions of the example kernels (kernels_examples/nki07/): each runs
unchanged, matches the same numpy reference as its legacy twin, traces the same instructions
with and without numerics, and is profiled by the timing model on the target an nki.* kernel
defaults to (trn2).

Our own trusted files: in-process, as tests/examples/test_example_kernels.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from accelopt.nki import apiversion

EXAMPLES = Path(__file__).resolve().parents[2] / "kernels_examples"
NKI07 = EXAMPLES / "nki07"
TOLERANCE = 2e-5
KERNELS = sorted(p.stem for p in NKI07.glob("*.py"))


@pytest.fixture(scope="module")
def runtime():
    from accelopt.nki import runtime

    runtime.install_aliases()
    return runtime


def _reference(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_ref_{path.stem}_nki07", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel_name(text: str) -> str:
    match = re.search(r"@nki\.jit\s*\ndef (\w+)", text)
    assert match is not None
    return match.group(1)


def _run(runtime, name: str, seed: int, *, numerics: bool = True, folder: Path = NKI07):
    path = folder / f"{name}.py"
    text = path.read_text()
    directive = re.search(r"# accelopt: reference (\S+)", text)
    assert directive is not None, f"{path} declares no reference"
    reference = _reference((path.parent / directive.group(1)).resolve())
    np.random.seed(seed)
    inputs = reference.get_inputs("small")
    kernel_name = _kernel_name(text)
    fn = runtime.load_kernel(text, kernel_name, str(path))
    run = runtime.run_kernel(
        fn,
        [np.array(a, copy=True) for a in reference.transform_to_nki_inputs(inputs)],
        numerics=numerics,
        kernel_name=kernel_name,
        source_path=str(path),
    )
    return reference, inputs, run


def _rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got64 - want64) / max(np.linalg.norm(want64), np.finfo(np.float64).tiny))


def test_every_legacy_example_has_an_nki07_version():
    legacy = {p.stem for p in EXAMPLES.glob("*.py") if not p.name.endswith("_ref.py")}
    assert set(KERNELS) == legacy
    for name in KERNELS:
        text = (NKI07 / f"{name}.py").read_text()
        assert not apiversion.detect(text).legacy, f"{name}: not written in the nki.* language"
        assert "neuronxcc" not in text


@pytest.mark.parametrize("name", KERNELS)
def test_nki07_example_matches_its_reference(runtime, name):
    for seed in (0, 1):
        reference, inputs, run = _run(runtime, name, seed)
        kernel_out = run.outputs[0] if run.single else tuple(run.outputs)
        got, want = reference.transform_nki_outputs(kernel_out, reference.forward(*inputs))
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert not np.isnan(g).any(), "an output element was never written"
            assert _rel_l2(g, w) <= TOLERANCE


@pytest.mark.parametrize("name", KERNELS)
def test_nki07_example_is_profiled_on_trn2_with_the_instructions_it_runs(runtime, name):
    from accelopt.profiling.metrics import profile_trace

    _, _, numeric = _run(runtime, name, 0, numerics=True)
    _, _, traced = _run(runtime, name, 0, numerics=False)
    key = [(r.opcode, r.engine, r.line, r.partitions, r.free_size, r.accumulate) for r in numeric.trace.records]
    assert key == [
        (r.opcode, r.engine, r.line, r.partitions, r.free_size, r.accumulate) for r in traced.trace.records
    ]
    text = (NKI07 / f"{name}.py").read_text()
    hardware = apiversion.default_hardware(text)
    assert hardware == "trn2"
    profile, _ = profile_trace(traced.trace, hardware, source_text=text)
    assert profile.hardware == "trn2" and profile.latency_ms > 0
    assert profile.peak_latency_ms <= profile.latency_ms
    # the legacy twin does the same work: the same bytes reach HBM
    _, _, legacy = _run(runtime, name, 0, numerics=False, folder=EXAMPLES)
    stored = sum(r.bytes for r in traced.trace.records if r.dst_memory and r.dst_memory.value == "hbm")
    legacy_stored = sum(r.bytes for r in legacy.trace.records if r.dst_memory and r.dst_memory.value == "hbm")
    assert stored == legacy_stored > 0
