"""Reference modules in the published NKIBench convention: `get_inputs()` with no argument and
shapes fixed at module level, `transform_nki_outputs` returning the kernel outputs only, scalar
inputs (a Python float, a 0-d array), and a reference whose numpy code warns.

The task files are written here for these tests, in that convention."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import TaskError, task_for_kernel

OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)

# Module-level shapes, a float and a 0-d float32 array among the inputs, two outputs, and a
# forward whose exp overflows (a RuntimeWarning, not a failure).
AFFINE_REFERENCE = '''
import numpy as np

ROWS = 128
COLS = 256


def get_inputs():
    x = np.random.normal(size=(ROWS, COLS)).astype(np.float32)
    scale = 0.5
    shift = np.array(1.5, dtype=np.float32)
    return [x, scale, shift]


def forward(x, scale, shift):
    saturated = np.exp(np.full(4, 1000.0, dtype=np.float32))
    del saturated
    return x * scale + shift, x * 2


def transform_to_nki_inputs(inputs):
    return inputs


def transform_nki_outputs(k_res, ref):
    outs = k_res if isinstance(k_res, tuple) else (k_res,)
    return [np.reshape(o, r.shape) for o, r in zip(outs, ref)]
'''

AFFINE_KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: reference affine_ref.py
@nki.jit
def affine_kernel(x, scale, shift):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    twice = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.add(nl.multiply(t, scale), shift))
    nl.store(twice, value=nl.multiply(t, 2.0))
    return out, twice
'''

# One output, delivered flat by the kernel and reshaped by the published-style transform.
FLAT_REFERENCE = '''
import numpy as np

N = 128 * 64


def get_inputs():
    return [np.random.normal(size=(128, 64)).astype(np.float32)]


def forward(x):
    return np.maximum(x, 0.0).reshape(N)


def transform_to_nki_inputs(inputs):
    return [inputs[0]]


def transform_nki_outputs(k_res, ref):
    if not isinstance(k_res, tuple):
        k_res = (k_res,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    return [np.reshape(v, r.shape) if hasattr(r, "shape") else v for v, r in zip(k_res, refs)]
'''

RELU_KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def relu_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.maximum(nl.load(x), 0.0))
    return out
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def kernel_at(path: Path, name: str) -> KernelSource:
    return KernelSource(text=path.read_text(encoding="utf-8"), name=name, path=str(path))


@pytest.fixture
async def backend():
    backend = SimulatorBackend(max_workers=2)
    yield backend
    await backend.aclose()


async def test_published_convention_with_scalar_inputs_and_a_warning(backend, tmp_path):
    write(tmp_path, "affine_ref.py", AFFINE_REFERENCE)
    kernel = kernel_at(write(tmp_path, "affine.py", AFFINE_KERNEL), "affine_kernel")
    task = task_for_kernel(kernel)
    assert task.kind == "reference" and task.size_argument == "none"

    evaluation = await backend.evaluate(kernel, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error is not None and evaluation.max_error < 1e-6
    assert any("overflow encountered in exp" in note and "line 15" in note for note in evaluation.notes)

    small = await backend.evaluate(kernel, task_for_kernel(kernel, size="small"), OPTIONS)
    assert small.status == "ok" and any("takes no size" in note for note in small.notes)


async def test_scalar_input_is_really_used(backend, tmp_path):
    # The kernel ignores the 0-d `shift`: the comparison must see it.
    write(tmp_path, "affine_ref.py", AFFINE_REFERENCE)
    text = AFFINE_KERNEL.replace("nl.add(nl.multiply(t, scale), shift)", "nl.add(nl.multiply(t, scale), 1.0)")
    kernel = kernel_at(write(tmp_path, "affine.py", text), "affine_kernel")
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "incorrect" and "output 0" in evaluation.message


async def test_published_transform_returning_kernel_outputs_only(backend, tmp_path):
    reference = write(tmp_path, "relu_ref.py", FLAT_REFERENCE)
    kernel = kernel_at(write(tmp_path, "relu.py", RELU_KERNEL), "relu_kernel")
    task = task_for_kernel(kernel, str(reference))
    evaluation = await backend.evaluate(kernel, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message and evaluation.max_error == 0.0

    wrong = kernel.model_copy(update={"text": kernel.text.replace("0.0)", "0.5)")})
    evaluation = await backend.evaluate(wrong, task, OPTIONS)
    assert evaluation.status == "incorrect" and "exceeds tolerance" in evaluation.message


async def test_size_keyword_is_passed_by_name(backend, tmp_path):
    # `size` as a keyword-only parameter: only `get_inputs(size=...)` can call it.
    reference = write(
        tmp_path,
        "relu_ref.py",
        FLAT_REFERENCE.replace("def get_inputs():", "def get_inputs(*, size):")
        .replace("size=(128, 64)", "size=(128, 64) if size == 'small' else (128, 64)"),
    )
    kernel = kernel_at(write(tmp_path, "relu.py", RELU_KERNEL), "relu_kernel")
    task = task_for_kernel(kernel, str(reference), size="small")
    assert task.size_argument == "keyword"
    evaluation = await backend.evaluate(kernel, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message


def test_get_inputs_with_two_required_arguments_is_refused_with_its_line(tmp_path):
    reference = write(tmp_path, "bad_ref.py", FLAT_REFERENCE.replace("def get_inputs():", "def get_inputs(a, b):"))
    kernel = kernel_at(write(tmp_path, "relu.py", RELU_KERNEL), "relu_kernel")
    with pytest.raises(TaskError) as info:
        task_for_kernel(kernel, str(reference))
    assert info.value.line == 6 and "get_inputs must take no argument or only the size" in info.value.message
