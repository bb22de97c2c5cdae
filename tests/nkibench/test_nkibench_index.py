"""The NKIBench index is well formed and every task matches the published suite: its shapes, its
kernel file, and the roofline work formula of NKI_NOTES §6."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from accelopt.profiling.nkibench import NkiBenchError, bench_task, find_task, load_index, suite_root

SUITE = Path(__file__).resolve().parents[2] / "nkibench"

# The published NKIBench shapes (NKI_NOTES §6).
PUBLISHED_SHAPES = {
    "adamw": {"M": 10944, "N": 2048},
    "add_rmsnorm_matmul": {"M": 4096, "N": 2048, "K": 1024},
    "bmm": {"B": 16, "M": 4096, "K": 64, "N": 4096},
    "bmm_softmax": {"B": 16, "K": 64, "M": 4096, "N": 4096},
    "gqa_full": {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128},
    "lora": {"M": 4096, "N": 12288, "K": 5120, "R": 128},
    "mamba": {"M": 7168, "C": 256, "S": 16},
    "matmul": {"M": 4096, "N": 12288, "K": 5120},
    "matmul_add_rmsnorm": {"M": 4096, "N": 2048, "K": 2048},
    "rmsnorm_matmul": {"M": 4096, "N": 2048, "K": 1024},
    "rope_single_freq_apply": {"B": 1, "H": 64, "N": 4096, "D": 128},
    "silu": {"M": 4096, "N": 7168},
    "swiglu": {"M": 4096, "N": 3072, "K": 1024},
    "transpose_matmul": {"M": 4096, "K": 2048, "N": 10944},
}


def _matmul(d):
    m, n, k = d["M"], d["N"], d["K"]
    return 2 * m * n * k, 0, 4 * (m * k + k * n + m * n)


# (matmul_flops, vector_flops, hbm_bytes) from the task dimensions, exactly as NKI_NOTES §6 writes them.
WORK_FORMULAS = {
    "matmul": _matmul,
    "transpose_matmul": _matmul,
    "silu": lambda d: (0, 3 * d["M"] * d["N"], 8 * d["M"] * d["N"]),
    "adamw": lambda d: (0, 7 * d["M"] * d["N"], 20 * d["M"] * d["N"]),
    "rmsnorm_matmul": lambda d: (
        2 * d["M"] * d["N"] * d["K"],
        4 * d["M"] * d["K"],
        4 * (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"]),
    ),
    "add_rmsnorm_matmul": lambda d: (
        2 * d["M"] * d["N"] * d["K"],
        6 * d["M"] * d["K"],
        4 * (2 * d["M"] * d["K"] + d["K"] * d["N"] + d["K"] + d["M"] * d["N"]),
    ),
    "matmul_add_rmsnorm": lambda d: (
        2 * d["M"] * d["N"] * d["K"],
        6 * d["M"] * d["N"],
        4 * (d["M"] * d["K"] + d["N"] * d["K"] + 2 * d["M"] * d["N"] + d["N"]),
    ),
    "swiglu": lambda d: (
        6 * d["M"] * d["K"] * d["N"],
        5 * d["M"] * d["N"],
        4 * (2 * d["M"] * d["K"] + 3 * d["K"] * d["N"]),
    ),
    "bmm": lambda d: (
        2 * d["B"] * d["M"] * d["N"] * d["K"],
        0,
        4 * d["B"] * (d["M"] * d["N"] + d["N"] * d["K"] + d["M"] * d["K"]),
    ),
    "bmm_softmax": lambda d: (
        2 * d["B"] * d["M"] * d["N"] * d["K"],
        5 * d["B"] * d["M"] * d["N"],
        4 * d["B"] * (d["M"] * d["N"] + d["N"] * d["K"] + d["M"] * d["K"]),
    ),
    "lora": lambda d: (
        2 * d["M"] * d["N"] * d["K"] + 2 * d["M"] * d["K"] * d["R"] + 2 * d["M"] * d["N"] * d["R"],
        d["M"] * d["N"],
        4 * (d["M"] * d["K"] + d["K"] * d["N"] + d["K"] * d["R"] + d["R"] * d["N"] + d["M"] * d["N"]),
    ),
    "gqa_full": lambda d: (
        4 * d["B"] * d["QH"] * d["N"] ** 2 * d["D"],
        5 * d["B"] * d["QH"] * d["N"] ** 2,
        4 * (2 * d["B"] * d["QH"] * d["N"] * d["D"] + 2 * d["B"] * d["KH"] * d["N"] * d["D"]),
    ),
    "rope_single_freq_apply": lambda d: (
        0,
        3 * d["B"] * d["H"] * d["N"] * d["D"],
        12 * d["B"] * d["H"] * d["N"] * d["D"],
    ),
    "mamba": lambda d: (
        0,
        8 * d["M"] * d["C"] * d["S"],
        4 * (3 * d["C"] * d["M"] + d["C"] * d["S"] + 2 * d["S"] * d["M"]),
    ),
}


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"nkibench_ref_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_index_lists_the_fourteen_published_tasks():
    tasks = load_index()
    assert suite_root() == SUITE
    assert [t.name for t in tasks] == sorted(PUBLISHED_SHAPES)
    assert {t.name: t.shapes["full"] for t in tasks} == PUBLISHED_SHAPES
    assert {t.style for t in tasks} == {"hand-written", "compiler-generated"}
    assert all(t.tolerance == 2e-5 for t in tasks)


@pytest.mark.parametrize("name", sorted(PUBLISHED_SHAPES))
def test_task_files_follow_the_conventions(name):
    entry = find_task(name)
    kernel_text = (SUITE / entry.kernel).read_text()
    tree = ast.parse(kernel_text)
    kernel_defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry.kernel_name]
    assert kernel_defs, f"{entry.kernel} defines no {entry.kernel_name}"
    assert any("jit" in ast.unparse(d) for d in kernel_defs[0].decorator_list)
    assert "# accelopt: reference reference.py" in kernel_text
    assert "import neuronxcc.nki" in kernel_text
    if entry.style == "compiler-generated":
        # the traits of generated code: arange grids with affine offsets, block dims, in-body imports
        assert "nl.arange(" in kernel_text and "nl.par_dim(" in kernel_text
        assert "import numpy as np" in ast.unparse(kernel_defs[0])

    reference = _load(SUITE / entry.reference)
    assert reference.SHAPES == entry.shapes
    for function in ("get_inputs", "forward", "transform_to_nki_inputs", "transform_nki_outputs", "work"):
        assert callable(getattr(reference, function)), function


@pytest.mark.parametrize("name", sorted(PUBLISHED_SHAPES))
def test_work_matches_the_published_formula(name):
    entry = find_task(name)
    reference = _load(SUITE / entry.reference)
    np.random.seed(0)
    inputs = reference.get_inputs("small")
    assert all(a.dtype == np.float32 for a in inputs), "NKIBench tasks are fp32"
    work = reference.work(*inputs)
    expected = WORK_FORMULAS[name](entry.shapes["small"])
    assert (work["matmul_flops"], work["vector_flops"], work["hbm_bytes"]) == pytest.approx(expected)


def test_bench_task_builds_the_reference_task(tmp_path):
    kernel, task = bench_task("silu", "small")
    assert kernel.name == "silu_kernel" and kernel.path == str(SUITE / "silu" / "kernel.py")
    assert task.name == "silu" and task.kind == "reference" and task.size == "small"
    assert task.reference_path == str(SUITE / "silu" / "reference.py")

    # an optimized kernel for the task may rename its function; the only @nki.jit one is taken
    renamed = tmp_path / "silu.py"
    renamed.write_text(kernel.text.replace("def silu_kernel", "def silu_fused"))
    other, _ = bench_task("silu", "small", kernel_path=renamed)
    assert other.name == "silu_fused" and other.text != kernel.text


def test_unknown_task_and_size_are_clear_errors():
    with pytest.raises(NkiBenchError, match=r"no NKIBench task 'softmax'.*adamw"):
        bench_task("softmax")
    with pytest.raises(NkiBenchError, match="size must be one of full, small"):
        bench_task("silu", "medium")


def test_broken_index_names_the_problem(tmp_path, monkeypatch):
    (tmp_path / "index.json").write_text(json.dumps({"tasks": [{"name": "x", "kernel": "x/kernel.py"}]}))
    with pytest.raises(NkiBenchError, match="not a valid NKIBench index"):
        load_index(tmp_path)
    monkeypatch.setenv("ACCELOPT_NKIBENCH", str(tmp_path / "nowhere"))
    with pytest.raises(NkiBenchError, match=r"no index\.json"):
        suite_root()
