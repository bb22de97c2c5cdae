"""End-to-end: every example kernel runs unchanged on the emulator, matches its numpy reference,
and leaves the instruction trace its loops imply.

These are our own trusted files, so they run in-process (no sandbox) for speed.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "kernels_examples"
TOLERANCE = 2e-5

# Instruction counts at the reference module's "small" size, derived from each kernel's loops.
EXPECTED_COUNTS: dict[str, tuple[str, dict[str, int]]] = {
    # 256 x 1024 in 128 x 512 tiles: 4 tiles x (load, sigmoid, multiply, store)
    "silu": ("silu_kernel", {"dma_load": 4, "activation": 4, "tensor_tensor": 4, "dma_store": 4}),
    # M=K=256, N=1024: 2 x 2 output tiles x 2 K steps; A and B tile loads, one transpose, one
    # PSUM->SBUF copy of the transposed tile and one matmul per step; a copy + store per output tile
    "matmul": (
        "matmul_kernel",
        {"dma_load": 16, "transpose": 8, "nc_matmul": 8, "psum_copy": 12, "dma_store": 4},
    ),
    # 2 row blocks x 2 chunks x 3 passes of loads; exp in passes 2 and 3; a store per chunk
    "softmax": ("softmax_kernel", {"dma_load": 12, "activation": 8, "dma_store": 4}),
    # 2 gamma loads; per row block: x load, square, rsqrt; 2 transposes; 2 x 2 weight loads and matmuls
    "rmsnorm_matmul": (
        "rmsnorm_matmul_kernel",
        {"dma_load": 12, "activation": 4, "transpose": 4, "nc_matmul": 8, "psum_copy": 4, "dma_store": 4},
    ),
    # C=256, L=1024, S=2: 2 channel tiles x 2 chunks x 2 states; one scan, one exp and two row
    # broadcasts per state; a, delta, u, B, C loads; one store per chunk
    "mamba": (
        "mamba_scan_kernel",
        {"dma_load": 26, "activation": 8, "tensor_tensor_scan": 8, "broadcast": 16, "dma_store": 4},
    ),
    # 2 heads x 2 chunks: 4 loads (two 64-partition halves, cos, sin), 6 vector ops, 2 stores
    "rope": ("rope_kernel", {"dma_load": 16, "tensor_tensor": 24, "dma_store": 8}),
    # 200 x 1024 in 2 x 4 tiles of 128 x 256 (the second row block masked to 72 rows), per tile:
    # 4 loads; 4 tensor_scalar (b1*m, b2*v, 1/(d+eps), p decay); 3 scalar_tensor_tensor (m', v', p');
    # 2 activations (square, sqrt); 1 tensor_tensor (m' * 1/(d+eps)); 1 store
    "adamw": (
        "adamw_kernel",
        {
            "dma_load": 32,
            "tensor_scalar": 32,
            "scalar_tensor_tensor": 24,
            "activation": 16,
            "tensor_tensor": 8,
            "dma_store": 8,
        },
    ),
}


@pytest.fixture(scope="module")
def runtime():
    from accelopt.nki import runtime

    runtime.install_aliases()
    return runtime


def _reference(name: str) -> ModuleType:
    path = EXAMPLES / f"{name}_ref.py"
    spec = importlib.util.spec_from_file_location(f"example_ref_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(runtime, name: str, seed: int, *, numerics: bool = True):
    kernel_name = EXPECTED_COUNTS[name][0]
    path = EXAMPLES / f"{name}.py"
    reference = _reference(name)
    np.random.seed(seed)
    inputs = reference.get_inputs("small")
    fn = runtime.load_kernel(path.read_text(), kernel_name, str(path))
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


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_example_matches_its_reference(runtime, name):
    for seed in (0, 1):
        reference, inputs, run = _run(runtime, name, seed)
        kernel_out = run.outputs[0] if run.single else tuple(run.outputs)
        got, want = reference.transform_nki_outputs(kernel_out, reference.forward(*inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert not np.isnan(g).any(), "an output element was never written"
            assert _rel_l2(g, w) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_example_trace_has_the_instructions_its_loops_imply(runtime, name):
    reference, inputs, run = _run(runtime, name, 0, numerics=False)
    trace = run.trace
    assert not trace.numerics
    counts = Counter(record.opcode for record in trace.records)
    expected = EXPECTED_COUNTS[name][1]
    assert {op: counts[op] for op in expected} == expected

    # every output element is stored exactly once, and every record points at a kernel line
    expected_out = reference.forward(*inputs)
    out_bytes = sum(
        np.asarray(o).nbytes for o in (expected_out if isinstance(expected_out, tuple) else [expected_out])
    )
    assert sum(r.bytes for r in trace.records if r.opcode == "dma_store") == out_bytes
    lines = (EXAMPLES / f"{name}.py").read_text().splitlines()
    assert all(1 <= r.line <= len(lines) for r in trace.records)


@pytest.mark.parametrize("name", ["silu", "mamba"])
def test_trace_only_run_records_what_the_numeric_run_does(runtime, name):
    _, _, numeric = _run(runtime, name, 0, numerics=True)
    _, _, trace_only = _run(runtime, name, 0, numerics=False)
    assert [(r.opcode, r.engine, r.line, r.partitions, r.free_size) for r in numeric.trace.records] == [
        (r.opcode, r.engine, r.line, r.partitions, r.free_size) for r in trace_only.trace.records
    ]


def test_every_example_declares_its_reference():
    kernels = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.endswith("_ref.py"))
    assert {p.stem for p in kernels} == set(EXPECTED_COUNTS)
    for path in kernels:
        assert f"# accelopt: reference {path.stem}_ref.py" in path.read_text()
        assert (EXAMPLES / f"{path.stem}_ref.py").is_file()
