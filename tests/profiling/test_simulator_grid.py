"""The simulator backend, in real sandboxed workers, for what issue 18 adds to a job: the SPMD
grid declared with `# accelopt: grid ...` and the hardware the kernel is emulated for."""

from __future__ import annotations

import pytest

from accelopt.hardware.specs import TRN2
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import TaskError, task_for_kernel

GRID_KERNEL = """\
import nki
import nki.language as nl


# accelopt: grid {grid}
# accelopt: inputs a=float32[256,2048]
@nki.jit
def rows_exp(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = a.shape[0] // nl.num_programs(0)
    i = nl.program_id(0)
    for j in nl.affine_range(a.shape[1] // 512):
        x = nl.load(a[i * rows:(i + 1) * rows, j * 512:(j + 1) * 512])
        nl.store(out[i * rows:(i + 1) * rows, j * 512:(j + 1) * 512], value=nl.exp(x))
    return out
"""

VERSION_KERNEL = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


# accelopt: inputs a=float32[1,1]
@nki.jit
def version(a):
    out = nl.ndarray((1, 1), dtype=np.float32, buffer=nl.shared_hbm)
    value = {value}
    nl.store(out, value=nl.full((1, 1), value, dtype=np.float32))
    return out
"""


def _kernel(text: str, name: str) -> KernelSource:
    return KernelSource(text=text, name=name, path=f"/virtual/{name}.py")


@pytest.fixture
async def backend():
    backend = SimulatorBackend(max_workers=2)
    yield backend
    await backend.aclose()


async def test_a_grid_on_two_physical_cores_is_correct_and_faster_than_on_one(backend):
    two_cores = _kernel(GRID_KERNEL.format(grid="nc(2)"), "rows_exp")
    one_core = _kernel(GRID_KERNEL.format(grid="2, 1").replace("nl.num_programs(0)", "nl.num_programs()"), "rows_exp")
    task = task_for_kernel(two_cores)
    options = EvaluationOptions(seeds=2, timeout_s=60, hardware="trn2")
    fast = await backend.evaluate(two_cores, task, options)
    slow = await backend.evaluate(one_core, task, options)
    assert fast.status == "ok" and slow.status == "ok", (fast.message, slow.message)
    assert fast.profile is not None and slow.profile is not None
    # the work, without the device's fixed kernel start that both pay once (hardware/specs.py)
    start_ms = TRN2.kernel_start_s * 1e3
    assert fast.profile.latency_ms - start_ms < 0.75 * (slow.profile.latency_ms - start_ms)
    assert fast.profile.hbm_read_bytes == slow.profile.hbm_read_bytes == 256 * 2048 * 4
    assert fast.profile.percent_of_peak <= 1.0


async def test_a_candidate_without_a_grid_directive_runs_on_the_tasks_grid(backend):
    original = _kernel(GRID_KERNEL.format(grid="nc(2)"), "rows_exp")
    rewritten = _kernel(GRID_KERNEL.format(grid="nc(2)").replace("# accelopt: grid nc(2)\n", ""), "rows_exp")
    task = task_for_kernel(original)
    assert task.grid == "nc(2)"
    evaluation = await backend.evaluate(rewritten, task, EvaluationOptions(seeds=1, timeout_s=60, hardware="trn2"))
    assert evaluation.status == "ok", evaluation.message


async def test_a_malformed_grid_directive_is_a_compile_error_with_its_line(backend):
    good = _kernel(GRID_KERNEL.format(grid="2, 1"), "rows_exp")
    bad = _kernel(GRID_KERNEL.format(grid="two"), "rows_exp")
    with pytest.raises(TaskError, match="launch grid"):
        task_for_kernel(bad)
    evaluation = await backend.evaluate(bad, task_for_kernel(good), EvaluationOptions(seeds=1, timeout_s=60))
    assert evaluation.status == "compile_error" and evaluation.line == 5
    assert "launch grid" in evaluation.message


async def test_the_evaluated_hardware_is_what_get_nc_version_answers(backend):
    oracle = _kernel(VERSION_KERNEL.format(value="3.0"), "version")
    asks = _kernel(
        VERSION_KERNEL.format(value="3.0 if nisa.get_nc_version() == nisa.nc_version.gen3 else 2.0"), "version"
    )
    task = task_for_kernel(oracle)
    on_trn2 = await backend.evaluate(asks, task, EvaluationOptions(seeds=1, timeout_s=60, hardware="trn2"))
    on_trn1 = await backend.evaluate(asks, task, EvaluationOptions(seeds=1, timeout_s=60, hardware="trn1"))
    assert on_trn2.status == "ok", on_trn2.message
    assert on_trn1.status == "incorrect"
