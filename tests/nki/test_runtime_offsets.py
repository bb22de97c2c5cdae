"""Run-time offsets (legacy nisa.tensor_copy_dynamic_src/dst): ``tile[ix, offsets[0, k] + iy]``
reads the offset from the SBUF tile's data when the instruction runs. The trace names the whole
dimension the offset can reach (it must not depend on the data), and the verified re-run re-reads
the offset from its own inputs. Kernels are ours; numbers are checked against numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.rerun import RerunError, compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/runtime_offsets.py"
KERNELS = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def pick_pairs(table, where):
    out = nl.ndarray((64, 6), dtype=table.dtype, buffer=nl.shared_hbm)
    t = nl.load(table)
    w = nl.load(where)
    picked = nl.ndarray((64, 6), dtype=table.dtype, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:64, 0:2]
    for k in nl.affine_range(3):
        picked[ip, 2 * k + jf] = nisa.tensor_copy_dynamic_src(t[ip, w[0, k] + jf])  # PICK
    nl.store(out, picked)
    return out


@nki.jit
def pick_planes(cube, where):
    out = nl.ndarray((32, 2, 3), dtype=cube.dtype, buffer=nl.shared_hbm)
    c = nl.load(cube)
    w = nl.load(where)
    picked = nl.ndarray((32, 2, 3), dtype=cube.dtype, buffer=nl.sbuf)
    ip, _, kz = nl.mgrid[0:32, 0:1, 0:3]
    for k in nl.affine_range(2):
        picked[ip, k, kz] = nisa.tensor_copy_dynamic_src(c[ip, w[0, k], kz])
    nl.store(out, picked)
    return out


@nki.jit
def place_pair(pair, where):
    out = nl.ndarray((64, 10), dtype=pair.dtype, buffer=nl.shared_hbm)
    p = nl.load(pair)
    w = nl.load(where)
    canvas = nl.zeros((64, 10), dtype=pair.dtype, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:64, 0:2]
    nisa.tensor_copy_dynamic_dst(dst=canvas[ip, w[0, 0] + jf], src=p)
    nl.store(out, canvas)
    return out
"""


def logged(name: str, inputs: list[np.ndarray]) -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNELS, name, PATH)
    return runtime.run_kernel(fn, inputs, record_calls=True, source_path=PATH)


def returned(run: runtime.KernelRun) -> Trace:
    return Trace.from_json(run.trace.to_json())  # as it crosses the sandbox boundary


def _pairs(table: np.ndarray, where: np.ndarray) -> np.ndarray:
    return np.concatenate([table[:, w : w + 2] for w in where[0]], axis=1)


@pytest.fixture
def table() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((64, 20)).astype(np.float32)


def test_the_offset_tile_moves_the_static_grid(table):
    where = np.array([[7, 0, 18]], dtype=np.int32)
    (out,) = logged("pick_pairs", [table, where]).outputs
    np.testing.assert_array_equal(out, _pairs(table, where))


def test_an_offset_tile_alone_indexes_a_middle_dimension():
    cube = np.random.default_rng(4).standard_normal((32, 9, 3)).astype(np.float32)
    where = np.array([[8, 2]], dtype=np.int32)
    (out,) = logged("pick_planes", [cube, where]).outputs
    np.testing.assert_array_equal(out, cube[:, [8, 2], :])


def test_a_dynamic_destination_writes_at_the_offset():
    pair = np.random.default_rng(5).standard_normal((64, 2)).astype(np.float32)
    (out,) = logged("place_pair", [pair, np.array([[6]], dtype=np.int32)]).outputs
    expected = np.zeros((64, 10), np.float32)
    expected[:, 6:8] = pair
    np.testing.assert_array_equal(out, expected)


def test_the_trace_does_not_depend_on_the_offsets_and_the_rerun_rereads_them(table):
    first = np.array([[7, 0, 18]], dtype=np.int32)
    second = np.array([[1, 12, 4]], dtype=np.int32)
    run = logged("pick_pairs", [table, first])
    copies = [r for r in run.trace.records if r.extra.get("api") == "nisa.tensor_copy_dynamic_src"]
    assert len(copies) == 3
    for record in copies:
        # the table tile's whole free dimension, and the offsets tile, are read
        assert any(region.box[1] == (0, 20) for region in record.reads)
        assert len(record.reads) == 2
    trace = returned(run)
    assert trace.calls_failure is None
    trusted = rerun(trace, [table, second])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], _pairs(table, second))


def test_the_dynamic_destination_reruns_too():
    pair = np.ones((64, 2), np.float32)
    run = logged("place_pair", [pair, np.array([[0]], dtype=np.int32)])
    (copy,) = [r for r in run.trace.records if r.extra.get("api") == "nisa.tensor_copy_dynamic_dst"]
    assert [region.box for region in copy.writes] == [((0, 64), (0, 10))]  # every reachable column
    assert ((0, 1), (0, 1)) in [region.box for region in copy.reads]  # and the offset tile
    trace = returned(run)
    trusted = rerun(trace, [pair, np.array([[8]], dtype=np.int32)])
    assert compare_traces(trace, trusted.trace) is None
    assert trusted.outputs[0][:, 8:10].sum() == 128 and trusted.outputs[0][:, :8].sum() == 0


def test_an_offset_past_the_dimension_is_out_of_bounds_at_its_line(table):
    where = np.array([[7, 19, 0]], dtype=np.int32)  # 19 + 1 reaches column 20 of 20
    with pytest.raises(NkiError) as raised:
        logged("pick_pairs", [table, where])
    assert raised.value.code == "err_tensor_access_out_of_bound"
    assert (
        raised.value.line
        == KERNELS.splitlines().index(next(line for line in KERNELS.splitlines() if "# PICK" in line)) + 1
    )


def _dynamic_entry(calls: list[list]) -> list:
    copy = next(e for e in calls if e[0] == "call" and e[1].endswith("tensor_copy_dynamic_src"))
    return copy[2][0]


def test_a_log_that_swaps_the_run_time_offset_for_fixed_columns_fails_verification(table):
    """A sandbox that claims it copied fixed columns (a plain view: no offset tile read) logs
    something the trusted re-run turns into other trace records than the run returned."""
    data = json.loads(returned(logged("pick_pairs", [table, np.array([[7, 0, 18]], np.int32)])).to_json())
    entry = _dynamic_entry(data["calls"])
    assert entry[0] == "J" and entry[1] == "offset"
    forged = entry[2]  # the static part alone, as an ordinary view
    entry.clear()
    entry.extend(forged)
    trusted = rerun(Trace.from_dict(data), [table, np.array([[7, 0, 18]], np.int32)])
    assert compare_traces(Trace.from_dict(data), trusted.trace) is not None


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (1, "anything", "malformed indirect view"),
        (6, 10_000, "an indirect view outside its tensor"),
    ],
)
def test_a_malformed_offset_view_in_the_log_is_refused(table, field, value, reason):
    data = json.loads(returned(logged("pick_pairs", [table, np.array([[7, 0, 18]], np.int32)])).to_json())
    _dynamic_entry(data["calls"])[field] = value
    with pytest.raises(RerunError, match=reason):
        rerun(Trace.from_dict(data), [table, np.array([[7, 0, 18]], np.int32)])
