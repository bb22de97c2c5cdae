"""NkiTensor.indirect (tensor indirection, Trainium3): element k of partition p is column
``offsets_g[k]`` of p's row, where ``offsets_g`` is the index tile's rows of p's 16-partition
group read partition-first. The trace names every column the offsets can reach; the verified
re-run re-reads the index tile. Kernels are ours; numbers are checked against numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.rerun import RerunError, compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/tensor_indirection.py"
KERNELS = """
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def gather_columns(data, index):
    out = nl.ndarray((32, 24), dtype=data.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=data)
    i = nl.ndarray(index.shape, dtype=index.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=index)
    r = nl.ndarray((32, 24), dtype=data.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(r, d[:, 8:40].indirect(i, num_elem=24))  # GATHER
    nisa.dma_copy(dst=out, src=r)
    return out
"""


def logged(inputs: list[np.ndarray], target: str = "trn3") -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNELS, "gather_columns", PATH)
    return runtime.run_kernel(fn, inputs, record_calls=True, source_path=PATH, target=target)


def _expected(data: np.ndarray, index: np.ndarray, count: int) -> np.ndarray:
    window = data[:, 8:40]  # the view the kernel indexes: offsets count from its first column
    out = np.empty((data.shape[0], count), data.dtype)
    for g in range(0, data.shape[0], 16):
        offsets = index[g : g + 16].T.reshape(-1)[:count]  # partition-first within the group
        out[g : g + 16] = window[g : g + 16][:, offsets]
    return out


@pytest.fixture
def data() -> np.ndarray:
    return np.random.default_rng(8).standard_normal((32, 48)).astype(np.float32)


def _index(seed: int) -> np.ndarray:
    # different offsets in the two groups, so reading another group's rows would show
    return np.random.default_rng(seed).integers(0, 32, size=(32, 2)).astype(np.uint16)


def test_each_group_gathers_its_own_offsets_partition_first(data):
    index = _index(1)
    (out,) = logged([data, index]).outputs
    np.testing.assert_array_equal(out, _expected(data, index, 24))


def test_the_rerun_rereads_the_index_and_reproduces_the_trace(data):
    run = logged([data, _index(1)])
    (copy,) = [r for r in run.trace.records if r.opcode == "tensor_copy"]
    # the viewed window's 32 columns, whatever the offsets, and the index tile
    assert [region.box for region in copy.reads] == [((0, 32), (8, 40)), ((0, 32), (0, 2))]
    trace = Trace.from_json(run.trace.to_json())
    assert trace.calls_failure is None
    other = _index(2)
    trusted = rerun(trace, [data, other])
    assert compare_traces(trace, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], _expected(data, other, 24))


def test_an_offset_past_the_viewed_columns_is_out_of_bounds(data):
    index = _index(1)
    index[3, 1] = 32  # column 40 of the tensor: outside the [8, 40) view
    with pytest.raises(NkiError) as raised:
        logged([data, index])
    assert raised.value.code == "err_tensor_access_out_of_bound"
    assert raised.value.line == next(
        n for n, line in enumerate(KERNELS.splitlines(), 1) if "# GATHER" in line
    )


def test_tensor_indirection_needs_trainium3(data):
    with pytest.raises(NkiError) as raised:
        logged([data, _index(1)], target="trn2")
    assert raised.value.code == "err_unsupported_on_target"


def test_a_log_that_widens_the_reach_past_the_tensor_is_refused(data):
    data_json = json.loads(Trace.from_json(logged([data, _index(1)]).trace.to_json()).to_json())
    copy = next(e for e in data_json["calls"] if e[0] == "call" and e[1].endswith("tensor_copy"))
    view = next(arg for arg in [*copy[2], *copy[3].values()] if isinstance(arg, list) and arg[0] == "J")
    assert view[1] == "groups"
    view[6] = 41  # 8 + 41 columns: past the 48-column tensor
    with pytest.raises(RerunError, match="an indirect view outside its tensor"):
        rerun(Trace.from_dict(data_json), [data, _index(1)])
