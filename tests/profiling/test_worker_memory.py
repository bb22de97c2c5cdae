"""Memory at full size: limits sized from the task and the machine, seeds one worker at a time
when they are big, and a clear message with the numbers when a task cannot fit."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.compare import compare_outputs
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel
from accelopt.profiling.worker_memory import GiB, MiB, kernel_plan, out_of_memory_advice, seeds_per_worker

KERNEL = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out
"""

# A reference whose forward asks for 8 TiB: no machine has that, so it fails at once.
GREEDY_REFERENCE = """
import numpy as np

def get_inputs(size="full"):
    return [np.random.normal(size=(128, 64)).astype(np.float32)]

def forward(x):
    huge = np.ones((1 << 40,), dtype=np.float64)
    return x + huge[:1]

def transform_to_nki_inputs(inputs):
    return inputs

def transform_nki_outputs(kernel_out, ref_out):
    return [kernel_out], [ref_out]
"""


def test_big_seeds_run_one_per_worker_and_small_ones_together():
    assert seeds_per_worker(64 * 1024, 5) == 5
    assert seeds_per_worker(512 * MiB, 5) == 1
    assert seeds_per_worker(None, 5) == 5


def test_kernel_limit_grows_with_the_footprint_within_what_is_free():
    small = kernel_plan(4 * GiB, 1 * MiB, 5, available=20 * GiB)
    assert small.limit_bytes == 4 * GiB + 20 * MiB and small.fits
    big = kernel_plan(4 * GiB, 1 * GiB, 1, available=20 * GiB)
    assert big.limit_bytes == 18 * GiB and big.fits  # a big task: its share of what is free
    assert kernel_plan(4 * GiB, 1 * GiB, 1, available=20 * GiB, workers=2).limit_bytes == 9 * GiB
    starved = kernel_plan(4 * GiB, 8 * GiB, 1, available=10 * GiB)
    assert not starved.fits and starved.limit_bytes == 8 * GiB
    text = out_of_memory_advice(starved, seeds=5, size_adjustable=True)
    for fragment in ("8.0 GiB of address space", "one seed's inputs and outputs take 8.0 GiB",
                     "10.0 GiB available", "--size small", "--seeds 1", "--no-check"):
        assert fragment in text


def test_chunked_comparison_matches_the_whole_array_formula():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(3, 1 << 21)).astype(np.float32)  # more than one chunk
    kernel = reference + rng.normal(scale=1e-6, size=reference.shape).astype(np.float32)
    expected = np.linalg.norm((kernel.astype(np.float64) - reference).ravel()) / np.linalg.norm(
        reference.astype(np.float64).ravel()
    )
    verdict = compare_outputs([kernel], [reference], tolerance=1e-3)
    assert verdict.ok and verdict.max_error == pytest.approx(expected, rel=1e-9)
    kernel[2, -1] = np.nan  # in the last chunk
    verdict = compare_outputs([kernel], [reference], tolerance=1e-3)
    assert not verdict.ok and "1 of" in verdict.message and "NaN" in verdict.message


async def test_a_reference_that_cannot_fit_says_how_much_and_the_ways_out(tmp_path):
    reference = tmp_path / "greedy_ref.py"
    reference.write_text(GREEDY_REFERENCE, encoding="utf-8")
    kernel = KernelSource(text=KERNEL, name="copy_kernel", path=str(tmp_path / "copy.py"))
    backend = SimulatorBackend(max_workers=1)
    try:
        evaluation = await backend.evaluate(
            kernel, task_for_kernel(kernel, str(reference)), EvaluationOptions(seeds=3, timeout_s=60)
        )
    finally:
        await backend.aclose()
    assert evaluation.status == "runtime_error"
    message = evaluation.message
    assert "MemoryError" in message and "of address space" in message and "available" in message
    assert "--size small" in message and "--seeds 1" in message and "--no-check" in message


PUBLISHED_COPY_REFERENCE = """
import numpy as np

def get_inputs():
    return [np.random.normal(size=(128, 64)).astype(np.float32)]

def forward(x):
    return x.copy()

def transform_to_nki_inputs(inputs):
    return inputs

def transform_nki_outputs(k_res, ref):
    return [np.reshape(k_res, ref.shape)]
"""


async def test_big_seeds_one_reference_worker_each(tmp_path, monkeypatch):
    # A batch budget of one byte makes every seed "big": the path full-size tasks take. The
    # reference runs one seed per worker (3 checked seeds and the secret verification seed);
    # the kernel's worker takes the input sets one after another, holding one at a time, and
    # gets the timeout once per set (full-size seeds take minutes each).
    reference = tmp_path / "copy_ref.py"
    reference.write_text(PUBLISHED_COPY_REFERENCE, encoding="utf-8")
    kernel = KernelSource(text=KERNEL, name="copy_kernel", path=str(tmp_path / "copy.py"))
    task = task_for_kernel(kernel, str(reference))
    backend = SimulatorBackend(max_workers=1, batch_bytes=1)
    modes: list[str] = []
    timeouts: list[float] = []
    real_prepare = backend.sandbox.prepare

    def prepare(job, *args, **kwargs):
        modes.append(job.mode)
        timeouts.append(kwargs["timeout_s"])
        return real_prepare(job, *args, **kwargs)

    monkeypatch.setattr(backend.sandbox, "prepare", prepare)
    try:
        options = EvaluationOptions(seeds=3, timeout_s=60)
        evaluation = await backend.evaluate(kernel, task, options)
        assert evaluation.status == "ok", evaluation.message
        assert len(evaluation.seeds) == 3 and evaluation.max_error == 0.0
        assert modes == ["reference"] * 4 + ["kernel", "transform"]
        assert timeouts == [60] * 4 + [3 * 60, 60]
        wrong = kernel.model_copy(update={"text": KERNEL.replace("value=nl.load(x)", "value=nl.multiply(nl.load(x), 1.5)")})
        evaluation = await backend.evaluate(wrong, task, options)
        assert evaluation.status == "incorrect" and len(evaluation.seeds) == 3
        assert f"seed {evaluation.seeds[0]}" in evaluation.message
        assert modes[6:] == ["kernel", "transform"]  # the references are cached
    finally:
        await backend.aclose()


BIG_INTERMEDIATE = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[128,64]
@nki.jit
def staged_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    stage = nl.ndarray((2048, nl.par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf)
    stage[0, :, 0:64] = nl.load(x)
    nl.store(out, value=stage[0, :, 0:64])
    return out
"""


async def test_a_kernel_whose_intermediates_outgrow_the_estimate_gets_a_second_try(tmp_path, monkeypatch):
    # Its inputs and outputs are tiny; its 1 GiB staging buffer is not. The first try runs
    # within the (here: shrunk) estimate and runs out; the second has the worker's share of
    # the free memory.
    from accelopt.profiling import simulator, worker_memory

    tight = 1 << 30
    monkeypatch.setattr(
        simulator,
        "kernel_plan",
        lambda configured, footprint, seeds, **kw: worker_memory.MemoryPlan(
            tight, tight, worker_memory.available_bytes(), footprint
        ),
    )
    backend = SimulatorBackend(max_workers=1)
    limits: list[int] = []
    real_prepare = backend.sandbox.prepare
    monkeypatch.setattr(
        backend.sandbox,
        "prepare",
        lambda job, *a, **kw: limits.append(kw.get("memory_bytes")) or real_prepare(job, *a, **kw),
    )
    kernel = KernelSource(text=BIG_INTERMEDIATE, name="staged_copy", path=str(tmp_path / "staged.py"))
    candidate = kernel.model_copy(update={"text": BIG_INTERMEDIATE.replace("0:64] = nl.load(x)", "0:64] = nl.load(x[:, :])")})
    try:
        evaluation = await backend.evaluate(candidate, task_for_kernel(kernel), EvaluationOptions(seeds=1, timeout_s=60))
    finally:
        await backend.aclose()
    assert evaluation.status == "ok", evaluation.message
    assert limits[0] == tight and limits[1] > tight  # the oracle: a first try, then a wider one
