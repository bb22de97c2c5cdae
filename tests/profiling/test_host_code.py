"""Kernel files as people keep them: host code around the kernels, several kernels per file,
undecorated helpers called from a `@nki.jit` wrapper, output-argument kernels.

Only the static slice the kernel reaches runs in the sandbox (`module_slice`); the host code
never does, and the evaluation says what was left out."""

from __future__ import annotations

import textwrap

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.module_slice import slice_module
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import TaskError, task_for_kernel

OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)

# A file with everything a real one has: a docstring, host imports (torch is not even
# installed here: importing it would fail), argparse and os, constants, a shared helper, two
# kernels, a test helper and a `__main__` harness that writes a file.
HOST_FILE = textwrap.dedent(
    '''
    """Scaling kernels and their harness."""
    import argparse
    import os

    import numpy as np
    import torch
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    FACTOR = 2.0
    LOG_DIR = os.path.join(os.getcwd(), "logs")


    def _scaled(tile, factor):
        return nl.multiply(tile, factor)


    # accelopt: inputs x=float32[128,256]
    @nki.jit
    def scale_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=_scaled(nl.load(x), FACTOR))
        return out


    # accelopt: inputs x=float32[128,256]
    @nki.jit
    def negate_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=_scaled(nl.load(x), -1.0))
        return out


    def check_against_torch(x):
        return torch.from_numpy(x) * FACTOR


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--out", default=LOG_DIR)
        args = parser.parse_args()
        with open(os.path.join(args.out, "result.txt"), "w") as f:
            f.write(str(scale_kernel(np.ones((128, 256), np.float32))))
    '''
).lstrip("\n")


def line_of(text: str, fragment: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), start=1) if fragment in ln)


@pytest.fixture
async def backend():
    backend = SimulatorBackend(max_workers=2)
    yield backend
    await backend.aclose()


def test_the_slice_keeps_what_the_kernel_reaches_on_its_own_lines():
    sliced = slice_module(HOST_FILE, "scale_kernel")
    original, kept = HOST_FILE.splitlines(), sliced.text.splitlines()
    assert len(kept) == len(original)
    for fragment in (
        "import neuronxcc.nki.language as nl",
        "FACTOR = 2.0",
        "def _scaled",
        "def scale_kernel",
    ):
        number = line_of(HOST_FILE, fragment)
        assert kept[number - 1] == original[number - 1]
    for fragment in (
        "import argparse",
        "import os",
        "import torch",
        "LOG_DIR",
        "def negate_kernel",
        "def check_against_torch",
        "__main__",
        "parser.parse_args",
    ):
        assert fragment not in sliced.text
    note = sliced.note()
    assert note is not None
    assert f"line {line_of(HOST_FILE, 'import torch')} (`import torch`)" in note
    assert "def check_against_torch" in note and '`if __name__ == "__main__":` block' in note


def test_names_local_to_a_function_do_not_pull_in_host_code():
    text = textwrap.dedent(
        """
        import argparse
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        args = argparse.ArgumentParser().parse_args()

        @nki.jit
        def k(x):
            args = nl.load(x)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=args)
            return out
        """
    )
    sliced = slice_module(text, "k")
    assert "argparse" not in sliced.text and "def k(x):" in sliced.text


async def test_a_file_with_host_code_profiles_each_of_its_kernels(backend, tmp_path):
    path = tmp_path / "scaling.py"
    path.write_text(HOST_FILE, encoding="utf-8")
    for name in ("scale_kernel", "negate_kernel"):
        kernel = KernelSource(text=HOST_FILE, name=name, path=str(path))
        # a candidate (a different text) checked against the file's kernel as the oracle
        variant = HOST_FILE.replace(
            "return nl.multiply(tile, factor)", "return nl.multiply(nl.multiply(tile, 1.0), factor)"
        )
        candidate = kernel.model_copy(update={"text": variant})
        evaluation = await backend.evaluate(candidate, task_for_kernel(kernel), OPTIONS)
        assert evaluation.status == "ok", (name, evaluation.message)
        assert evaluation.notes and "import torch" in evaluation.notes[0]
    assert not (tmp_path / "result.txt").exists() and not (tmp_path / "logs").exists()


async def test_errors_keep_the_line_numbers_of_the_original_file(backend, tmp_path):
    broken = HOST_FILE.replace(
        "nl.store(out, value=_scaled(nl.load(x), FACTOR))", "nl.store(out, value=missing_name)"
    )
    kernel = KernelSource(text=broken, name="scale_kernel", path=str(tmp_path / "scaling.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "runtime_error" and "missing_name" in evaluation.message
    assert evaluation.line == line_of(broken, "value=missing_name")


async def test_a_helper_that_needs_host_modules_is_refused_at_its_line(backend, tmp_path):
    text = HOST_FILE.replace(
        "    return nl.multiply(tile, factor)", "    os.getcwd()\n    return nl.multiply(tile, factor)"
    )
    kernel = KernelSource(text=text, name="scale_kernel", path=str(tmp_path / "scaling.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "rejected" and "import of 'os'" in evaluation.message
    assert evaluation.line == line_of(text, "import os")


OUTPUT_ARGUMENT = textwrap.dedent(
    """
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    def double_into(x, out):
        nl.store(out, value=nl.multiply(nl.load(x), 2.0))


    @nki.jit
    def double_kernel(x, out):
        double_into(x, out)
    """
).lstrip("\n")

OUTPUT_REFERENCE = """
import numpy as np

def get_inputs():
    return [np.random.normal(size=(128, 256)).astype(np.float32)]

def forward(x):
    return x * 2

def transform_to_nki_inputs(inputs):
    return [inputs[0], np.zeros_like(inputs[0])]

def transform_nki_outputs(k_res, ref):
    return [k_res]
"""


async def test_output_argument_kernel_called_through_an_undecorated_helper(backend, tmp_path):
    reference = tmp_path / "double_ref.py"
    reference.write_text(OUTPUT_REFERENCE, encoding="utf-8")
    kernel = KernelSource(text=OUTPUT_ARGUMENT, name="double_kernel", path=str(tmp_path / "double.py"))
    task = task_for_kernel(kernel, str(reference))
    evaluation = await backend.evaluate(kernel, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error == 0.0

    wrong = kernel.model_copy(update={"text": OUTPUT_ARGUMENT.replace("2.0", "3.0")})
    evaluation = await backend.evaluate(wrong, task, OPTIONS)
    assert evaluation.status == "incorrect"


async def test_a_kernel_that_returns_a_result_still_may_not_write_its_inputs(backend, tmp_path):
    text = OUTPUT_ARGUMENT.replace(
        "    double_into(x, out)\n",
        "    double_into(x, out)\n    result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(result, value=nl.load(out))\n    return result\n",
    )
    reference = tmp_path / "double_ref.py"
    reference.write_text(OUTPUT_REFERENCE, encoding="utf-8")
    kernel = KernelSource(text=text, name="double_kernel", path=str(tmp_path / "double.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel, str(reference)), OPTIONS)
    assert evaluation.status == "incorrect" and "writes into its input 'out'" in evaluation.message


# A helper module beside the kernel file, with host code of its own.
TILING = textwrap.dedent(
    """
    import os
    import torch
    import neuronxcc.nki.language as nl

    SCALE = 3.0


    def scaled_copy(src, dst):
        nl.store(dst, value=nl.multiply(nl.load(src), SCALE))


    def broken_copy(src, dst):
        nl.store(dst, value=undefined_helper(src))


    def torch_reference(x):
        return torch.from_numpy(x) * SCALE


    if __name__ == "__main__":
        print(os.getcwd())
    """
).lstrip("\n")

USES_SIBLING = textwrap.dedent(
    """
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import tiling
    from tiling import scaled_copy as copy_scaled


    # accelopt: inputs x=float32[128,256]
    @nki.jit
    def triple_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        copy_scaled(x, out)
        return out


    # accelopt: inputs x=float32[128,256]
    @nki.jit
    def broken_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tiling.broken_copy(x, out)
        return out
    """
).lstrip("\n")

SIBLING_REFERENCE = """
import numpy as np

def get_inputs():
    return [np.random.normal(size=(128, 256)).astype(np.float32)]

def forward(x):
    return x * 3

def transform_to_nki_inputs(inputs):
    return inputs

def transform_nki_outputs(k_res, ref):
    return [k_res]
"""


async def test_helpers_imported_from_a_sibling_module_run_sliced(backend, tmp_path):
    (tmp_path / "tiling.py").write_text(TILING, encoding="utf-8")
    (tmp_path / "triple_ref.py").write_text(SIBLING_REFERENCE, encoding="utf-8")
    path = tmp_path / "triple.py"
    path.write_text(USES_SIBLING, encoding="utf-8")
    kernel = KernelSource(text=USES_SIBLING, name="triple_kernel", path=str(path))
    evaluation = await backend.evaluate(
        kernel, task_for_kernel(kernel, str(tmp_path / "triple_ref.py")), OPTIONS
    )
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error == 0.0
    assert any(note.startswith("in tiling.py:") and "import torch" in note for note in evaluation.notes)


async def test_an_error_inside_a_sibling_helper_names_the_helper_file(backend, tmp_path):
    (tmp_path / "tiling.py").write_text(TILING, encoding="utf-8")
    path = tmp_path / "triple.py"
    path.write_text(USES_SIBLING, encoding="utf-8")
    kernel = KernelSource(text=USES_SIBLING, name="broken_kernel", path=str(path))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "runtime_error" and "undefined_helper" in evaluation.message
    assert f"(at tiling.py:{line_of(TILING, 'undefined_helper(src)')})" in evaluation.message
    assert evaluation.line == line_of(USES_SIBLING, "tiling.broken_copy(x, out)")


async def test_a_candidate_may_not_import_a_file_the_users_kernel_does_not(backend, tmp_path):
    # `secrets_store.py` sits beside the kernel; the user's file never imports it. A candidate
    # (model-written text under the same path) that does is refused, not given its constants.
    (tmp_path / "tiling.py").write_text(TILING, encoding="utf-8")
    (tmp_path / "secrets_store.py").write_text('TOKEN = "do-not-leak"\n', encoding="utf-8")
    path = tmp_path / "triple.py"
    path.write_text(USES_SIBLING, encoding="utf-8")
    candidate = USES_SIBLING.replace(
        "import tiling\n", "import tiling\nfrom secrets_store import TOKEN\n"
    ).replace("    copy_scaled(x, out)\n", "    copy_scaled(x, out)\n    assert TOKEN == 0, TOKEN\n")
    kernel = KernelSource(text=candidate, name="triple_kernel", path=str(path))
    baseline = KernelSource(text=USES_SIBLING, name="triple_kernel", path=str(path))
    evaluation = await backend.evaluate(kernel, task_for_kernel(baseline), OPTIONS)
    assert evaluation.status == "rejected" and "secrets_store" in evaluation.message
    assert "do-not-leak" not in evaluation.message


# A kernel inside a package that imports its helpers the way library code does: relative to its
# own package (`..utils.tiling`), and the helper relative to its own (`.constants`).
PACKAGED_KERNEL = textwrap.dedent(
    """
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    from ..utils.tiling import scaled_add


    # accelopt: inputs x=float32[128,256]
    @nki.jit
    def packaged_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        scaled_add(x, out)
        return out
    """
).lstrip("\n")

PACKAGED_TILING = textwrap.dedent(
    """
    import neuronxcc.nki.language as nl

    from .constants import OFFSET, SCALE


    def scaled_add(src, dst):
        nl.store(dst, value=nl.add(nl.multiply(nl.load(src), SCALE), OFFSET))
    """
).lstrip("\n")


def write_package(root, with_init: bool = True):
    for folder in ("lib", "lib/utils", "lib/kernels"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        if with_init:
            (root / folder / "__init__.py").write_text("", encoding="utf-8")
    (root / "lib/utils/tiling.py").write_text(PACKAGED_TILING, encoding="utf-8")
    (root / "lib/utils/constants.py").write_text("SCALE = 2.0\nOFFSET = 1.0\n", encoding="utf-8")
    (root / "lib/utils/secrets_store.py").write_text('TOKEN = "do-not-leak"\n', encoding="utf-8")
    path = root / "lib/kernels/packaged.py"
    path.write_text(PACKAGED_KERNEL, encoding="utf-8")
    return path


async def test_a_kernel_inside_a_package_imports_its_helpers_relatively(backend, tmp_path):
    path = write_package(tmp_path)
    reference = path.with_name("packaged_ref.py")
    reference.write_text(SIBLING_REFERENCE.replace("return x * 3", "return x * 2 + 1"), encoding="utf-8")
    kernel = KernelSource(text=PACKAGED_KERNEL, name="packaged_kernel", path=str(path))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel, str(reference)), OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error == 0.0  # SCALE and OFFSET came from the helper's own relative import


async def test_relative_imports_stay_inside_the_package_and_the_users_own_imports(backend, tmp_path):
    # Without __init__.py the folders are no package: as in Python, `..utils` names nothing.
    outside = write_package(tmp_path / "plain", with_init=False)
    kernel = KernelSource(text=PACKAGED_KERNEL, name="packaged_kernel", path=str(outside))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "rejected" and "relative import" in evaluation.message, evaluation.message
    # A candidate may not reach a module of the package that the user's file does not import.
    path = write_package(tmp_path / "pkg")
    candidate = PACKAGED_KERNEL.replace(
        "from ..utils.tiling import scaled_add\n",
        "from ..utils.tiling import scaled_add\nfrom ..utils.secrets_store import TOKEN\n",
    ).replace("    scaled_add(x, out)\n", "    scaled_add(x, out)\n    assert TOKEN == 0, TOKEN\n")
    baseline = KernelSource(text=PACKAGED_KERNEL, name="packaged_kernel", path=str(path))
    evaluation = await backend.evaluate(
        KernelSource(text=candidate, name="packaged_kernel", path=str(path)),
        task_for_kernel(baseline),
        OPTIONS,
    )
    assert evaluation.status == "rejected" and "do-not-leak" not in evaluation.message, evaluation.message


SCALAR_ARGUMENTS = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[128,64] eps=0.25 repeat=3 negate=False
@nki.jit
def add_scalars(x, eps, repeat, negate):
    assert isinstance(eps, float) and isinstance(repeat, int) and negate is False
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    for _ in range(repeat):
        tile = nl.add(tile, eps)
    nl.store(out, value=nl.negative(tile) if negate else tile)
    return out
"""


async def test_scalar_arguments_declared_by_value_reach_the_kernel_as_python_values(backend, tmp_path):
    kernel = KernelSource(text=SCALAR_ARGUMENTS, name="add_scalars", path=str(tmp_path / "scalars.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.profile is not None and evaluation.profile.instruction_count >= 5  # 3 adds ran


TUPLE_ARGUMENT = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[4,12] split=(3,4)
@nki.jit
def regroup(x, split):
    assert isinstance(split, tuple) and split == (3, 4)
    rows, cols = split
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    p, a, b = nl.mgrid[0:4, 0:rows, 0:cols]
    moved = nl.ndarray((4, rows * cols), dtype=x.dtype)
    moved[p, b * rows + a] = nl.copy(tile[p, a * cols + b])
    nl.store(out, value=moved)
    return out
"""


async def test_a_tuple_argument_declared_by_value_reaches_the_kernel_as_a_tuple(backend, tmp_path):
    kernel = KernelSource(text=TUPLE_ARGUMENT, name="regroup", path=str(tmp_path / "regroup.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "ok", evaluation.message


TORCH_NEURONX_DECORATED = """
import neuronxcc.nki.language as nl
from torch_neuronx import nki_jit


# accelopt: inputs src=float32[128,256] dst=float32[128,256]
@nki_jit
def doubled_into(src, dst):
    nl.store(dst, value=nl.multiply(nl.load(src), 2.0))
"""


async def test_torch_neuronx_nki_jit_decorated_kernels_run_and_nothing_else_of_torch_neuronx(
    backend, tmp_path
):
    kernel = KernelSource(text=TORCH_NEURONX_DECORATED, name="doubled_into", path=str(tmp_path / "k.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    other = TORCH_NEURONX_DECORATED.replace("import nki_jit", "import nki_jit, trace")
    kernel = KernelSource(text=other, name="doubled_into", path=str(tmp_path / "k2.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status != "ok" and "trace" in evaluation.message and evaluation.line == 3


NO_ARGUMENTS = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def top8_of_noise():
    top = nisa.max8(src=nl.rand((32, 128)))
    out = nl.ndarray([32, 8], dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=top)
    return out
"""


async def test_a_kernel_with_no_parameters_needs_no_declared_inputs(backend, tmp_path):
    kernel = KernelSource(text=NO_ARGUMENTS, name="top8_of_noise", path=str(tmp_path / "noise.py"))
    task = task_for_kernel(kernel)
    assert task.kind == "baseline" and task.inputs == []
    evaluation = await backend.evaluate(kernel, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    with_parameter = NO_ARGUMENTS.replace("def top8_of_noise():", "def top8_of_noise(x):")
    with pytest.raises(TaskError, match="no way to get inputs"):
        task_for_kernel(KernelSource(text=with_parameter, name="top8_of_noise", path=str(tmp_path / "n2.py")))


GUARDED_DEFINITIONS = """
import subprocess

import torch

try:
    import nki
    import nki.isa as nisa
    import nki.language as nl
except ImportError:
    nki = None

PMAX = 128


def cores() -> int:
    return int(subprocess.run(["neuron-ls"], capture_output=True).stdout or 1)


if nki is not None:
    def _double(dst, src):
        nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=2.0)

    # accelopt: inputs x=float32[128,64]
    @nki.jit
    def doubled(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((PMAX, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        _double(t, t)
        nisa.dma_copy(dst=out, src=t)
        return out


_kernel = doubled[cores()] if nki is not None else None
"""


async def test_kernels_defined_under_a_top_level_if_run_and_the_host_code_around_them_does_not(
    backend, tmp_path
):
    sliced = slice_module(GUARDED_DEFINITIONS, "doubled")
    assert "doubled" in sliced.functions and "_double" in sliced.functions
    assert "subprocess.run" not in sliced.text and "import torch" not in sliced.text
    kernel = KernelSource(text=GUARDED_DEFINITIONS, name="doubled", path=str(tmp_path / "guarded.py"))
    evaluation = await backend.evaluate(kernel, task_for_kernel(kernel), OPTIONS)
    assert evaluation.status == "ok", evaluation.message
