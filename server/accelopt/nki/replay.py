"""Trace-only runs: replaying what an API call did when the same kernel statement runs again.

Inside a loop a kernel statement issues the same instructions every iteration; only the offsets
of the regions it touches, the loop iterations and the ids of the tiles it makes change. In a
trace-only run (no numerics) the first call of an API at a call site, with a given argument
*structure*, runs normally while its effects are logged relative to its arguments: the tiles it
read, the tiles it made, the records it emitted, the writes it noted. A later call from the same
site with the same structure replays the log: the same checks that depend on the run's state
(tile scopes, affine-loop write conflicts) run again, regions are shifted by the arguments'
offsets, records get the current loop frames. Everything else (shape rules, engines, dtypes,
sizes, bytes, flops, DMA chunking) was settled by the first call.

A call is replayable only if its log says everything it did. A call that changed something else
(an existing record or tile other than reading it, the loop-reduce state), a region that is not a
fixed box of a new tile or a fixed shift of one argument's offsets, a view reaching outside its
tensor, an argument of an unknown kind, or an error: such a site + structure is marked and always
runs normally. Numeric runs never replay.
"""

from __future__ import annotations

import enum
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki import ops
from accelopt.nki.context import KernelContext, active_context
from accelopt.nki.errors import _EMULATOR_DIR
from accelopt.nki.indexing import _NP_COMPARE as _COMPARE
from accelopt.nki.indexing import IndexExpr, Predicate, _solve
from accelopt.nki.loops import LoopVar
from accelopt.nki.tensor import Buffer, Tensor, View, par_dim
from accelopt.nki.trace import Region, TraceRecord

_SCALARS = frozenset({int, float, bool, str, type(None), complex})
_BY_IDENTITY = frozenset({types.FunctionType, types.BuiltinFunctionType, np.ufunc, Buffer})
_UNREPLAYABLE = object()  # a site (or site + structure) that always runs normally
_MAX_STRUCTURES_PER_SITE = 8


class _Unreplayable(Exception):
    """The call did something a log cannot express."""


# --- argument structure ----------------------------------------------------------------------


def _structure(value: Any, tiles: list[Any]) -> Any:
    """A hashable description of everything about an argument that can change what the API
    does, except the offsets of the regions it touches. Tiles are appended to `tiles` (in
    argument order) so regions can be expressed relative to them. Raises _Unreplayable."""
    cls = value.__class__
    if cls is View:
        tensor = value._tensor
        if value._arrays is not None or value._oob or tensor._alias is not None:
            raise _Unreplayable
        tiles.append(value)
        return (
            View,
            value.shape,
            value._terms,
            tensor.shape,
            tensor.dtype,
            tensor.buffer,
            tensor.block_dims,
            tensor._fresh,
            tensor._producer is None,
        )
    if cls is Tensor:
        if value._alias is not None or value._root is not None:
            raise _Unreplayable
        tiles.append(value)
        return (
            Tensor,
            value.shape,
            value.dtype,
            value.buffer,
            value.block_dims,
            value._fresh,
            value._producer is None,
        )
    if cls in _SCALARS:
        if cls is float and value != value:
            raise _Unreplayable  # NaN never equals itself: it would never be found again
        return (cls, value)
    if cls is LoopVar:
        return (LoopVar, int(value), value.loop_id)
    if cls is IndexExpr:
        if value.values is not None:
            raise _Unreplayable
        return (IndexExpr, value.sizes, value.coefs, value.offset)
    if cls is Predicate:
        return _mask_structure(value)
    if cls is tuple or cls is list:
        return (cls, tuple([_structure(v, tiles) for v in value]))
    if cls is par_dim:
        return (par_dim, value.size)
    if isinstance(value, np.generic):
        if value != value:
            raise _Unreplayable
        return (cls, value.item())
    if cls in _BY_IDENTITY or isinstance(value, (type, np.dtype, enum.Enum)):
        return value  # ops (ufuncs, nl functions), dtypes, buffers, engines: by identity/value
    raise _Unreplayable


def _mask_structure(mask: Predicate) -> tuple[Any, ...]:
    """A mask by what it selects rather than by its offsets: a tail mask such as
    ``-128 * i0 - i_p + 10943 >= 0`` has a new offset every iteration but keeps every row on all
    but the last. Each condition on one axis is described by the range of that axis it keeps
    (what resolving the mask against any instruction shape uses); conditions on constants by
    their truth. Conditions spanning several axes make the mask unreplayable."""
    if mask.values is not None:
        raise _Unreplayable
    conds = []
    for expr, op in mask.conds:
        if expr.values is not None:
            raise _Unreplayable
        live = [a for a, (c, n) in enumerate(zip(expr.coefs, expr.sizes)) if c and n > 1]
        if len(live) > 1:
            raise _Unreplayable
        if live:
            a = live[0]
            kept: Any = _solve(expr.offset, expr.coefs[a], op, expr.sizes[a])
        else:
            kept = bool(_COMPARE[op](expr.offset, 0))
        conds.append((expr.sizes, expr.coefs, op, kept))
    return (Predicate, tuple(conds))


# --- recording -------------------------------------------------------------------------------


class Recorder:
    """Collects the effects of one API call (the context reports them while `ctx._recorder` is
    set)."""

    __slots__ = ("events", "ok")

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.ok = True

    def viewed(self, tensor: Tensor, line: int) -> None:
        self.events.append(("view", tensor, line))

    def registered(self, tensor: Tensor, name: str, line: int, is_input: bool, explicit_loops: bool) -> None:
        if explicit_loops or is_input:
            self.ok = False
        self.events.append(("tensor", tensor, name, line))

    def emitted(self, record: TraceRecord) -> None:
        self.events.append(("emit", record))

    def wrote(self, tensor: Tensor, region: Region, line: int, accumulate: bool) -> None:
        self.events.append(("write", tensor, region, line, accumulate))

    def refuse(self) -> None:
        self.ok = False


def _snapshot(tiles: list[Any]) -> list[tuple[Any, ...]]:
    """What an API may not change about its arguments (replay would not redo it)."""
    out = []
    for tile in tiles:
        tensor = tile._tensor if tile.__class__ is View else tile
        producer = tensor._producer
        out.append(
            (
                tensor._alias,
                producer,
                tensor._pmask,
                tensor._root,
                None
                if producer is None
                else (producer.writes, producer.dst_memory, producer.out_dtype, producer.accumulate),
                tile._assigned_at if tile.__class__ is View else None,
            )
        )
    return out


# A Region without the frozen dataclass's __setattr__ detour (same class, same slots).
_new_object = object.__new__
_set_region_tid = Region.__dict__["tensor_id"].__set__
_set_region_box = Region.__dict__["box"].__set__


def new_region(tid: int, box: tuple[tuple[int, int], ...]) -> Region:
    region = _new_object(Region)
    _set_region_tid(region, tid)
    _set_region_box(region, box)
    return region


Step = Callable[[KernelContext, list[Any], list[Tensor], list[TraceRecord]], Any]
RegionOf = Callable[[list[Any], list[Tensor]], Region]


def _shifted(index: int, deltas: tuple[tuple[int, int], ...]) -> RegionOf:
    """The region of argument view `index` shifted by its offsets (one closure per rank, so the
    common ranks run without a loop)."""
    if len(deltas) == 2:
        (a0, b0), (a1, b1) = deltas

        def region2(tiles: list[Any], new: list[Tensor]) -> Region:
            view = tiles[index]
            o0, o1 = view._offsets
            return new_region(view._tensor._tid, ((o0 + a0, o0 + b0), (o1 + a1, o1 + b1)))

        return region2
    if len(deltas) == 3:
        (a0, b0), (a1, b1), (a2, b2) = deltas

        def region3(tiles: list[Any], new: list[Tensor]) -> Region:
            view = tiles[index]
            o0, o1, o2 = view._offsets
            return new_region(view._tensor._tid, ((o0 + a0, o0 + b0), (o1 + a1, o1 + b1), (o2 + a2, o2 + b2)))

        return region3

    def region_n(tiles: list[Any], new: list[Tensor]) -> Region:
        view = tiles[index]
        box = tuple([(o + lo, o + hi) for o, (lo, hi) in zip(view._offsets, deltas)])
        return new_region(view._tensor._tid, box)

    return region_n


def _fixed(kind: str, index: int, box: tuple[tuple[int, int], ...]) -> RegionOf:
    """A fixed box of a new tile or of a whole-tensor argument."""
    if kind == "new":
        return lambda tiles, new: new_region(new[index]._tid, box)
    return lambda tiles, new: new_region(tiles[index]._tid, box)


def _tensor_of(kind: str, index: int) -> Callable[[list[Any], list[Tensor]], Tensor]:
    if kind == "new":
        return lambda tiles, new: new[index]
    return lambda tiles, new: tiles[index]._tensor if tiles[index].__class__ is View else tiles[index]


def _view_step(kind: str, index: int, is_view: bool, line: int) -> Step:
    """What instructions.to_view does to a tile it reads."""

    def view(ctx: KernelContext, tiles: list[Any], new: list[Tensor], emitted: list[TraceRecord]) -> None:
        if kind == "new":
            tensor = new[index]
        elif is_view:
            tensor = tiles[index]._tensor
        else:
            tensor = tiles[index]
        if tensor._fresh:
            tensor._fresh = False
            tensor._exact = None
        if tensor._alloc_scopes:
            ctx.check_in_scope(tensor, line)

    return view


def _tensor_step(tensor: Tensor, name: str, line: int) -> Step:
    """Make and register a tile like `tensor`, in the state the first call left it in (its
    producer is set by the step that emits it)."""
    shape, dtype, buffer, block_dims = tensor.shape, tensor.dtype, tensor.buffer, tensor.block_dims
    written, fresh, pmask = tensor._written, tensor._fresh, tensor._pmask

    def make(ctx: KernelContext, tiles: list[Any], new: list[Tensor], emitted: list[TraceRecord]) -> None:
        made = Tensor(shape, dtype, buffer, block_dims, None)
        ctx.register_tensor(made, name, line)
        made._written = written
        made._fresh = fresh
        made._pmask = pmask
        new.append(made)

    return make


def _regions(builders: tuple[RegionOf, ...]) -> Callable[[list[Any], list[Tensor]], tuple[Region, ...]]:
    if not builders:
        return lambda tiles, new: ()
    if len(builders) == 1:
        (r0,) = builders
        return lambda tiles, new: (r0(tiles, new),)
    if len(builders) == 2:
        r0, r1 = builders
        return lambda tiles, new: (r0(tiles, new), r1(tiles, new))
    return lambda tiles, new: tuple([r(tiles, new) for r in builders])


def _emit_step(
    record: TraceRecord, reads: tuple[RegionOf, ...], writes: tuple[RegionOf, ...], produces: tuple[int, ...]
) -> Step:
    # the first call's values (read now: a later retarget may change the live record)
    engine, opcode, partitions, free_size = record.engine, record.opcode, record.partitions, record.free_size
    dtype, out_dtype, src, dst, line = (
        record.dtype,
        record.out_dtype,
        record.src_memory,
        record.dst_memory,
        record.line,
    )
    nbytes, flops, vector_ops, is_transpose = (
        record.bytes,
        record.flops,
        record.vector_ops,
        record.is_transpose,
    )
    accumulate, kmn, chunk_bytes, chunks = (
        record.accumulate,
        record.matmul_kmn,
        record.dma_chunk_bytes,
        record.dma_chunks,
    )
    extra = dict(record.extra)
    read_regions = _regions(reads)
    write_regions = _regions(writes)

    def emit(ctx: KernelContext, tiles: list[Any], new: list[Tensor], emitted: list[TraceRecord]) -> None:
        records = ctx.trace.records
        made = TraceRecord(
            len(records),
            engine,
            opcode,
            partitions,
            free_size,
            dtype,
            out_dtype,
            read_regions(tiles, new),
            write_regions(tiles, new),
            src,
            dst,
            line,
            ctx.frames,
            nbytes,
            flops,
            vector_ops,
            is_transpose,
            accumulate,
            kmn,
            chunk_bytes,
            chunks,
            extra.copy(),
        )
        records.append(made)
        emitted.append(made)
        for j in produces:
            new[j]._producer = made

    return emit


def _write_step(
    tensor_of: Callable[[list[Any], list[Tensor]], Tensor],
    region_of: Callable[[list[Any], list[Tensor], list[TraceRecord]], Region],
    line: int,
    accumulate: bool,
) -> Step:
    def write(ctx: KernelContext, tiles: list[Any], new: list[Tensor], emitted: list[TraceRecord]) -> None:
        ctx.note_write(tensor_of(tiles, new), region_of(tiles, new, emitted), line, accumulate)

    return write


class _Log:
    """A recorded call as steps over (context, argument tiles, new tiles, new records) and what
    the call returns."""

    __slots__ = ("result", "steps")

    def __init__(self, steps: tuple[Step, ...], result: Any) -> None:
        self.steps = steps
        self.result = result  # ("new", j) | ("arg", i) | None


def _compile(events: list[tuple[Any, ...]], tiles: list[Any], result: Any) -> _Log:
    arg_tensors: dict[int, int] = {}  # id(tensor) -> index of the argument tile
    offsets: list[tuple[int, ...] | None] = []  # None: a whole tensor (offsets 0)
    by_tid: dict[int, tuple[str, int]] = {}
    for i, tile in enumerate(tiles):
        tensor = tile._tensor if tile.__class__ is View else tile
        if id(tensor) in arg_tensors:
            raise _Unreplayable  # which argument a region came from would be ambiguous
        arg_tensors[id(tensor)] = i
        offsets.append(tile._offsets if tile.__class__ is View else None)
        by_tid[tensor._tid] = ("arg", i)
    new_tensors: dict[int, int] = {}
    new_list: list[Tensor] = []
    new_names: list[tuple[str, int]] = []
    record_at: dict[int, int] = {}  # id(record) -> position among this call's records
    # id(region object) -> how a write event can pick it from an emitted record
    emitted_regions: dict[int, tuple[int, int]] = {}

    def tensor_ref(tensor: Tensor) -> tuple[str, int]:
        j = new_tensors.get(id(tensor))
        if j is not None:
            return ("new", j)
        i = arg_tensors.get(id(tensor))
        if i is None:
            raise _Unreplayable
        return ("arg", i)

    def region_builder(region: Region) -> RegionOf:
        source = by_tid.get(region.tensor_id)
        if source is None:
            raise _Unreplayable
        kind, index = source
        offs = offsets[index] if kind == "arg" else None
        if offs is None:
            return _fixed(kind, index, region.box)
        if len(offs) != len(region.box):
            raise _Unreplayable
        return _shifted(index, tuple((lo - o, hi - o) for (lo, hi), o in zip(region.box, offs)))

    steps: list[Step] = []
    for event in events:
        kind = event[0]
        if kind == "view":
            source, index = tensor_ref(event[1])
            is_view = source == "arg" and tiles[index].__class__ is View
            steps.append(_view_step(source, index, is_view, event[2]))
        elif kind == "tensor":
            _, tensor, name, line = event
            j = len(new_list)
            new_tensors[id(tensor)] = j
            new_list.append(tensor)
            new_names.append((name, line))
            by_tid[tensor._tid] = ("new", j)
            steps.append(_tensor_step(tensor, name, line))
        elif kind == "emit":
            record = event[1]
            position = record_at[id(record)] = len(record_at)
            for k, region in enumerate(record.writes):
                emitted_regions[id(region)] = (position, k)
            produces = tuple(j for j, t in enumerate(new_list) if t._producer is record)
            steps.append(
                _emit_step(
                    record,
                    tuple(region_builder(r) for r in record.reads),
                    tuple(region_builder(r) for r in record.writes),
                    produces,
                )
            )
        else:  # write
            _, tensor, region, line, accumulate = event
            picked = emitted_regions.get(id(region))
            if picked is not None:
                position, k = picked
                region_of = lambda tiles, new, emitted, p=position, k=k: emitted[p].writes[k]  # noqa: E731
            else:
                build = region_builder(region)
                region_of = lambda tiles, new, emitted, build=build: build(tiles, new)  # noqa: E731
            steps.append(_write_step(_tensor_of(*tensor_ref(tensor)), region_of, line, accumulate))
    for tensor in new_list:
        if tensor._alias is not None or tensor._root is not None or tensor._exact is not None:
            raise _Unreplayable
        if tensor._producer is not None and id(tensor._producer) not in record_at:
            raise _Unreplayable
    if result is None:
        result_ref = None
    elif result.__class__ is Tensor:
        result_ref = tensor_ref(result)
    else:
        raise _Unreplayable
    return _Log(tuple(steps), result_ref)


def _replay(ctx: KernelContext, log: _Log, tiles: list[Any]) -> Any:
    new: list[Tensor] = []
    emitted: list[TraceRecord] = []
    for step in log.steps:
        step(ctx, tiles, new, emitted)
    result = log.result
    if result is None:
        return None
    kind, index = result
    if kind == "new":
        return new[index]
    tile = tiles[index]
    return tile._tensor if tile.__class__ is View else tile


# --- the wrapper -----------------------------------------------------------------------------


def _kernel_site(ctx: KernelContext) -> tuple[int, int] | None:
    """(id of the code, instruction offset) of the kernel statement calling the API, if a
    kernel-file frame is the first frame outside the emulator. (Code objects hash slowly, and
    the kernel's own code lives as long as the run.)"""
    frame = sys._getframe(2)
    path = ctx.kernel_path
    emulator = _EMULATOR_DIR
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename == path:
            return id(frame.f_code), frame.f_lasti
        if not filename.startswith(emulator):
            return None
        frame = frame.f_back
    return None


def replayable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernel-facing API function so trace-only runs replay repeated calls (see module
    docstring). Numeric runs, nested API calls and calls outside a run go straight through."""

    @functools.wraps(fn)
    def api(*args: Any, **kwargs: Any) -> Any:
        ctx = active_context()
        if ctx is None or ctx.numerics or ctx._api_depth:
            return fn(*args, **kwargs)
        site = _kernel_site(ctx)
        if site is None:
            return _run(ctx, fn, args, kwargs)
        tiles: list[Any] = []
        try:
            structure = (
                tuple([_structure(a, tiles) for a in args]),
                tuple([(k, _structure(v, tiles)) for k, v in kwargs.items()]) if kwargs else (),
            )
        except _Unreplayable:
            return _run(ctx, fn, args, kwargs)
        site_key = (api, *site)
        logs = ctx._replays.get(site_key)
        if logs is None:
            logs = ctx._replays[site_key] = {}
        elif logs is _UNREPLAYABLE:
            return _run(ctx, fn, args, kwargs)
        log = logs.get(structure)
        if log is not None:
            if log is _UNREPLAYABLE:
                return _run(ctx, fn, args, kwargs)
            return _replay(ctx, log, tiles)
        if len(logs) >= _MAX_STRUCTURES_PER_SITE:
            # arguments that change every call (e.g. a scalar computed from the loop index)
            ctx._replays[site_key] = _UNREPLAYABLE
            return _run(ctx, fn, args, kwargs)
        return _record(ctx, fn, args, kwargs, tiles, logs, structure)

    return api


def _run(ctx: KernelContext, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx._api_depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        ctx._api_depth -= 1


def _record(
    ctx: KernelContext,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    tiles: list[Any],
    logs: dict[Any, Any],
    structure: Any,
) -> Any:
    """Run the call normally while logging its effects; keep the log if it can be replayed."""
    recorder = Recorder()
    before = _snapshot(tiles)
    reduce_state = len(ctx.loop_reduce_state)
    ctx._recorder = recorder
    ctx._api_depth += 1
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        logs[structure] = _UNREPLAYABLE
        raise
    finally:
        ctx._recorder = None
        ctx._api_depth -= 1
    log: Any = _UNREPLAYABLE
    if recorder.ok and _snapshot(tiles) == before and len(ctx.loop_reduce_state) == reduce_state:
        try:
            log = _compile(recorder.events, tiles, result)
        except _Unreplayable:
            log = _UNREPLAYABLE
    logs[structure] = log
    return result


def make_replayable(namespace: dict[str, Any], names: tuple[str, ...]) -> None:
    """Replace the API functions `names` of a module namespace by their replayable wrappers
    (still usable as `op=` arguments where the original was)."""
    for name in names:
        original = namespace[name]
        wrapped = replayable(original)
        ops.alias(wrapped, original)
        namespace[name] = wrapped
