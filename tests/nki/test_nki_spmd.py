"""SPMD launch grids: every program instance runs into the shared outputs, and the timing lays
the instances over the physical cores of the logical core (accelopt.nki.spmd, profiling.grid)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.trace import Trace
from accelopt.profiling.metrics import profile_trace

LEGACY = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""

CURRENT = """\
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa
"""

# Each instance (i, j) takes one block of rows and columns: exp in the legacy style.
LEGACY_BLOCKS = LEGACY + """
@nki.jit
def blocks(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = a.shape[0] // nl.num_programs(0)
    cols = a.shape[1] // nl.num_programs(1)
    i = nl.program_id(0)
    j = nl.program_id(1)
    x = nl.load(a[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols])
    nl.store(out[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols], value=nl.exp(x))
    return out
"""

# The same work in NKI 0.7 style (destination passing), one row block per instance.
CURRENT_ROWS = CURRENT + """
@nki.jit
def rows_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n = a.shape[0] // nl.num_programs()
    i = nl.program_id(0)
    for j in nl.affine_range(a.shape[1] // 512):
        x = nl.ndarray((n, 512), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((n, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * n:(i + 1) * n, j * 512:(j + 1) * 512])
        nisa.tensor_tensor(dst=y, data1=x, data2=x, op=nl.multiply)
        nisa.dma_copy(dst=out[i * n:(i + 1) * n, j * 512:(j + 1) * 512], src=y)
    return out
"""

SHAPE_PROBE = LEGACY + """
@nki.jit
def probe(a):
    out = nl.ndarray((1, 4), dtype=np.float32, buffer=nl.shared_hbm)
    t = nl.full((1, 4), float(nl.program_ndim() * 100 + nl.num_programs() * 10 + nl.program_id(0)),
                dtype=np.float32)
    nl.store(out, value=t)
    return out
"""


def _load(tmp_path: Path, text: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return runtime.load_kernel(path.read_text(), name, str(path))


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)


@pytest.mark.parametrize("grid", [(2, 2), (4, 1), (2, 4)])
def test_every_instance_writes_its_block_of_the_shared_output(tmp_path, x, grid):
    fn = _load(tmp_path, LEGACY_BLOCKS, "blocks")
    run = runtime.run_kernel(fn, [x], grid=grid)
    np.testing.assert_allclose(run.outputs[0], np.exp(x), rtol=1e-6)
    count = grid[0] * grid[1]
    assert [p.ids for p in run.trace.programs] == [(i, j) for i in range(grid[0]) for j in range(grid[1])]
    assert len({r.writes[0].tensor_id for r in run.trace.records if r.opcode == "dma_store"}) == 1
    assert len(run.trace.records) == 3 * count


def test_launch_syntax_and_current_style(tmp_path, x):
    runtime.install_aliases()
    import nki.language as nl

    fn = _load(tmp_path, CURRENT_ROWS, "rows_kernel")
    kernel = runtime.Kernel(fn, platform_target="trn2")  # as @nki.jit(platform_target="trn2")
    np.testing.assert_allclose(kernel[2](x, x), x * x, rtol=1e-6)
    np.testing.assert_allclose(kernel[nl.nc(2)](x, x), x * x, rtol=1e-6)
    np.testing.assert_allclose(kernel[nl.spmd_dim(nl.nc(2), 2)](x, x), x * x, rtol=1e-6)


def test_program_ndim_and_num_programs_follow_the_grid(tmp_path):
    fn = _load(tmp_path, SHAPE_PROBE, "probe")
    a = np.zeros((1, 4), np.float32)
    assert runtime.run_kernel(fn, [a]).outputs[0][0, 0] == 0 * 100 + 1 * 10 + 0
    assert runtime.run_kernel(fn, [a], grid=(1, 1)).outputs[0][0, 0] == 2 * 100 + 1 * 10 + 0
    # the last instance writes last: its id is what the single shared output holds
    assert runtime.run_kernel(fn, [a], grid=(3,)).outputs[0][0, 0] == 1 * 100 + 3 * 10 + 2


def test_cores_follow_the_nc_annotation_and_the_lnc_of_the_target(tmp_path, x):
    runtime.install_aliases()
    import nki.language as nl

    fn = _load(tmp_path, LEGACY_BLOCKS, "blocks")

    def cores(grid, target="trn2"):
        return [p.core for p in runtime.run_kernel(fn, [x], grid=grid, target=target, numerics=False).trace.programs]

    assert cores((nl.nc(2), 2)) == [0, 0, 1, 1]  # the nl.nc reference page's example
    assert cores((nl.spmd_dim(nl.nc(2), 2), 1)) == [0, 0, 1, 1]  # the spmd_dim page's example
    assert cores((nl.spmd_dim(2, nl.nc(2)), 1)) == [0, 1, 0, 1]
    assert cores((2, 1)) == [0, 0]  # unannotated 2-D grid: one core
    with pytest.raises(NkiError, match="err_invalid_launch_grid"):
        cores((nl.nc(2), 1), target="trn1")  # Trainium1 has no LNC=2


def test_grid_time_is_the_sum_on_one_core_and_the_max_over_cores(tmp_path, x):
    runtime.install_aliases()
    import nki.language as nl

    fn = _load(tmp_path, LEGACY_BLOCKS, "blocks")

    def timed(grid):
        trace = runtime.run_kernel(fn, [x], grid=grid, target="trn2", numerics=False).trace
        return Trace.from_json(trace.to_json())  # as the worker hands it to the timing model

    one_core = timed((2, 2))
    two_cores = timed((nl.nc(2), 2))
    p1, t1 = profile_trace(one_core, "trn2")
    p2, t2 = profile_trace(two_cores, "trn2")
    single = runtime.run_kernel(fn, [x], grid=(2, 2), target="trn2", numerics=False).trace
    span = single.programs[0]
    from accelopt.hardware.specs import get_hardware
    from accelopt.profiling.grid import instance_trace
    from accelopt.profiling.timeline import ModelOptions, schedule_instance

    alone = schedule_instance(instance_trace(single, span.first, span.end), get_hardware("trn2"), ModelOptions())
    assert t1.cores == 1 and t2.cores == 2
    assert p1.label == "simulated on trn2" and p2.label == "simulated on trn2, 2 physical cores"
    start = get_hardware("trn2").kernel_start_s  # the device's kernel start: once per launch
    assert t1.kernel_start_s == t2.kernel_start_s == start
    assert t1.total_time - start == pytest.approx(4 * alone.total_time, rel=1e-9)  # four in a row
    assert t2.total_time - start == pytest.approx(2 * alone.total_time, rel=1e-9)  # two per core, in parallel
    assert p2.latency_ms < p1.latency_ms
    assert p1.hbm_read_bytes == p2.hbm_read_bytes == x.nbytes
    assert 0 < p2.percent_of_peak <= 1 and 0 < p2.dma_active_time_percent <= 1


def test_instances_allocating_different_outputs_are_refused(tmp_path, x):
    text = LEGACY + """
@nki.jit
def uneven(a):
    if nl.program_id(0) == 0:
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    else:
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, 0:8], value=nl.load(a[0:128, 0:8]))
    return out
"""
    fn = _load(tmp_path, text, "uneven")
    with pytest.raises(NkiError, match="err_spmd_outputs_differ") as info:
        runtime.run_kernel(fn, [x], grid=(2,))
    assert info.value.path.endswith("uneven.py") and info.value.line > 0


LOOPED = LEGACY + """
@nki.jit
def looped(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n = a.shape[0] // nl.num_programs(0)
    i = nl.program_id(0)
    for j in nl.affine_range(a.shape[1] // 64):
        x = nl.load(a[i * n:(i + 1) * n, j * 64:(j + 1) * 64])
        y = nl.multiply(x, 2.0)
        nl.store(out[i * n:(i + 1) * n, j * 64:(j + 1) * 64], value=nl.add(y, x))
    return out
"""


def test_trace_only_grid_runs_trace_what_numeric_runs_do(tmp_path, x):
    """Replay and fast-forward (trace-only paths) stay exact across program instances."""
    runtime.install_aliases()
    import nki.language as nl

    fn = _load(tmp_path, LOOPED, "looped")
    grid = (nl.nc(2),)
    numeric = runtime.run_kernel(fn, [x], grid=grid, target="trn2")
    np.testing.assert_allclose(numeric.outputs[0], 3 * x, rtol=1e-6)
    first = runtime.run_kernel(fn, [x], grid=grid, target="trn2", numerics=False).trace
    again = runtime.run_kernel(fn, [x], grid=grid, target="trn2", numerics=False).trace

    def rows(trace: Trace) -> dict:
        data = trace.to_dict()
        data.pop("numerics")
        return data

    assert rows(first) == rows(numeric.trace) == rows(again)
    assert [p.core for p in first.programs] == [0, 1] and len(first.records) == 2 * 16 * 4
