"""Trace-only replay (accelopt.nki.fast.replay): a repeated kernel statement replays the first call's
effects. Numeric runs never replay, so a trace-only run must record exactly what the numeric run
records, raise the same errors at the same lines, and actually replay."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelopt.nki import instructions, runtime, tensor
from accelopt.nki.errors import NkiError
from accelopt.nki.fast import fastforward, replay
from accelopt.nki.trace import Trace

EXAMPLES = Path(__file__).resolve().parents[2] / "kernels_examples"
# name -> kernel function, reference SHAPES entry with a few loop iterations per statement
EXAMPLE_CASES = {
    "silu": ("silu_kernel", (384, 1536)),
    "adamw": ("adamw_kernel", (200, 1024)),  # a masked 72-row tail block
    "rope": ("rope_kernel", (3, 1024)),
    "mamba": ("mamba_scan_kernel", (256, 1024, 3)),
    "rmsnorm_matmul": ("rmsnorm_matmul_kernel", (384, 256, 1024)),
    "softmax": ("softmax_kernel", (256, 1536)),
    "matmul": ("matmul_kernel", (256, 384, 1024)),
}


def _trace_rows(trace: Trace) -> dict:
    data = trace.to_dict()
    data.pop("numerics")
    return data


def _example(name: str):
    kernel_name, shape = EXAMPLE_CASES[name]
    spec = importlib.util.spec_from_file_location(f"replay_ref_{name}", EXAMPLES / f"{name}_ref.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    reference.SHAPES["replay"] = shape
    np.random.seed(0)
    inputs = reference.transform_to_nki_inputs(reference.get_inputs("replay"))
    path = EXAMPLES / f"{name}.py"
    runtime.install_aliases()
    fn = runtime.load_kernel(path.read_text(), kernel_name, str(path))
    return fn, inputs, kernel_name, str(path)


@pytest.mark.parametrize("name", sorted(EXAMPLE_CASES))
def test_trace_only_run_records_exactly_what_the_numeric_run_records(name):
    fn, inputs, kernel_name, path = _example(name)
    numeric = runtime.run_kernel(fn, inputs, numerics=True, kernel_name=kernel_name, source_path=path)
    trace_only = runtime.run_kernel(fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path)
    again = runtime.run_kernel(fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path)
    assert _trace_rows(trace_only.trace) == _trace_rows(numeric.trace)
    assert again.trace.to_json() == trace_only.trace.to_json()


@pytest.mark.parametrize("name", ["adamw", "matmul"])
def test_with_the_fast_paths_off_the_semantic_core_alone_records_the_same_trace(name, monkeypatch):
    fn, inputs, kernel_name, path = _example(name)

    def run(fast_paths: bool) -> runtime.KernelRun:
        return runtime.run_kernel(
            fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path, fast_paths=fast_paths
        )

    fast = run(True)
    run(True)  # the replays and index forms are learned: a run with them on would use them now

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a fast path ran with the fast paths off")

    class Refusing(dict[Any, Any]):
        get = staticmethod(refused)

    monkeypatch.setattr(replay, "_record", refused)
    monkeypatch.setattr(replay, "_BY_CODE", Refusing())  # the compiled replays of the runs above
    monkeypatch.setattr(fastforward, "iterate", refused)
    monkeypatch.setattr(tensor, "learn", refused)
    monkeypatch.setattr(tensor, "SITE_FORMS", Refusing())  # the index forms learned above
    monkeypatch.setattr(instructions, "retarget_traced", refused)
    assert run(False).trace.to_json() == fast.trace.to_json()


def test_repeated_statements_are_replayed_not_rerun(monkeypatch):
    fn, inputs, kernel_name, path = _example("silu")
    recorded: list[str] = []
    original = replay._record

    def counting(ctx, fn, *rest):
        recorded.append(fn.__name__)
        return original(ctx, fn, *rest)

    monkeypatch.setattr(replay, "_record", counting)
    run = runtime.run_kernel(fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path)
    # 3 x 3 tiles, 4 instructions each: every statement is logged once and replayed 8 times
    assert len(run.trace.records) == 36
    assert sorted(recorded) == ["load", "multiply", "ndarray", "sigmoid", "store"]


CONFLICT_KERNEL = """
def conflict_kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        tile = nl.load(x[0:128, 0:64])
        nl.store(out[0:128, 0:64], value=tile)  # same elements every iteration
    return out
"""

SCOPE_KERNEL = """
def double(t):
    return nl.multiply(t, 2.0)  # one call site, reached in and after the loop

def scope_kernel(x):
    out = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        tile = nl.load(x[i * 128 : (i + 1) * 128, 0:64])
        nl.store(out[i * 128 : (i + 1) * 128, 0:64], value=nl.exp(tile))
        nl.store(out[i * 128 : (i + 1) * 128, 0:64], value=double(tile))
    double(tile)  # the same call as in the loop (a read tile), but the tile's loop has ended
    return out
"""


@pytest.mark.parametrize(
    ("body", "name", "code", "marker"),
    [
        (CONFLICT_KERNEL, "conflict_kernel", "err_unexpected_output_dependencies", "same elements"),
        (SCOPE_KERNEL, "scope_kernel", "err_local_variable_used_out_of_scope", "one call site"),
    ],
)
def test_replayed_calls_raise_the_errors_of_a_normal_run(kernel, monkeypatch, body, name, code, marker):
    k = kernel(body)
    x = np.random.rand(256, 64).astype(np.float32)
    errors = []
    for numerics in (True, False):
        with pytest.raises(NkiError) as caught:
            k.run(name, x, numerics=numerics)
        errors.append((caught.value.code, caught.value.path, caught.value.line))
    assert errors[0] == errors[1] == (code, str(k.path), k.line_of(marker))
    # and in the trace-only run the failing call was a replay of the statement's first call
    monkeypatch.setattr(replay, "_record", _record_once("store" if name == "conflict_kernel" else "multiply"))
    with pytest.raises(NkiError) as caught:
        k.run(name, x, numerics=False)
    assert caught.value.code == code


def _record_once(api: str):
    """A replay._record that fails the test if `api` is recorded a second time."""
    original = replay._record
    seen: list[str] = []

    def record(ctx, fn, *rest):
        assert fn.__name__ not in seen or fn.__name__ != api, f"{api} recorded again"
        seen.append(fn.__name__)
        return original(ctx, fn, *rest)

    return record


SHAPES_KERNEL = """
def shapes_kernel(x):
    out = nl.ndarray((256, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for w in nl.static_range(3):  # one statement, three tile widths, twice each
            cols = 128 * (w + 1)
            tile = nl.load(x[i * 128 : (i + 1) * 128, 0:cols])
            scaled = nl.multiply(tile, 0.5 * (w + 1))
            nl.store(out[i * 128 : (i + 1) * 128, 0:cols], value=scaled)
        rows = nl.arange(128)[:, None]
        live = i * 128 + rows < 200  # keeps every row of the first block, 72 of the second
        last = nl.load(x[i * 128 + rows, 384 + nl.arange(128)[None, :]], mask=live)
        nl.store(out[i * 128 + rows, 384 + nl.arange(128)[None, :]], value=last, mask=live)
    return out
"""


def test_a_statement_meeting_several_structures_replays_each_exactly(kernel):
    k = kernel(SHAPES_KERNEL)
    x = np.random.rand(256, 512).astype(np.float32)
    numeric = k.run("shapes_kernel", x, numerics=True)
    trace_only = k.run("shapes_kernel", x, numerics=False)
    assert _trace_rows(trace_only.trace) == _trace_rows(numeric.trace)
    # the masked tail: rows 200..255 of the second block are neither loaded nor stored
    stores = [r for r in trace_only.trace.records if r.opcode == "dma_store"]
    assert stores[-1].writes[0].box == ((128, 200), (384, 512))


SHARED_SITE_KERNEL = """
def shared_site_kernel(x):
    out = nl.ndarray((512, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        op = nl.exp if i % 2 == 0 else nl.negative
        tile = nl.load(x[i * 128 + nl.arange(128)[:, None], nl.arange(64)[None, :]])
        nl.store(out[i * 128 : (i + 1) * 128, 0:64], value=op(tile))  # two APIs, one call site
    return out
"""


def test_two_apis_called_from_one_call_site_replay_separately(kernel):
    k = kernel(SHARED_SITE_KERNEL)
    x = np.random.rand(512, 64).astype(np.float32)
    numeric = k.run("shared_site_kernel", x, numerics=True)
    for _ in range(2):  # the second run replays from its first call on
        trace_only = k.run("shared_site_kernel", x, numerics=False)
        assert _trace_rows(trace_only.trace) == _trace_rows(numeric.trace)
    ops = [r.extra.get("op") or r.opcode for r in trace_only.trace.records if r.opcode != "dma_load"]
    assert [op for op in ops if op != "dma_store"] == ["exp", "negative", "exp", "negative"]


def test_sites_generating_the_same_code_compile_it_once(monkeypatch):
    """adamw loads four tensors of one shape with one mask: four sites, one replay text."""
    import builtins

    from accelopt.nki.fast import codecache

    monkeypatch.setattr(codecache, "_CODE", {})
    compiles: list[str] = []
    real = builtins.compile

    def counting(text, filename, *rest, **kwargs):
        if filename == "<accelopt.nki.replay>":
            compiles.append(text)
        return real(text, filename, *rest, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    fn, inputs, kernel_name, path = _example("adamw")
    numeric = runtime.run_kernel(fn, inputs, numerics=True, kernel_name=kernel_name, source_path=path)
    run = runtime.run_kernel(fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path)
    assert _trace_rows(run.trace) == _trace_rows(numeric.trace)
    assert len(compiles) == len(set(compiles))  # every text compiled once
    loads = [t for t in compiles if "'dma_load'" in t]
    assert len(loads) == 1  # ... and the four loads share one


def test_functions_defined_from_one_text_keep_their_own_globals_and_code():
    """One compile serves every site with the same text, but each function keeps a code object
    of its own (CPython specialises a code object for the globals it runs with)."""
    from accelopt.nki.fast.codecache import define

    text = "def f(x):\n    return x + K"
    f1 = define(text, "<test>", {"K": 1}, "f")
    f2 = define(text, "<test>", {"K": 10}, "f")
    for _ in range(50):  # enough calls to specialise
        assert (f1(1), f2(1)) == (2, 11)
    assert f1.__code__ is not f2.__code__


def test_trace_only_runs_leave_no_cyclic_garbage_and_restore_the_collector():
    """Trace-only runs pause the cyclic collector (runtime.run_kernel), which is only safe if
    they make no reference cycles: what they leave to collect must not grow with the run."""
    import gc

    fn, _, kernel_name, path = _example("softmax")  # loop_reduce: a path that is not replayed
    garbage = []
    for rows in (256, 1024):
        x = np.random.rand(rows, 1536).astype(np.float32)
        gc.collect()
        assert gc.isenabled()
        run = runtime.run_kernel(fn, [x], numerics=False, kernel_name=kernel_name, source_path=path)
        assert gc.isenabled()
        assert len(run.trace.records) > 8 * rows // 128
        del run
        garbage.append(gc.collect())
    assert garbage[1] <= garbage[0] + 20


def test_a_trace_only_run_hands_its_trace_to_the_oldest_collector_generation():
    """The collector is paused during a trace-only run; when it resumes, the run's objects must
    not be walked by young-generation collections (measured: 20-35% of a warm run)."""
    import gc

    from accelopt.nki.trace import TraceRecord

    fn, inputs, kernel_name, path = _example("silu")
    run = runtime.run_kernel(fn, inputs, numerics=False, kernel_name=kernel_name, source_path=path)
    young = [o for g in (0, 1) for o in gc.get_objects(generation=g) if o.__class__ is TraceRecord]
    assert not young
    assert run.trace.records[0] in gc.get_objects(generation=2)


def test_numeric_runs_make_no_reference_cycles():
    """A tile's data must go with its last reference: a cycle (e.g. a tile keeping its own full
    view) would keep every tile's array alive until a full collection."""
    import gc

    for name in ("silu", "rmsnorm_matmul"):
        fn, inputs, kernel_name, path = _example(name)
        gc.collect()
        gc.disable()
        try:
            run = runtime.run_kernel(fn, inputs, numerics=True, kernel_name=kernel_name, source_path=path)
            assert len(run.trace.records) > 10
            del run
            assert gc.collect() == 0
        finally:
            gc.enable()


ASSIGN_KERNEL = """
def assign_kernel(x, w):
    out = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.ndarray((2, par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        xt[i, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(x[i * 128 + nl.arange(128)[:, None], nl.arange(64)[None, :]])
        w_tile = nl.load(w[0:128, 0:128])
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(3):
            acc[...] += nisa.nc_matmul(w_tile[0:128, 0:128], xt[i, 0:128, 0:64])
        row = nl.ndarray((par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
        row[0:128, 0:64] = nl.exp(acc)  # a PSUM result copied out by an engine
        wide = nl.ndarray((par_dim(128), 1, 64), dtype=x.dtype, buffer=nl.sbuf)
        wide[0:128, 0:1, 0:64] = nl.multiply(row, 2.0)  # (128, 64) into (128, 1, 64)
        moved = nl.ndarray((par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
        moved[...] = nl.matmul(w_tile[0:128, 0:128], row, transpose_x=True)  # Tensor Engine into SBUF: a copy
        nl.store(out[i * 128 + nl.arange(128)[:, None], nl.arange(64)[None, :]], value=moved)
    return out
"""


def test_assignments_of_api_results_in_trace_only_runs_record_what_numeric_runs_record(kernel, monkeypatch):
    from accelopt.nki import instructions

    k = kernel(ASSIGN_KERNEL)
    rng = np.random.default_rng(0)
    # small values: the kernel takes exp of a 3-fold accumulated matmul, which must stay finite
    x = (rng.random((256, 64)) * 0.01).astype(np.float32)
    w = rng.random((128, 128)).astype(np.float32)
    numeric = k.run("assign_kernel", x, w, numerics=True)
    general: list[int] = []
    original = instructions._retarget

    def counting(ctx, dst, src, line, *rest):
        general.append(line)
        return original(ctx, dst, src, line, *rest)

    monkeypatch.setattr(instructions, "_retarget", counting)
    trace_only = k.run("assign_kernel", x, w, numerics=False)
    assert _trace_rows(trace_only.trace) == _trace_rows(numeric.trace)
    # plain `tile[...] = api(...)` and PSUM `tile[...] += api(...)` statements take the general
    # path once per run (learning the statement's line), then the trace-only one; copies and
    # reshaping assignments always take the general path
    plain = [
        k.line_of("xt[i, nl.arange"),
        k.line_of("acc[...] +="),
        k.line_of("a PSUM result"),
    ]
    assert [general.count(line) for line in plain] == [1, 1, 1]
    assert general.count(k.line_of("into (128, 1, 64)")) == 2
    assert general.count(k.line_of("into SBUF: a copy")) == 2


ASSIGN_CONFLICT_KERNEL = """
def assign_conflict_kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    kept = nl.ndarray((par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(3):
        tile = nl.load(x[0:128, 0:64])
        kept[0:128, 0:64] = nl.exp(tile)  # same elements every iteration
    nl.store(out[0:128, 0:64], value=kept)
    return out
"""

ASSIGN_BOUNDS_KERNEL = """
def assign_bounds_kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    kept = nl.ndarray((3, par_dim(128), 64), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.sequential_range(4):
        tile = nl.load(x[0:128, 0:64])
        kept[i, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.exp(tile)  # block 3 is past the end
    nl.store(out[0:128, 0:64], value=kept[0])
    return out
"""


@pytest.mark.parametrize(
    ("body", "name", "code", "marker"),
    [
        (
            ASSIGN_CONFLICT_KERNEL,
            "assign_conflict_kernel",
            "err_unexpected_output_dependencies",
            "same elements",
        ),
        (ASSIGN_BOUNDS_KERNEL, "assign_bounds_kernel", "err_tensor_access_out_of_bound", "past the end"),
    ],
)
def test_trace_only_assignments_raise_the_errors_of_a_numeric_run(kernel, body, name, code, marker):
    k = kernel(body)
    x = np.random.rand(128, 64).astype(np.float32)
    errors = []
    for numerics in (True, False, False):  # the second trace-only run replays from its first call
        with pytest.raises(NkiError) as caught:
            k.run(name, x, numerics=numerics)
        errors.append((caught.value.code, caught.value.path, caught.value.line))
    assert errors == [(code, str(k.path), k.line_of(marker))] * 3
