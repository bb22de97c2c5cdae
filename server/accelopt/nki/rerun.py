"""Re-running a call log (calllog.py) with the emulator's own API functions: no kernel Python.

The log of a sandboxed numeric run is untrusted data. `rerun` decodes it entry by entry (every
value checked: tensors by the ids this run made, views rebuilt from their access pattern and
bounds-checked here, operators, dtypes, buffers and engines only by the emulator's own names) and
calls the same function the kernel called, on inputs the caller chooses. Each ``nl.*``/``nisa.*``
op therefore has exactly one numeric implementation, used by the emulator and by the re-run alike.

What comes out is a trusted `KernelRun`: outputs computed by emulator code from the log alone,
and the trace that code emitted. `compare_traces` then tells whether the trace the sandbox
returned is that one. Anything the re-run cannot do is a `RerunError` with the entry, the API and
the kernel line: the evaluation is rejected, never accepted unverified.
"""

from __future__ import annotations

import enum
import json
import math
import sys
import time
from typing import Any

import numpy as np

from accelopt.nki import calllog, ops
from accelopt.nki import context as _context
from accelopt.nki import dtypes as dt
from accelopt.nki import isa as _isa  # noqa: F401 - registers its API functions in calllog.API
from accelopt.nki import language as _language  # noqa: F401 - likewise
from accelopt.nki.apiversion import KernelApi
from accelopt.nki.context import KernelContext, activate
from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.instructions import HBM, PRIVATE_HBM, PSUM, SBUF, SHARED_HBM, assign, augmented_assign
from accelopt.nki.liveness import FOLD_MIN_BYTES, Liveness
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.runtime import KernelRun, _input_tensor, finish_run
from accelopt.nki.tensor import Tensor, View, _check_bounds, par_dim
from accelopt.nki.trace import LoopKind, ProgramSpan, Trace, _record_to_list
from accelopt.nki.views import INDEX_KINDS, indirect_view, rebuilt_indirect_view

_BUFFERS = {b.name: b for b in (SBUF, PSUM, HBM, SHARED_HBM, PRIVATE_HBM)}
_COMPARISONS = frozenset({">=", ">", "<=", "<", "==", "!="})
_AUGMENTED = frozenset({"add", "subtract", "multiply", "divide"})
_DTYPES = {
    dt.dname(v): v for v in vars(dt).values() if isinstance(v, np.dtype)
} | {n: np.dtype(n) for n in ("float64", "int64", "uint64", "float16", "bool")}
_DEADLINE_EVERY = 64  # entries between two looks at the clock
RERUN_PATH = "<verified re-run>"


class RerunError(Exception):
    """The log cannot be re-run; the message says where and why."""


def rerun(
    trace: Trace,
    inputs: list[np.ndarray],
    *,
    timeout_s: float | None = None,
    max_bytes: int = 1 << 30,
    fold_min_bytes: int = FOLD_MIN_BYTES,
) -> KernelRun:
    """Re-run `trace.calls` on `inputs` (the kernel's array arguments, in order). `max_bytes`
    bounds the tensor storage alive at once: each tensor is released after the last entry
    naming it, and a tensor with block dimensions of at least `fold_min_bytes` that the log
    indexes block by block is kept one block at a time (liveness.py)."""
    if trace.calls_failure:
        raise RerunError(trace.calls_failure)
    if trace.calls is None:
        raise RerunError("the run returned no call log")
    entries = trace.calls
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    # Not the returned source path: the context reads its file for tensor names (linecache).
    try:
        api = KernelApi.from_key(trace.nki_api)
    except ValueError as exc:
        raise RerunError(str(exc)) from None
    # the rules the kernel ran under (tiles kept in lists across loops exist only in nki.*)
    ctx = KernelContext(trace.kernel_name, RERUN_PATH, numerics=True, api=api)
    ctx.target = ctx.trace.target = trace.target  # the ops a kernel may use depend on it (trn3's MX)
    ctx.trace.compiler_flags = trace.compiler_flags
    ctx.trace.nki_api = trace.nki_api
    ctx._by_id = {}
    ctx._alloc_budget = max_bytes
    names = {tid: info.name for tid, info in trace.tensors.items()}
    with activate(ctx):
        try:
            returned, single = _run_entries(ctx, entries, inputs, names, deadline, fold_min_bytes)
        except RerunError:
            raise
        except Exception as exc:  # the emulator refused what the log asks: the log is wrong
            raise RerunError(_where(ctx, exc)) from None
        try:
            run = finish_run(ctx, returned, single, 0)
        except Exception as exc:
            raise RerunError(f"at the end of the run: {type(exc).__name__}: {exc}") from None
    run.trace.source_path = trace.source_path
    for tid, info in run.trace.tensors.items():  # labels only (the re-run has no source to read)
        if tid in names:
            info.name = names[tid]
    return run


def _where(ctx: KernelContext, exc: Exception) -> str:
    entry = getattr(ctx, "_rerun_entry", None)
    what = f"call {entry[0]} ({entry[1]}, line {entry[2]})" if entry else "the log"
    text = getattr(exc, "message", None) or str(exc)
    code = getattr(exc, "code", None)
    kind = code if isinstance(code, str) else type(exc).__name__
    return f"{what}: {kind}: {text}"[:1500]


def _run_entries(
    ctx: KernelContext,
    entries: list[Any],
    inputs: list[np.ndarray],
    names: dict[int, str],
    deadline: float | None,
    fold_min_bytes: int,
) -> tuple[list[Tensor], bool]:
    if not entries or not isinstance(entries[0], list) or entries[0][:1] != ["inputs"]:
        raise RerunError("the call log does not start with the kernel's inputs")
    _register_inputs(ctx, entries[0], inputs, names)
    tensors = ctx._by_id
    assert tensors is not None
    liveness = Liveness(entries, fold_min_bytes)
    ctx._block_storage = liveness.storage
    liveness.after(0, tensors)
    scopes: list[Any] = []
    program: tuple[tuple[int, ...], int, int] | None = None  # the running instance: ids, core, first record
    for number, entry in enumerate(entries[1:], start=1):
        if deadline is not None and number % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            raise RerunError(f"re-running the call log took longer than the limit (at entry {number})")
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
            raise RerunError(f"entry {number} of the call log is malformed")
        kind = entry[0]
        if kind == "call":
            _, name, args, kwargs, line, site, expected = _fields(entry, 7, number)
            fn = calllog.API.get(name) if isinstance(name, str) else None
            if fn is None:
                raise RerunError(f"entry {number}: {name!r} is not an API function of the emulator")
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise RerunError(f"entry {number}: malformed arguments")
            _at(ctx, number, name.rsplit(".", 1)[-1], line, site)
            result = _invoke(
                ctx, fn, [decode(a, tensors) for a in args], {str(k): decode(v, tensors) for k, v in kwargs.items()}
            )
            _check_result(number, name, result, expected)
        elif kind == "assign":
            _, pair, kw, line = _fields(entry, 4, number)
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(kw, dict):
                raise RerunError(f"entry {number}: malformed tile assignment")
            _at(ctx, number, "tile assignment", line, None)
            dview = decode(pair[0], tensors)
            if not isinstance(dview, View):
                raise RerunError(f"entry {number}: a tile assignment needs a view to write")
            flags = {k: kw.get(k) is True for k in ("accumulate", "exempt")}
            _invoke(ctx, assign, [dview, decode(pair[1], tensors)], flags)
        elif kind == "augment":
            _, pair, opname, line, expected = _fields(entry, 5, number)
            if opname not in _AUGMENTED or not isinstance(pair, list) or len(pair) != 2:
                raise RerunError(f"entry {number}: malformed augmented assignment")
            _at(ctx, number, f"'{ops.spec(opname).name}='", line, None)
            target, value = (decode(p, tensors) for p in pair)
            result = _invoke(ctx, augmented_assign, [target, value, opname], {})
            _check_result(number, "an augmented assignment", result, expected)
        elif kind == "loop":
            _, loop_kind, trip, line, site, nki_scope, loop_id = _fields(entry, 7, number)
            _at(ctx, number, "loop", line, None)
            scope = ctx.enter_loop(LoopKind(loop_kind), _int(trip), _int(line), ("rerun", site), bool(nki_scope))
            if scope.loop_id != loop_id:
                raise RerunError(f"entry {number}: the loop at line {line} got id {scope.loop_id}, not {loop_id}")
            scopes.append(scope)
        elif kind == "next":
            if not scopes:
                raise RerunError(f"entry {number}: a loop iteration outside any loop")
            ctx.set_iteration(scopes[-1], _int(_fields(entry, 2, number)[1]))
        elif kind == "end":
            if not scopes:
                raise RerunError(f"entry {number}: a loop ends that never began")
            ctx.exit_loop(scopes.pop())
        elif kind == "program":
            _, index, ids, core, grid = _fields(entry, 5, number)
            if scopes or not isinstance(ids, list) or not isinstance(grid, list):
                raise RerunError(f"entry {number}: malformed program instance")
            program = _next_program(ctx, program, _int(index), tuple(_int(i) for i in ids), _int(core),
                                    tuple(_int(g) for g in grid), number)
        elif kind == "return":
            _, tids, single = _fields(entry, 3, number)
            if scopes or number != len(entries) - 1:
                raise RerunError("the call log returns before its end")
            if program is not None:
                ids_, core_, first_ = program
                ctx.trace.programs.append(ProgramSpan(ids_, core_, first_, len(ctx.trace.records)))
            try:
                returned = [tensors[_int(t)] for t in tids]
            except (KeyError, TypeError):
                raise RerunError("the kernel returns a tensor the re-run never made") from None
            return returned, bool(single)
        else:
            raise RerunError(f"entry {number}: unknown kind {kind!r}")
        liveness.after(number, tensors)
    raise RerunError("the call log ends without the kernel returning")


def _fields(entry: list[Any], count: int, number: int) -> list[Any]:
    if len(entry) != count:
        raise RerunError(f"entry {number} ({entry[0]}) has {len(entry)} fields, not {count}")
    return entry


def _int(value: Any) -> int:
    if type(value) is not int:
        raise RerunError(f"expected an integer, got {type(value).__name__}")
    return value


def _at(ctx: KernelContext, number: int, what: str, line: Any, site: Any) -> None:
    ctx._line_override = _int(line)
    ctx._site_override = None if site is None else ("rerun", _int(site))
    ctx._rerun_entry = (number, what, line)


def _invoke(ctx: KernelContext, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    ctx.api_depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        ctx.api_depth -= 1


def _next_program(
    ctx: KernelContext,
    running: tuple[tuple[int, ...], int, int] | None,
    index: int,
    ids: tuple[int, ...],
    core: int,
    grid: tuple[int, ...],
    number: int,
) -> tuple[tuple[int, ...], int, int]:
    """Close the running program instance's span of records and set up the next one the way
    runtime._run_grid does (same ids, output cursor and per-instance loop state), so that later
    instances get the first instance's shared outputs back and the spans can be compared."""
    expected = 0 if running is None else len(ctx.trace.programs) + 1
    if index != expected or not grid or len(ids) != len(grid):
        raise RerunError(f"entry {number}: program instance {index} out of order")
    if running is None:
        ctx.grid_sizes = ctx.trace.grid = grid
        ctx.shared_outputs = []
    elif grid != ctx.grid_sizes:
        raise RerunError(f"entry {number}: program instance {index} of another grid")
    else:
        ids_, core_, first_ = running
        ctx.trace.programs.append(ProgramSpan(ids_, core_, first_, len(ctx.trace.records)))
    ctx.program_ids = ids
    ctx.program_index = index
    ctx.shared_cursor = 0
    ctx.loop_reduce_state = {}
    return ids, core, len(ctx.trace.records)


def _check_result(number: int, name: str, result: Any, expected: Any) -> None:
    got = calllog.signature(result)
    if got != expected:
        raise RerunError(
            f"entry {number}: {name.rsplit('.', 1)[-1]} made {got} in the re-run, the log says {expected}"
        )


def _register_inputs(ctx: KernelContext, entry: list[Any], inputs: list[np.ndarray], names: dict[int, str]) -> None:
    described = _fields(entry, 2, 0)[1]
    if not isinstance(described, list) or len(described) != len(inputs):
        raise RerunError(
            f"the call log has {len(described) if isinstance(described, list) else '?'} array inputs, "
            f"the task {len(inputs)}"
        )
    for item, array in zip(described, inputs):
        if not isinstance(item, list) or len(item) != 4:
            raise RerunError("malformed input description in the call log")
        position, tid, shape, dtype = item
        if list(array.shape) != shape or dt.dname(array.dtype) != dtype:
            raise RerunError(
                f"input {position} is {dtype}{shape} in the call log, {dt.dname(array.dtype)}"
                f"{list(array.shape)} in the task"
            )
        tensor = _input_tensor(ctx, array, names.get(_int(tid), f"arg{position}"), 0)
        if tensor._tid != tid:
            raise RerunError(f"input {position} got tensor id {tensor._tid}, the log says {tid}")


# --- decoding ----------------------------------------------------------------------------------


def decode(data: Any, tensors: dict[int, Tensor]) -> Any:
    """A logged value back as the object the API expects (every field checked)."""
    if data is None or data.__class__ in (bool, int, float, str):
        return data
    if data.__class__ is not list or not data or not isinstance(data[0], str):
        raise RerunError(f"malformed value in the call log ({type(data).__name__})")
    tag = data[0]
    if tag == "T":
        return _tensor(data, tensors)
    if tag == "V":
        return _view(data, tensors)
    if tag == "I":
        _, base, index, dim, add = _fields(data, 5, 0)
        view = _view(base, tensors)
        if not 0 <= _int(dim) < len(view._tensor.shape):
            raise RerunError("malformed indirect view in the call log")
        return indirect_view(view, _view(index, tensors), _int(dim), _int(add))
    if tag == "J":
        _, kind, base, index, dim, add, limit = _fields(data, 7, 0)
        view = _view(base, tensors)
        if kind not in INDEX_KINDS or kind == "rows" or not 0 <= _int(dim) < len(view._tensor.shape):
            raise RerunError("malformed indirect view in the call log")
        return rebuilt_indirect_view(view, _view(index, tensors), _int(dim), _int(add), kind, _int(limit))
    if tag == "t":
        return tuple(decode(d, tensors) for d in data[1:])
    if tag == "l":
        return [decode(d, tensors) for d in data[1:]]
    if tag == "L":
        return LoopVar(_int(data[1]), _int(data[2]))
    if tag == "X":
        return _expr(data)
    if tag == "M":
        conds = []
        for cond in data[2:]:
            if not isinstance(cond, list) or len(cond) != 3 or cond[0] != "c" or cond[2] not in _COMPARISONS:
                raise RerunError("malformed mask condition in the call log")
            conds.append((_expr(cond[1]), cond[2]))
        values = None if data[1] is None else _grid(data[1], np.bool_)
        return Predicate(tuple(conds), values)
    if tag == "B":
        buffer = _BUFFERS.get(data[1]) if len(data) == 2 else None
        if buffer is None:
            raise RerunError(f"unknown buffer {data[1:]!r}")
        return buffer
    if tag == "P":
        return par_dim(_int(data[1]))
    if tag == "N":
        return _dtype(data[1]).type(data[2])
    if tag == "D":
        return _dtype(data[1])
    if tag == "A":
        _, name, shape, flat = _fields(data, 4, 0)
        dtype = _dtype(name)
        if not isinstance(flat, list):
            raise RerunError("malformed host constant in the call log")
        _charge(8 * len(flat))
        values = np.asarray(flat, dtype=np.float64 if dtype.kind in "fV" else None)
        return values.astype(dtype).reshape(tuple(_int(s) for s in shape))
    if tag == "E":
        return _enum_member(data)
    if tag == "s":
        return slice(*(decode(d, tensors) for d in data[1:4]))
    if tag == "d" and len(data) == 2 and isinstance(data[1], dict):
        return {str(k): decode(v, tensors) for k, v in data[1].items()}
    if tag == "O":
        try:
            return ops.spec(data[1])
        except (KeyError, TypeError):
            raise RerunError(f"unknown operator {data[1:]!r}") from None
    raise RerunError(f"unknown value tag {tag!r} in the call log")


def _tensor(data: list[Any], tensors: dict[int, Tensor]) -> Tensor:
    tensor = tensors.get(_int(data[1])) if len(data) == 2 else None
    if tensor is None:
        raise RerunError(f"the call log refers to tensor {data[1:]!r}, which the re-run never made")
    return tensor


def _view(data: list[Any], tensors: dict[int, Tensor]) -> View:
    _, tid, shape, offsets, terms, arrays, _oob = _fields(data, 7, 0)
    tensor = _tensor(["T", tid], tensors)
    ndim = len(tensor.shape)
    shape_t = tuple(_int(s) for s in shape)
    if any(s < 0 for s in shape_t) or len(offsets) != ndim or len(terms) != ndim:
        raise RerunError(f"a view of tensor {tid} does not match its {ndim} dimensions")
    parsed_terms = []
    for dim_terms in terms:
        pairs = []
        for pair in dim_terms:
            axis, coef = (_int(v) for v in pair)
            if not 0 <= axis < len(shape_t):
                raise RerunError(f"a view of tensor {tid} uses axis {axis} of a {len(shape_t)}-d view")
            pairs.append((axis, coef))
        parsed_terms.append(tuple(pairs))
    grids = None
    if arrays is not None:
        if not isinstance(arrays, list) or arrays[:1] != ["l"]:
            raise RerunError("malformed index grids in the call log")
        grids = {}
        for item in arrays[1:]:
            if not isinstance(item, list) or len(item) != 3 or not 0 <= _int(item[1]) < ndim:
                raise RerunError("malformed index grid in the call log")
            grids[item[1]] = _grid(item[2], np.int64)
    view = View(tensor, shape_t, tuple(_int(o) for o in offsets), tuple(parsed_terms), grids)
    _check_bounds(view)  # computed here, whatever the log says
    return view


def _expr(data: Any) -> IndexExpr:
    if not isinstance(data, list) or len(data) != 5 or data[0] != "X":
        raise RerunError("malformed index expression in the call log")
    _, sizes, coefs, offset, values = data
    sizes_t = tuple(_int(s) for s in sizes)
    coefs_t = tuple(_int(c) for c in coefs)
    if len(sizes_t) != len(coefs_t) or any(s < 0 for s in sizes_t):
        raise RerunError("malformed index expression in the call log")
    return IndexExpr(sizes_t, coefs_t, _int(offset), None if values is None else _grid(values, np.int64))


def _charge(nbytes: int) -> None:
    """Host data decoded from the log counts against the re-run's memory budget too."""
    ctx = _context._ACTIVE
    if ctx is not None and ctx._alloc_budget is not None:
        ctx._alloc_budget -= nbytes
        if ctx._alloc_budget < 0:
            raise MemoryError("the call log holds more host data than a re-run may use")


def _grid(data: Any, dtype: Any) -> np.ndarray:
    if not isinstance(data, list) or len(data) != 3 or data[0] != "g" or not isinstance(data[2], list):
        raise RerunError("malformed grid in the call log")
    shape = tuple(_int(s) for s in data[1])
    _charge(8 * len(data[2]))
    values = np.asarray(data[2], dtype=dtype)
    if values.size != math.prod(shape):
        raise RerunError("a grid in the call log has the wrong number of values")
    return values.reshape(shape)


def _dtype(name: Any) -> np.dtype:
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise RerunError(f"unknown dtype {name!r} in the call log")
    return dtype


def _enum_member(data: list[Any]) -> Any:
    if len(data) != 3:
        raise RerunError("malformed enum value in the call log")
    for module in ("accelopt.nki.isa", "accelopt.nki.language"):
        cls = getattr(sys.modules.get(module), str(data[1]), None)
        if isinstance(cls, type) and issubclass(cls, enum.Enum) and data[2] in cls.__members__:
            return cls[data[2]]
    raise RerunError(f"unknown enum value {data[1:]!r} in the call log")


# --- comparing traces ----------------------------------------------------------------------------


def compare_traces(returned: Trace, trusted: Trace) -> str | None:
    """None if the trace the sandbox returned is the one the re-run emitted; else the first
    difference, in words. Tensor names are labels and not compared."""
    if len(returned.records) != len(trusted.records):
        return (
            f"the sandbox returned {len(returned.records)} trace records; the kernel's calls make "
            f"{len(trusted.records)}"
        )
    for mine, theirs in zip(returned.records, trusted.records):
        a = json.dumps(_record_to_list(mine), separators=(",", ":"))
        b = json.dumps(_record_to_list(theirs), separators=(",", ":"))
        if a != b:
            return f"trace record {theirs.index} ({theirs.opcode}, line {theirs.line}) differs from the re-run's"
    if set(returned.tensors) != set(trusted.tensors):
        return "the returned trace lists other tensors than the re-run's"
    for tid, info in trusted.tensors.items():
        other = returned.tensors[tid]
        if (info.shape, info.dtype, info.memory, info.block_dims, info.is_input, info.is_output) != (
            other.shape,
            other.dtype,
            other.memory,
            other.block_dims,
            other.is_input,
            other.is_output,
        ) or tuple(info.alloc_loops) != tuple(other.alloc_loops):
            return f"tensor {tid} ('{info.name}') differs from the re-run's"
    loops = {k: (v.kind, v.trip_count, v.line, v.parent_id) for k, v in trusted.loops.items()}
    if loops != {k: (v.kind, v.trip_count, v.line, v.parent_id) for k, v in returned.loops.items()}:
        return "the returned trace's loops differ from the re-run's"
    return None
