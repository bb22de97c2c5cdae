"""The simulator backend end to end: every evaluation status on small kernels, in real workers."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.backends import get_backend
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

from .helpers import process_gone, worker_pid
from .kernels import COMPILER_GENERATED, HAND_WRITTEN, body, kernel, line_of

OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)
BASELINE = kernel(HAND_WRITTEN)
TASK = task_for_kernel(BASELINE)

REFERENCE_MODULE = """
import numpy as np

def get_inputs(size="full"):
    rows = 128 if size == "small" else 256
    return [np.random.randn(rows, 256).astype(np.float32)]

def forward(x):
    return (x * 2).reshape(-1)

def transform_to_nki_inputs(inputs):
    return list(inputs)

def transform_nki_outputs(kernel_out, ref_out):
    return [np.asarray(kernel_out).reshape(-1)], [ref_out]

def work(x):
    return {"vector_flops": float(x.size), "hbm_bytes": 8.0 * x.size}
"""


@pytest.fixture
async def backend():
    backend = SimulatorBackend(max_workers=2)
    yield backend
    await backend.aclose()


async def test_baseline_against_itself_is_ok_with_a_simulated_profile(backend):
    evaluation = await backend.evaluate(BASELINE, TASK, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error == 0.0 and len(evaluation.seeds) == 2
    assert all(s not in (0, 1, 2, 3, 4) for s in evaluation.seeds)  # secret, not the conventional seeds
    profile = evaluation.profile
    assert profile is not None and profile.label == "simulated on trn1"
    assert profile.latency_ms >= profile.peak_latency_ms > 0
    assert profile.hbm_read_bytes == profile.hbm_write_bytes == 128 * 256 * 4
    assert profile.lines and profile.lines[0].text.startswith(("nl.store", "t = nl.load"))


async def test_compiler_generated_candidate_is_checked_against_the_baseline(backend):
    evaluation = await backend.evaluate(kernel(COMPILER_GENERATED), TASK, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error is not None and evaluation.max_error <= TASK.tolerance
    assert evaluation.profile is not None and evaluation.profile.instruction_count > 3


async def test_wrong_values_are_incorrect_with_error_and_seed(backend):
    text = HAND_WRITTEN.replace("nl.multiply(t, 2.0)", "nl.multiply(t, 2.001)")
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect"
    assert evaluation.max_error == pytest.approx(5e-4, rel=1e-3)
    assert "exceeds tolerance" in evaluation.message and f"seed {evaluation.seeds[0]}" in evaluation.message


async def test_wrong_shape_is_incorrect(backend):
    text = body(
        """
out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out, value=nl.load(x[:, 0:128]))
return out
"""
    )
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect" and "shape (128, 128), expected (128, 256)" in evaluation.message


async def test_syntax_error_has_its_line(backend):
    text = HAND_WRITTEN.replace("t = nl.load(x)", "t = nl.load(x")
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "syntax_error" and evaluation.line is not None
    assert evaluation.message.startswith("SyntaxError")


async def test_nki_rule_is_a_compile_error_with_code_and_line(backend):
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
big = nl.ndarray((256, 256), dtype=x.dtype, buffer=nl.sbuf)
nl.store(out, value=nl.load(x))
return out
"""
    )
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "compile_error", evaluation.message
    assert evaluation.error_code == "err_num_partition_exceed_arch_limit"
    assert evaluation.line == line_of(text, "big = ")


async def test_python_exception_is_a_runtime_error_at_the_kernel_line(backend):
    text = HAND_WRITTEN.replace("    t = nl.load(x)\n", "    t = nl.load(x)\n    ratio = 1 / 0\n")
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "runtime_error"
    assert evaluation.message.startswith("ZeroDivisionError") and evaluation.line == line_of(text, "1 / 0")


async def test_hang_is_a_timeout(backend):
    text = HAND_WRITTEN.replace("    t = nl.load(x)\n", "    t = nl.load(x)\n    while True:\n        pass\n")
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS.model_copy(update={"timeout_s": 2}))
    assert evaluation.status == "timeout" and "timed out after 2 s" in evaluation.message


async def test_policy_violation_is_rejected_before_running(backend):
    # The kernel reaches `os` (an import nothing reaches is host code, left out: test_host_code.py).
    text = HAND_WRITTEN.replace("import numpy as np\n", "import numpy as np\nimport os\n").replace(
        "    t = nl.load(x)\n", "    t = nl.load(x)\n    os.getcwd()\n"
    )
    evaluation = await backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "rejected" and "import of 'os'" in evaluation.message and evaluation.line == 2
    assert evaluation.wall_time_s < 0.5  # no worker was started


async def test_profile_only_skips_the_check(backend):
    text = HAND_WRITTEN.replace("nl.multiply(t, 2.0)", "nl.multiply(t, 3.0)")  # wrong, but not checked
    evaluation = await backend.evaluate(
        kernel(text), TASK, OPTIONS.model_copy(update={"check_correctness": False})
    )
    assert evaluation.status == "ok" and evaluation.max_error is None and evaluation.profile is not None


async def test_reference_module_task(backend, tmp_path):
    (tmp_path / "double_ref.py").write_text(REFERENCE_MODULE)
    text = HAND_WRITTEN.replace(
        "# accelopt: inputs x=float32[128,256]", "# accelopt: reference double_ref.py"
    )
    good = kernel(text).model_copy(update={"path": str(tmp_path / "double.py")})
    task = task_for_kernel(good, size="small")
    # Profile-only (what a hover asks for) already uses the task's roofline work.
    quick = await backend.evaluate(good, task, OPTIONS.model_copy(update={"check_correctness": False}))
    assert quick.status == "ok" and quick.profile is not None and quick.profile.work.source == "task"
    evaluation = await backend.evaluate(good, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.profile is not None and evaluation.profile.work.source == "task"
    assert evaluation.profile.work.vector_flops == 128 * 256  # from the module's work()

    bad = good.model_copy(update={"text": text.replace("2.0", "-2.0")})
    evaluation = await backend.evaluate(bad, task, OPTIONS)
    assert evaluation.status == "incorrect" and evaluation.max_error == pytest.approx(2.0)


async def test_identity_transform_is_compared_without_another_worker(backend, tmp_path, monkeypatch):
    identity = REFERENCE_MODULE.replace("(x * 2).reshape(-1)", "x * 2").replace(
        "[np.asarray(kernel_out).reshape(-1)], [ref_out]", "[np.asarray(kernel_out)], [np.asarray(ref_out)]"
    )
    (tmp_path / "double_ref.py").write_text(identity)
    text = HAND_WRITTEN.replace(
        "# accelopt: inputs x=float32[128,256]", "# accelopt: reference double_ref.py"
    )
    good = kernel(text).model_copy(update={"path": str(tmp_path / "double.py")})
    task = task_for_kernel(good, size="small")
    modes = []
    real_prepare = backend.sandbox.prepare
    monkeypatch.setattr(
        backend.sandbox,
        "prepare",
        lambda job, *a, **kw: modes.append(job.mode) or real_prepare(job, *a, **kw),
    )
    assert (await backend.evaluate(good, task, OPTIONS)).status == "ok"
    bad = good.model_copy(update={"text": text.replace("2.0", "2.5")})
    evaluation = await backend.evaluate(bad, task, OPTIONS)
    assert evaluation.status == "incorrect" and evaluation.max_error == pytest.approx(0.25)
    assert modes == ["reference", "kernel", "kernel"]


async def test_broken_reference_module_is_reported_as_the_reference_failing(backend, tmp_path):
    (tmp_path / "double_ref.py").write_text(
        REFERENCE_MODULE.replace("return (x * 2)", "return (x * undefined_name)")
    )
    text = HAND_WRITTEN.replace(
        "# accelopt: inputs x=float32[128,256]", "# accelopt: reference double_ref.py"
    )
    good = kernel(text).model_copy(update={"path": str(tmp_path / "double.py")})
    evaluation = await backend.evaluate(good, task_for_kernel(good, size="small"), OPTIONS)
    assert evaluation.status == "runtime_error" and evaluation.message.startswith(
        "reference module: NameError"
    )


async def test_worker_crash_mid_evaluation_is_a_result(backend):
    text = HAND_WRITTEN.replace("    t = nl.load(x)\n", "    t = nl.load(x)\n    while True:\n        pass\n")
    evaluation_task = asyncio.create_task(
        backend.evaluate(kernel(text), TASK, OPTIONS.model_copy(update={"check_correctness": False}))
    )
    for _ in range(1000):
        if backend.sandbox.live_pids:
            break
        await asyncio.sleep(0.01)
    (pid,) = backend.sandbox.live_pids
    os.kill(worker_pid(pid), signal.SIGSEGV)
    evaluation = await evaluation_task
    assert evaluation.status == "runtime_error" and "segmentation fault" in evaluation.message
    assert process_gone(pid)


async def test_cancelled_evaluation_leaves_no_worker(backend):
    text = HAND_WRITTEN.replace("    t = nl.load(x)\n", "    t = nl.load(x)\n    while True:\n        pass\n")
    evaluation_task = asyncio.create_task(
        backend.evaluate(kernel(text), TASK, OPTIONS.model_copy(update={"check_correctness": False}))
    )
    for _ in range(1000):
        if backend.sandbox.live_pids:
            break
        await asyncio.sleep(0.01)
    (pid,) = backend.sandbox.live_pids
    evaluation_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await evaluation_task
    assert process_gone(pid) and not backend.sandbox.live_pids


def test_get_backend_by_name():
    assert isinstance(get_backend("simulator", max_workers=1), SimulatorBackend)
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("gpu")


def test_seeds_are_secret_per_backend_and_stable_within_one():
    one, two = SimulatorBackend(), SimulatorBackend()
    first = one._seeds(one._cache(TASK), 3)
    assert first == one._seeds(one._cache(TASK), 3)[:3]
    assert first != two._seeds(two._cache(TASK), 3)
    assert np.all(np.array(first) >= 0)
