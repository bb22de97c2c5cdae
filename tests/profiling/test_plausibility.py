"""Plausibility: a profile faster than the roofline, or moving fewer HBM bytes than its outputs
and its work need, is rejected with the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt.nki.trace import Memory, TensorInfo, Trace
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.plausibility import implausibility, output_bytes
from accelopt.profiling.profile import Profile, Work
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "kernels_examples"


def one_output_trace(rows: int = 128, cols: int = 256) -> Trace:
    trace = Trace("k", "<k>")
    trace.tensors[0] = TensorInfo(0, "x", (rows, cols), "float32", Memory.HBM, 1, is_input=True)
    trace.tensors[1] = TensorInfo(1, "out", (rows, cols), "float32", Memory.HBM, 2, is_output=True)
    return trace


def profile(**fields: float) -> Profile:
    work = Work(hbm_bytes=2 * 128 * 256 * 4, vector_flops=128 * 256, source="task")
    values = {"latency_ms": 1.0, "peak_latency_ms": 0.5, "hbm_read_bytes": 131072, "hbm_write_bytes": 131072}
    values.update(fields)
    return Profile(backend="simulator", hardware="trn1", work=work, **values)


def test_an_honest_profile_is_plausible():
    assert output_bytes(one_output_trace()) == 128 * 256 * 4
    assert implausibility(profile(), one_output_trace()) is None


def test_beating_the_roofline_is_implausible():
    reason = implausibility(profile(latency_ms=0.1, percent_of_peak=5.0), one_output_trace())
    assert reason is not None and "below the roofline bound 500.000 us" in reason and "500% of peak" in reason


def test_writing_less_than_the_outputs_is_implausible():
    reason = implausibility(profile(hbm_write_bytes=4), one_output_trace())
    assert reason == "the kernel writes 4 bytes to HBM but its outputs hold 131072 bytes"


def test_reading_less_than_the_work_needs_is_implausible():
    reason = implausibility(profile(hbm_read_bytes=1000), one_output_trace())
    assert reason == "the kernel reads 1000 bytes from HBM but its work needs at least 131072"


@pytest.fixture
def backend():
    import asyncio

    simulator = SimulatorBackend(max_workers=1)
    yield simulator
    asyncio.run(simulator.aclose())


def test_a_profile_only_run_that_hides_its_work_is_rejected_as_implausible(backend):
    """A profile-only (trace-only) run cannot be re-run numerically; the roofline of the task's
    own work still holds it: deleting all but one trace record is rejected, not 'fast'."""
    path = EXAMPLES / "silu.py"
    text = path.read_text().replace(
        "    return out\n",
        "    match nl:\n        case object(_current=current):\n            del current().trace.records[1:]\n"
        "    return out\n",
    )
    cheat = KernelSource(text=text, name="silu_kernel", path=str(path))
    task = task_for_kernel(cheat, size="small")
    evaluation = backend.evaluate_sync(cheat, task, EvaluationOptions(check_correctness=False)).evaluation
    assert evaluation.status in ("rejected",), evaluation.message
    if not evaluation.message.startswith("sandbox policy:"):
        assert evaluation.message.startswith("implausible profile: ")
    honest = KernelSource(text=path.read_text(), name="silu_kernel", path=str(path))
    fresh = SimulatorBackend(max_workers=1)
    plain = fresh.evaluate_sync(honest, task, EvaluationOptions(check_correctness=False)).evaluation
    assert plain.status == "ok" and not plain.verified and plain.profile is not None
