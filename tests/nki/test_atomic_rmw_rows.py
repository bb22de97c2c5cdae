"""nl.atomic_rmw through tile-indexed rows: partitions naming the same row all land (atomic
updates, not a last-write-wins scatter), a run-time boolean tile can mask rows out, both re-run
from their own data; `nl.int1` (in no NKI reference) fails at its line naming nl.bool_. Kernels
are ours; numbers are checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.rerun import compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/atomic_rows.py"
KERNELS = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def scatter_add(table, rows, updates):
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(table))
    u = nl.load(updates)
    r = nl.load(rows)
    jf = nl.arange(8)[None, :]
    nl.atomic_rmw(out[r, jf], value=u, op=np.add)
    return out


@nki.jit
def scatter_add_except(table, rows, updates, skip):
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(table))
    u = nl.load(updates)
    r = nl.load(rows)
    s = nl.load(skip)
    jf = nl.arange(8)[None, :]
    nl.atomic_rmw(out[r, jf], value=u, op=np.add, mask=nl.not_equal(r, s))
    return out


@nki.jit
def with_int1(table, rows):
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    r = nl.load(rows)
    keep = (r != 3).astype(nl.int1)  # INT1
    nl.store(out, nl.load(table))
    return out
"""


def logged(name: str, inputs: list[np.ndarray]) -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNELS, name, PATH)
    return runtime.run_kernel(fn, inputs, record_calls=True, source_path=PATH)


def _expected(table, rows, updates, keep=None):
    out = table.copy()
    for p, row in enumerate(rows[:, 0]):
        if keep is None or keep[p]:
            out[row] += updates[p]
    return out


@pytest.fixture
def data():
    rng = np.random.default_rng(11)
    table = rng.standard_normal((16, 8)).astype(np.float32)
    updates = rng.standard_normal((32, 8)).astype(np.float32)
    rows = (np.arange(32) % 5).reshape(32, 1).astype(np.int32)  # every row named 6 or 7 times
    return table, rows, updates


def test_repeated_rows_accumulate_every_update(data):
    table, rows, updates = data
    (out,) = logged("scatter_add", [table, rows, updates]).outputs
    np.testing.assert_allclose(out, _expected(table, rows, updates), rtol=1e-6, atol=1e-6)


def test_the_update_reads_its_index_tile_and_reruns_on_other_rows(data):
    table, rows, updates = data
    run = logged("scatter_add", [table, rows, updates])
    (update,) = [r for r in run.trace.records if r.extra.get("api") == "nl.atomic_rmw"]
    assert len(update.reads) == 3  # the value tile, the rows of the table, the index tile
    trace = Trace.from_json(run.trace.to_json())
    other = np.random.default_rng(12).integers(0, 16, size=(32, 1)).astype(np.int32)
    trusted = rerun(trace, [table, other, updates])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_allclose(trusted.outputs[0], _expected(table, other, updates), rtol=1e-6, atol=1e-6)


def test_a_run_time_mask_tile_skips_its_false_partitions_and_reruns(data):
    table, rows, updates = data
    skip = np.full((32, 1), 3, np.int32)
    run = logged("scatter_add_except", [table, rows, updates, skip])
    np.testing.assert_allclose(
        run.outputs[0], _expected(table, rows, updates, rows[:, 0] != 3), rtol=1e-6, atol=1e-6
    )
    trace = Trace.from_json(run.trace.to_json())
    other = np.full((32, 1), 1, np.int32)
    trusted = rerun(trace, [table, rows, updates, other])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_allclose(
        trusted.outputs[0], _expected(table, rows, updates, rows[:, 0] != 1), rtol=1e-6, atol=1e-6
    )


def test_nl_int1_is_not_an_nki_dtype_and_says_what_is(data):
    table, rows, _ = data
    with pytest.raises(NkiError) as raised:
        logged("with_int1", [table, rows])
    assert raised.value.code == "err_unknown_api"
    assert "nl.bool_" in str(raised.value)
    assert raised.value.line == next(n for n, line in enumerate(KERNELS.splitlines(), 1) if "# INT1" in line)


SENTINELS = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def scatter_add_valid(table, rows, updates):
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(table))
    u = nl.load(updates)
    r = nl.load(rows)
    jf = nl.arange(8)[None, :]
    nl.atomic_rmw(out[r, jf], value=u, op=np.add, mask=(r != 9999))  # UPDATE
    return out
"""


def test_sentinel_rows_masked_out_at_run_time_are_never_touched(data):
    """Padding slots name an impossible row (a sentinel) and a run-time mask drops them, as in
    the SDK's atomic_rmw example; an unmasked sentinel is still out of bounds at its line."""
    table, rows, updates = data
    padded = rows.copy()
    padded[::4] = 9999
    fn = runtime.load_kernel(SENTINELS, "scatter_add_valid", PATH)
    run = runtime.run_kernel(fn, [table, padded, updates], record_calls=True, source_path=PATH)
    valid = padded[:, 0] != 9999
    np.testing.assert_allclose(
        run.outputs[0],
        _expected(table, np.where(padded < 16, padded, 0), updates, valid),
        rtol=1e-6,
        atol=1e-6,
    )
    trace = Trace.from_json(run.trace.to_json())
    assert compare_traces(trace, rerun(trace, [table, rows, updates]).trace) is None
    bad = rows.copy()
    bad[5] = 16  # not the sentinel: the mask keeps it, and row 16 of 16 is outside the table
    with pytest.raises(NkiError) as raised:
        runtime.run_kernel(fn, [table, bad, updates])
    assert raised.value.code == "err_tensor_access_out_of_bound"
    assert raised.value.line == next(
        n for n, line in enumerate(SENTINELS.splitlines(), 1) if "# UPDATE" in line
    )
