"""Plausibility: a profile faster than the hardware's floor, or moving fewer HBM bytes than its outputs
and its work need, is rejected with the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt.hardware.roofline import peak_latency, physical_floor
from accelopt.hardware.specs import get_hardware
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


def test_beating_the_hardware_is_implausible():
    # the work's HBM bytes take 0.596 us at the roofline's 440.2 GB/s (trn1)
    reason = implausibility(profile(latency_ms=1e-4, percent_of_peak=5.96), one_output_trace())
    assert reason is not None and "below the hardware's floor 0.596 us" in reason and "596% of the" in reason


def test_a_fused_kernel_above_the_conventions_vector_peak_is_plausible():
    """The §6 vector peak counts two engines at the Vector Engine's clock, one operation per
    element; a softmax whose exp carries its bias and running sum (three of its five operations
    in one Scalar pass) runs above it honestly. The simulator put such a candidate at 104% and
    the search lost a 1.6x kernel to a `rejected` verdict; the floor credits fused instructions."""
    work = Work(hbm_bytes=2 * 128 * 256 * 4, vector_flops=5 * 128 * 256 * 64, source="task")
    hw = get_hardware("trn1")
    peak_s, bound = peak_latency(work, hw)
    assert bound == "vector"
    above_peak = Profile(
        backend="simulator",
        hardware="trn1",
        work=work,
        latency_ms=peak_s / 1.04 * 1e3,
        peak_latency_ms=peak_s * 1e3,
        percent_of_peak=1.04,
        hbm_read_bytes=131072,
        hbm_write_bytes=131072,
    )
    assert implausibility(above_peak, one_output_trace()) is None
    # still bounded: four operations per element on every ALU engine at its clock
    floor_s = physical_floor(work, hw)
    assert floor_s < peak_s / 1.04
    too_fast = above_peak.model_copy(update={"latency_ms": floor_s / 2 * 1e3})
    assert implausibility(too_fast, one_output_trace()) is not None


def test_the_floor_is_the_roofline_where_hbm_or_the_tensor_engine_bounds():
    hw = get_hardware("trn1")
    for work in (
        Work(hbm_bytes=1e9, vector_flops=1e6, source="task"),
        Work(matmul_flops=1e12, hbm_bytes=1e6, source="task"),
    ):
        assert physical_floor(work, hw) == pytest.approx(peak_latency(work, hw)[0])


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
