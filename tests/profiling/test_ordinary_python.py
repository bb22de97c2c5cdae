"""Ordinary Python that NKI 0.7 kernels use at trace time runs through the whole sandbox (static
check, runtime guard, OS isolation) and gives the right answer: the guard is a first filter,
not a wall against classes, dataclasses or generators."""

from __future__ import annotations

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

from .kernels import HAND_WRITTEN, NKI_07_STYLE, kernel

TASK = task_for_kernel(kernel(HAND_WRITTEN))


@pytest.fixture
async def backend():
    backend = SimulatorBackend(max_workers=1)
    yield backend
    await backend.aclose()


async def test_a_kernel_with_classes_dataclasses_and_generators_is_correct(backend):
    evaluation = await backend.evaluate(kernel(NKI_07_STYLE), TASK, EvaluationOptions(seeds=2))
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error is not None and evaluation.max_error < 1e-6
