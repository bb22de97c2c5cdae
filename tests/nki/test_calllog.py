"""The call log and its trusted re-run (calllog.py, rerun.py): the contract new API functions
plug into, the round trip of every value kind, and clear refusals of logs that cannot be re-run."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from accelopt.nki import calllog, isa, language, runtime
from accelopt.nki.rerun import RerunError, compare_traces, rerun
from accelopt.nki.trace import Trace

PATH = "/virtual/calllog_kernels.py"
KERNELS = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def everything(x):
    """One of each kind of logged value: views (basic and arange grids), masks, loop variables,
    numpy scalars, dtypes, buffers, engines, operators, host constants, +=, loop_reduce."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.shared_constant(np.ones((128, 64), dtype=np.float32))
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        t = nl.load(x[i_p, i * 64 + i_f], mask=(i * 64 + i_f < 100))
        s = nisa.tensor_scalar(t, np.multiply, np.float32(3.0), op1=np.add, operand1=1.0)
        a = nisa.activation(op=nl.exp, data=s, scale=0.5, engine=nisa.scalar_engine)
        acc += nl.maximum(a, nl.load(ones))
        red = nl.loop_reduce(a, op=np.add, loop_indices=[i], dtype=nl.float32)
        tile = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        tile[...] = nl.add(red, acc)
        nl.store(out[i_p, i * 64 + i_f], value=tile, mask=(i * 64 + i_f < 100))
    nl.store(out[:, 100:128], value=nl.load(x[:, 100:128]))
    return out
'''


def run_logged(x: np.ndarray) -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNELS, "everything", PATH)
    return runtime.run_kernel(fn, [x], record_calls=True, source_path=PATH)


def test_every_kernel_facing_function_is_logged_or_declared_pure():
    """The contract for new ops: a kernel-facing function of nl / nisa that can issue hardware
    work is registered (make_replayable or calllog.logged); one that cannot is in PURE."""
    missing = []
    for module in (language, isa):
        pure = calllog.PURE.get(module.__name__, frozenset())
        for name, value in vars(module).items():
            if name.startswith("_") or not callable(value) or inspect.isclass(value) or name in pure:
                continue
            wrapped = getattr(value, "__wrapped__", None)
            if wrapped is None or calllog.api_name(wrapped) not in calllog.API:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"not logged for verification and not declared pure: {missing}"


def test_a_logged_run_reruns_to_the_same_trace_and_outputs_on_other_inputs():
    x = np.random.default_rng(1).standard_normal((128, 128)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((128, 128)).astype(np.float32)
    returned = Trace.from_json(run_logged(x).trace.to_json())  # as it crosses the process boundary
    assert returned.calls_failure is None and returned.calls
    trusted = rerun(returned, [y])
    assert compare_traces(returned, trusted.trace) is None
    direct = runtime.run_kernel(runtime.load_kernel(KERNELS, "everything", PATH), [y]).outputs[0]
    np.testing.assert_array_equal(trusted.outputs[0], direct)
    assert not np.allclose(trusted.outputs[0], run_logged(x).outputs[0])  # it did depend on the input


def test_unencodable_values_are_refused_by_name():
    with pytest.raises(calllog.Unloggable, match="a value of type object"):
        calllog.encode(object())
    with pytest.raises(calllog.Unloggable, match="is not an NKI operator"):
        calllog.encode(lambda a: a)


def test_a_run_that_could_not_be_logged_does_not_rerun():
    x = np.zeros((128, 128), np.float32)
    trace = Trace.from_json(run_logged(x).trace.to_json())
    trace.calls_failure = "line 9: an argument of exp cannot be verified: a value of type Foo"
    with pytest.raises(RerunError, match="a value of type Foo"):
        rerun(trace, [x])


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda calls: calls.insert(0, ["call"]), "does not start with the kernel's inputs"),
        (lambda calls: calls.pop(), "ends without the kernel returning"),
        (lambda calls: calls[1].__setitem__(1, "builtins.eval"), "'builtins.eval' is not an API function"),
        (lambda calls: calls[1][2].__setitem__(0, ["T", 999]), "tensor [999], which the re-run never made"),
        (lambda calls: calls[1][3].__setitem__("dtype", ["D", "object"]), "unknown dtype 'object'"),
    ],
)
def test_malformed_logs_are_refused_with_the_reason(edit, reason):
    x = np.zeros((128, 128), np.float32)
    data = json.loads(run_logged(x).trace.to_json())
    edit(data["calls"])
    with pytest.raises(RerunError) as refused:
        rerun(Trace.from_dict(data), [x])
    assert reason in str(refused.value)


def test_a_view_outside_its_tensor_is_refused_whatever_the_log_says():
    x = np.zeros((128, 128), np.float32)
    data = json.loads(run_logged(x).trace.to_json())
    load = next(e for e in data["calls"] if e[0] == "call" and e[1].endswith(".load"))
    view = load[2][0]
    view[3] = [4000, 0]  # the partition offset of the view, far past the tensor
    with pytest.raises(RerunError, match="err_tensor_access_out_of_bound"):
        rerun(Trace.from_dict(data), [x])


def test_a_log_that_allocates_too_much_is_refused():
    x = np.zeros((128, 128), np.float32)
    trace = Trace.from_json(run_logged(x).trace.to_json())
    with pytest.raises(RerunError, match="more tensor memory than a re-run may use"):
        rerun(trace, [x], max_bytes=1000)


def test_host_data_in_the_log_counts_against_the_budget_too():
    x = np.zeros((128, 128), np.float32)
    trace = Trace.from_json(run_logged(x).trace.to_json())
    # the output (64 KiB) fits; the logged 128 x 64 host constant does not
    with pytest.raises(RerunError, match="holds more host data than a re-run may use"):
        rerun(trace, [x], max_bytes=70_000)


LONG = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def long_sum(x):
    """Many short-lived tiles; each `t` is assigned into a tile and read after the tile's last
    mention (the re-run must keep the tile for it)."""
    out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(x.shape[0] // 128):
        tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.load(x[i * 128 + nl.arange(128)[:, None], nl.arange(128)[None, :]])
        tile[...] = t
        acc += nl.exp(t)
    nl.store(out, value=acc)
    return out
'''


def test_a_rerun_releases_each_tile_after_its_last_use():
    """The re-run's live tensor memory stays a few tiles however long the log: 48 iterations
    make ~150 tiles of 64 KiB (9.6 MB) and re-run within a 1 MiB budget; the storage numpy
    really holds at the peak (tracemalloc) stays small too. Outputs and trace are unchanged."""
    import tracemalloc

    path = "/virtual/long_sum.py"
    fn = runtime.load_kernel(LONG, "long_sum", path)
    x = np.random.default_rng(3).standard_normal((48 * 128, 128)).astype(np.float32) * 0.1
    y = np.random.default_rng(4).standard_normal((48 * 128, 128)).astype(np.float32) * 0.1
    returned = Trace.from_json(runtime.run_kernel(fn, [x], record_calls=True, source_path=path).trace.to_json())
    tracemalloc.start()
    try:
        trusted = rerun(returned, [y], max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert compare_traces(returned, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], runtime.run_kernel(fn, [y]).outputs[0])
    tile = 128 * 128 * 4
    assert peak < 16 * tile, f"the re-run held {peak / tile:.0f} tiles at its peak"


def test_a_tile_declared_with_block_dimensions_is_kept_one_block_at_a_time():
    """The compiler-generated matmul declares per-step tiles as tensors with block dimensions
    (2.5 MiB here; 10.4 GiB at the full NKIBench size) and touches one block per step: the
    re-run holds a block only while the log still uses it, so it fits a budget smaller than one
    of those tensors, with the same outputs and trace."""
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[2] / "nkibench" / "matmul" / "kernel.py")
    fn = runtime.load_kernel(Path(path).read_text(), "matmul_kernel", path)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 1024), dtype=np.float32)
    c, d = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 1024), dtype=np.float32)
    returned = Trace.from_json(runtime.run_kernel(fn, [a, b], record_calls=True, source_path=path).trace.to_json())
    budget = (1 << 20) + 256 * 1024 * 4  # 1 MiB of tiles and the output
    with pytest.raises(RerunError, match="more tensor memory than a re-run may use"):
        rerun(returned, [c, d], max_bytes=budget, fold_min_bytes=1 << 40)  # whole arrays: too big
    trusted = rerun(returned, [c, d], max_bytes=budget, fold_min_bytes=0)
    assert compare_traces(returned, trusted.trace) is None
    np.testing.assert_array_equal(trusted.outputs[0], runtime.run_kernel(fn, [c, d]).outputs[0])
