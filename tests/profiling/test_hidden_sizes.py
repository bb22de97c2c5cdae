"""Hidden shapes: a reference module offering more than one size has every checked candidate
also run at another of its sizes, drawn secretly; a kernel correct only at the task's size fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import hidden_sizes, offered_sizes, task_for_kernel

ROOT = Path(__file__).resolve().parents[2]
SILU = ROOT / "kernels_examples" / "silu.py"
OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)


def test_sizes_are_read_statically_and_bounded():
    example = (ROOT / "kernels_examples" / "silu_ref.py").read_text()
    assert offered_sizes(example) == {"full": 512 * 2048, "small": 256 * 1024}
    assert hidden_sizes(example, "small") == ["full"] and hidden_sizes(example, "full") == ["small"]
    bench = (ROOT / "nkibench" / "silu" / "reference.py").read_text()
    assert hidden_sizes(bench, "small") == []  # "full" is 56x larger: too slow to check numerically
    assert hidden_sizes(bench, "full") == ["small"]
    assert hidden_sizes("SHAPES = make_shapes()\n", "small") == []


@pytest.fixture
def backend():
    simulator = SimulatorBackend(max_workers=1)
    yield simulator
    asyncio.run(simulator.aclose())


def candidate(old: str, new: str) -> KernelSource:
    text = SILU.read_text()
    assert old in text
    return KernelSource(text=text.replace(old, new), name="silu_kernel", path=str(SILU))


def test_a_kernel_hard_coded_to_the_task_size_is_incorrect_at_the_hidden_size(backend):
    fixed = candidate("    rows, cols = x.shape\n", "    rows, cols = 256, 1024  # the task's small size\n")
    fixed = fixed.model_copy(update={"text": fixed.text.replace("nl.ndarray((rows, cols)", "nl.ndarray(x.shape")})
    task = task_for_kernel(fixed, size="small")
    evaluation = asyncio.run(backend.evaluate(fixed, task, OPTIONS))
    assert evaluation.status == "incorrect", evaluation.message
    assert evaluation.message.startswith("at another input size (512x2048), not known to the kernel in advance")
    honest = KernelSource(text=SILU.read_text(), name="silu_kernel", path=str(SILU))
    assert asyncio.run(backend.evaluate(honest, task, OPTIONS)).status == "ok"


def test_a_kernel_that_fails_only_at_the_hidden_size_says_so(backend):
    picky = candidate(
        "    rows, cols = x.shape\n", "    rows, cols = x.shape\n    assert cols == 1024, 'only 1024 columns'\n"
    )
    evaluation = asyncio.run(backend.evaluate(picky, task_for_kernel(picky, size="small"), OPTIONS))
    assert evaluation.status == "runtime_error"
    assert evaluation.message == (
        "at another input size (512x2048), not known to the kernel in advance: AssertionError: only 1024 columns"
    )
