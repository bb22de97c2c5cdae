"""What every API call shares: turning arguments into views, allocating result tiles, checking
memory/partition rules, emitting the trace record, and (numeric runs only) computing values.

`language.py` and `isa.py` are thin layers over these helpers, so the rules live in one place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accelopt.nki import dtypes as dt
from accelopt.nki import ops
from accelopt.nki.context import KernelContext, current
from accelopt.nki.dtypes import dname
from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.tensor import (
    PMAX,
    Buffer,
    Tensor,
    TileOps,
    View,
    charge,
    check_bounds_under_mask,
    keep_charged,
    new_data,
    new_region,
)
from accelopt.nki.trace import Engine, Memory, Region

SBUF = Buffer("sbuf", Memory.SBUF)
PSUM = Buffer("psum", Memory.PSUM)
HBM = Buffer("hbm", Memory.HBM)
SHARED_HBM = Buffer("shared_hbm", Memory.HBM)
PRIVATE_HBM = Buffer("private_hbm", Memory.HBM)

PSUM_PARTITION_BYTES = 2048  # one PSUM bank per partition
SBUF_PARTITION_BYTES = 192 * 1024
MATMUL_MAX_K = 128
MATMUL_MAX_M = 128  # stationary free size
MATMUL_MAX_N = 512  # moving free size

TENSOR_ENGINE_OPS = frozenset({"nc_matmul", "matmul", "transpose", "broadcast"})


# --- operands ------------------------------------------------------------------------------


def to_view(ctx: KernelContext, x: Any, line: int) -> View:
    """A tile argument as a view; reading it ends its 'fresh' state and checks its scope."""
    if isinstance(x, Tensor):
        if x._alias is not None:
            if ctx.recorder is not None:
                ctx.recorder.refuse()
            return x._alias
        if ctx.recorder is not None:
            ctx.recorder.viewed(x, line)
        if x._fresh:
            x._fresh = False
            x._exact = None
        if x._alloc_scopes:
            ctx.check_in_scope(x, line)
        return x._full_view()
    if isinstance(x, View):
        tensor = x._tensor
        if ctx.recorder is not None:
            ctx.recorder.viewed(tensor, line)
        if tensor._fresh:
            tensor._fresh = False
            tensor._exact = None
        if tensor._alloc_scopes:
            ctx.check_in_scope(tensor, line)
        return x
    raise TypeError(f"expected a tile, got {type(x).__name__}")


def scalar_of(x: Any) -> float | int:
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    raise TypeError(f"expected a tile or a scalar, got {type(x).__name__}")


def check_on_chip(ctx: KernelContext, view: View, api: str, line: int) -> None:
    if view._tensor.memory is Memory.HBM:
        raise ctx.error(
            "err_unsupported_memory",
            f"{api} cannot read a tensor in HBM; load it into SBUF with nl.load first",
            line,
        )


def check_partitions(ctx: KernelContext, partitions: int, what: str, line: int) -> None:
    if partitions > PMAX:
        raise ctx.error(
            "err_num_partition_exceed_arch_limit",
            f"{what} has {partitions} partitions; at most {PMAX} are supported",
            line,
        )


def prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def pf(shape: tuple[int, ...]) -> tuple[int, int]:
    """(partitions, free elements per partition) of a tile shape."""
    if not shape:
        return 1, 1
    return shape[0], prod(shape[1:])


def as_f32(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.float32 or not dt.is_float(values.dtype):
        return values
    return values.astype(np.float32)


def read_values(view: View, clip: bool) -> np.ndarray:
    return as_f32(view._read(clip))


# --- masks ---------------------------------------------------------------------------------


class MaskInfo:
    """A mask resolved against an instruction's tile shape: axis ranges for trace regions and,
    in numeric runs, the boolean grid (built only when needed).

    Masks whose conditions each involve one axis (the usual ``i*128 + p < n`` tails) select
    exactly the box `ranges`; numerics then work on sliced sub-views instead of gathers."""

    __slots__ = ("_grid", "exact_box", "predicate", "ranges", "shape")

    def __init__(
        self,
        shape: tuple[int, ...],
        ranges: list[tuple[int, int]],
        predicate: Predicate | None,
        exact_box: bool,
    ) -> None:
        self.shape = shape
        self.ranges = ranges
        self.predicate = predicate
        self.exact_box = exact_box
        self._grid: np.ndarray | None = None

    @property
    def grid(self) -> np.ndarray:
        if self._grid is None:
            if self.predicate is None:
                self._grid = np.zeros(self.shape, dtype=bool)
            else:
                self._grid = np.broadcast_to(self.predicate.materialize(), self.shape)
        return self._grid

    @property
    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(lo, hi) for lo, hi in self.ranges)

    def sub_shape(self) -> tuple[int, ...]:
        return tuple(hi - lo for lo, hi in self.ranges)


def resolve_mask(ctx: KernelContext, mask: Any, shape: tuple[int, ...]) -> MaskInfo | None:
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):
        if mask:
            return None
        return MaskInfo(shape, [(0, 0)] * len(shape), None, True)
    if not isinstance(mask, Predicate):
        raise ctx.error(
            "err_unsupported_mask",
            f"mask must be a predicate over nl.arange grids, got {type(mask).__name__}",
        )
    if len(mask.shape) > len(shape):
        mask = _fit_mask_rank(mask, len(shape)) or mask
    key = _mask_key(mask, shape)
    cached = _MASK_CACHE.get(key) if key is not None else None
    if cached is None:
        if len(mask.shape) > len(shape):
            raise ctx.error(
                "err_unsupported_mask",
                f"mask of shape {mask.shape} does not fit an instruction of shape {shape}",
            )
        exact = mask.is_single_axis()
        ranges = mask.axis_ranges(shape) if exact else None
        if ranges is None:
            ranges = mask.exact_axis_ranges(shape)
        # A mask that provably keeps every element (a ragged-tail mask on an interior tile) is
        # no mask: the instruction takes the unmasked path, with identical regions and values.
        keeps_all = exact and all(lo == 0 and hi == n for (lo, hi), n in zip(ranges, shape))
        cached = (ranges, exact, keeps_all)
        if key is not None:
            _MASK_CACHE[key] = cached
    if cached[2]:
        return None
    return MaskInfo(shape, list(cached[0]), mask, cached[1])


def _fit_mask_rank(mask: Predicate, rank: int) -> Predicate | None:
    """A mask built from a larger `nl.mgrid` than the instruction's tile (rank-3 grids, a
    [128, N] tile: tensor.py `_mesh_axes_kept`) without the size-1 axes the tile does not have;
    None when it has too few of them. A size-1 axis contributes a constant 0 to every
    condition, so dropping it changes no element's verdict."""
    if mask.values is not None:
        return None
    full = mask.shape
    ones = [a for a, n in enumerate(full) if n == 1]
    excess = len(full) - rank
    if len(ones) < excess:
        return None
    drop = set(ones[:excess])
    conds = []
    for expr, op in mask.conds:
        if expr.values is not None:
            return None
        shift = len(full) - len(expr.sizes)
        keep = [i for i in range(len(expr.sizes)) if i + shift not in drop]
        sizes = tuple(expr.sizes[i] for i in keep)
        coefs = tuple(expr.coefs[i] for i in keep)
        conds.append((IndexExpr(sizes, coefs, expr.offset), op))
    return Predicate(tuple(conds))


# Generated kernels rebuild the same tail mask for every instruction: resolve each form once.
_MASK_CACHE: dict[tuple[Any, ...], tuple[list[tuple[int, int]], bool, bool]] = {}


def _mask_key(mask: Predicate, shape: tuple[int, ...]) -> tuple[Any, ...] | None:
    if mask.values is not None:
        return None
    parts: list[Any] = [shape]
    for expr, op in mask.conds:
        if expr.values is not None:
            return None
        parts.append((expr.sizes, expr.coefs, expr.offset, op))
    return tuple(parts)


def sub_view(view: View, mask: MaskInfo) -> View:
    """The part of `view` an exact-box mask selects (axes of size 1 broadcast, untouched)."""
    if len(view.shape) != len(mask.shape):
        return view
    ranges = [r if n == m else (0, n) for r, n, m in zip(mask.ranges, view.shape, mask.shape)]
    return view._restrict(ranges)


def region_of(view: View, mask: MaskInfo | None) -> Region:
    if mask is None:
        return view._region()
    if view.shape == mask.shape:
        if view._oob and not mask.exact_box:
            # a mask coupling axes: checked element by element, then the region is the part of
            # the (reached) box inside the tensor
            check_bounds_under_mask(view, mask.ranges, lambda: mask.grid)
            box = view._box(mask.ranges)
            inside = tuple(
                (max(lo, 0), min(hi, n)) for (lo, hi), n in zip(box, view._tensor.shape, strict=True)
            )
            return new_region(view._tensor._tid, inside)
        return view._region(mask.ranges)
    if len(view.shape) == len(mask.shape):
        ranges = [r if n == m else (0, n) for r, n, m in zip(mask.ranges, view.shape, mask.shape)]
        return view._region(ranges)
    return view._region()


def index_reads(views: Sequence[View]) -> tuple[Region, ...]:
    """The index tiles an instruction also reads through its tile-indexed operands (a run-time
    offset or tensor indirection, views.IndirectView)."""
    return tuple(
        v._index_view._region() for v in views if v.__class__ is not View and hasattr(v, "_index_view")
    )


def guard_bounds(ctx: KernelContext, view: View, mask: MaskInfo | None) -> None:
    """Views were bounds-checked when built unless a mask excuses out-of-range elements."""
    if mask is not None and view.shape == mask.shape:
        check_bounds_under_mask(view, mask.ranges, None if mask.exact_box else lambda: mask.grid)


# --- tiles ---------------------------------------------------------------------------------


def result_tile(
    ctx: KernelContext,
    shape: tuple[int, ...],
    dtype: np.dtype,
    buffer: Buffer,
    line: int,
    name: str,
    values: np.ndarray | None,
    mask: MaskInfo | None,
) -> Tensor:
    """The anonymous tile an instruction writes; holds `values` (fp32) rounded to `dtype`."""
    check_partitions(ctx, shape[0] if shape else 1, f"the result of {name}", line)
    tensor = Tensor(shape, dtype, buffer, 0, None)
    ctx.register_tensor(tensor, ctx.name_at(line, name), line)
    tensor._written = True
    tensor._fresh = True
    if mask is not None:
        tensor._pmask = mask
    if values is not None:
        values = np.asarray(values)
        if mask is not None and mask.exact_box and values.shape == mask.sub_shape() and values.shape != shape:
            # values computed over the selected box only
            data = new_data(shape, dtype)
            data[mask.slices] = values
            if dtype != np.float32 and dt.is_float(dtype):
                exact = np.full(shape, np.nan, dtype=np.float32)
                exact[mask.slices] = values
                tensor._exact = exact
            tensor._data = data
            return tensor
        if values.shape != shape:
            values = np.broadcast_to(values, shape)
        if mask is not None:
            data = new_data(shape, dtype)
            grid = mask.grid
            data[grid] = values[grid].astype(dtype, copy=False)
        else:
            data = values.astype(dtype) if values.dtype != dtype or not values.flags.owndata else values
            if dtype != np.float32 and dt.is_float(dtype):
                tensor._exact = values
            if ctx._alloc_budget is not None and data.base is None:  # a re-run: results count too
                charge(ctx, data.nbytes)
                keep_charged(ctx, data)
        tensor._data = data
    return tensor


def out_region(tensor: Tensor, mask: MaskInfo | None) -> Region:
    if mask is None:
        return tensor._full_region()
    return region_of(tensor._full_view(), mask)


def engine_of(
    ctx: KernelContext, engine: Any, default: Engine, legal: Sequence[Engine], api: str, line: int
) -> Engine:
    """The engine an instruction runs on: an explicit `engine=` (checked), else the default."""
    if engine is None:
        return default
    chosen = engine if isinstance(engine, Engine) else getattr(engine, "trace_engine", None)
    if chosen is None:
        raise ctx.error("err_unsupported_engine", f"{engine!r} is not an engine", line)
    if chosen is Engine.UNASSIGNED:
        return Engine.UNASSIGNED
    if chosen not in legal:
        raise ctx.error(
            "err_unsupported_engine",
            f"{api} cannot run on the {chosen.value} engine (legal: {', '.join(e.value for e in legal)})",
            line,
        )
    return chosen


def unassigned_extra(
    engine: Engine, legal: Sequence[Engine], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    extra = {} if extra is None else extra
    if engine is Engine.UNASSIGNED:
        names = _ENGINE_NAMES.get(legal)
        if names is None:
            names = _ENGINE_NAMES[tuple(legal)] = [e.value for e in legal]
        extra["engines"] = list(names)
    return extra


_ENGINE_NAMES: dict[Sequence[Engine], list[str]] = {}


# --- shapes --------------------------------------------------------------------------------


def partition_first_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast tile shapes with the partition axis aligned first (a [P] tile meets [P, F] along
    the free axis), then numpy rules."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        padded = tuple(s) + (1,) * (ndim - len(s))
        for i, n in enumerate(padded):
            if n != 1:
                if out[i] != 1 and out[i] != n:
                    raise ValueError(f"tile shapes {list(shapes)} do not broadcast")
                out[i] = n
    return tuple(out)


def pad_to(values: np.ndarray, ndim: int) -> np.ndarray:
    if values.ndim < ndim:
        return values.reshape(values.shape + (1,) * (ndim - values.ndim))
    return values


# --- generic elementwise instruction -------------------------------------------------------


def elementwise(
    ctx: KernelContext,
    line: int,
    *,
    api: str,
    opcode: str,
    operands: Sequence[Any],
    compute: Callable[..., np.ndarray],
    engine: Engine,
    legal: Sequence[Engine],
    dtype: Any = None,
    mask: Any = None,
    ops_per_element: int = 1,
    buffer: Buffer = SBUF,
    extra: dict[str, Any] | None = None,
    max_psum_inputs: int | None = None,
    main: int = 0,
) -> Tensor:
    """One instruction over tiles (and scalars) producing a new tile of the broadcast shape.

    `compute` receives fp32 arrays (scalars passed through) in operand order.
    """
    views: list[View] = []
    resolved: list[Any] = []
    main_view: View | None = None
    for i, x in enumerate(operands):
        if isinstance(x, TileOps):
            v = to_view(ctx, x, line)
            check_on_chip(ctx, v, api, line)
            views.append(v)
            resolved.append(v)
            if main_view is None or i == main:
                main_view = v
        else:
            resolved.append(scalar_of(x))
    if main_view is None:
        raise ctx.error("err_unsupported_operand", f"{api} needs at least one tile operand", line)
    shape = views[0].shape
    if len(views) > 1 and any(v.shape != shape for v in views):
        shapes = [v.shape for v in views]
        try:
            shape = partition_first_shape(shapes)
        except ValueError as exc:
            raise ctx.error(
                "err_num_partition_mismatch" if _partitions_differ(shapes) else "err_shape_mismatch",
                f"{api}: {exc}",
                line,
            ) from None
        if _partitions_differ(shapes):
            raise ctx.error(
                "err_num_partition_mismatch",
                f"{api}: operands have {sorted({s[0] for s in shapes})} partitions",
                line,
            )
    psum_inputs = 0
    for v in views:
        if v._tensor.memory is Memory.PSUM:
            psum_inputs += 1
    if max_psum_inputs is not None and psum_inputs > max_psum_inputs:
        raise ctx.error(
            "err_unsupported_memory",
            f"{api} can read at most {max_psum_inputs} input from PSUM, got {psum_inputs}",
            line,
        )
    if psum_inputs or buffer.memory is Memory.PSUM:
        if engine is Engine.GPSIMD:
            raise ctx.error("err_unsupported_memory", f"{api} on the GpSimd engine cannot access PSUM", line)
        legal = tuple(e for e in legal if e is not Engine.GPSIMD) or tuple(legal)
    if dtype is not None:
        out_dtype = dt.as_dtype(dtype)
    else:
        out_dtype = main_view._tensor.dtype
        if len(views) > 1 and any(v._tensor.dtype != out_dtype for v in views):
            out_dtype = dt.promote([v._tensor.dtype for v in views])
        if not dt.is_float(out_dtype) and any(isinstance(x, float) for x in resolved):
            out_dtype = dt.float32  # integer tiles meeting a float scalar compute in fp32
    minfo = resolve_mask(ctx, mask, shape)
    if minfo is not None:
        for v in views:
            guard_bounds(ctx, v, minfo)
    values = None
    if ctx.numerics:
        ndim = len(shape)
        if minfo is not None and minfo.exact_box:
            args = [
                pad_to(read_values(sub_view(x, minfo), False), ndim) if isinstance(x, View) else x
                for x in resolved
            ]
        else:
            clip = minfo is not None
            args = [pad_to(read_values(x, clip), ndim) if isinstance(x, View) else x for x in resolved]
        with np.errstate(all="ignore"):
            values = compute(*args)
    out = result_tile(ctx, shape, out_dtype, buffer, line, opcode, values, minfo)
    partitions, free = pf(main_view.shape)
    extra = unassigned_extra(engine, legal, extra)
    if psum_inputs:
        extra["psum_inputs"] = psum_inputs
    if minfo is None:
        reads = tuple([v._region() for v in views])
        writes = (out._full_region(),)
    else:
        reads = tuple([region_of(v, minfo) for v in views])
        writes = (out_region(out, minfo),)
    reads += index_reads(views)
    out._producer = ctx.emit(
        engine,
        opcode,
        partitions,
        free,
        dname(main_view._tensor.dtype),
        dname(out_dtype),
        reads,
        writes,
        main_view._tensor.memory,
        buffer.memory,
        line,
        bytes=partitions * free * main_view._tensor.dtype.itemsize,
        vector_ops=prod(shape) * ops_per_element,
        extra=extra,
    )
    return out


def _partitions_differ(shapes: Sequence[tuple[int, ...]]) -> bool:
    parts = {s[0] for s in shapes if s and s[0] != 1}
    return len(parts) > 1


# --- assignment into tiles -----------------------------------------------------------------


def _writable_by(record_engine: Engine, opcode: str, memory: Memory) -> bool:
    if opcode in TENSOR_ENGINE_OPS:
        return memory is Memory.PSUM
    if record_engine is Engine.DMA:
        return memory is not Memory.PSUM
    if record_engine is Engine.GPSIMD:
        return memory is Memory.SBUF
    return memory is not Memory.HBM


def assign(dst: View, value: Any, *, accumulate: bool = False, exempt: bool = False) -> None:
    """``dst[...] = value``: retarget a fresh result's instruction, else copy / fill."""
    ctx = current()
    cls = value.__class__  # tiles are exactly Tensor or View (no subclasses)
    if cls is View:
        if value._assigned_at == len(ctx.trace.records) and value._tensor is dst._tensor:
            value._assigned_at = -1
            return  # the second half of `dst[key] += x`, already done
    log = ctx._call_log
    if log is not None and not ctx.api_depth:  # a run to be verified logs it (calllog.py)
        log.assign(ctx, assign, dst, value, {"accumulate": accumulate, "exempt": exempt})
        return
    if cls is Tensor:
        alias = value._alias
        if alias is not None:
            if (
                not accumulate
                and alias._tensor is dst._tensor
                and alias._box() == dst._box()
                and alias.shape == dst.shape
            ):
                return  # already there (e.g. a loop_reduce accumulator living in `dst`)
        elif value._fresh and value._producer is not None:
            line = ctx.line()
            if _retarget(ctx, dst, value, line, accumulate, exempt):
                return
            src = to_view(ctx, value, line)
            copy_into(ctx, dst, src, line, accumulate=accumulate, exempt=exempt)
            return
    line = ctx.line()
    if isinstance(value, TileOps):
        src = to_view(ctx, value, line)
        copy_into(ctx, dst, src, line, accumulate=accumulate, exempt=exempt)
        return
    fill_into(ctx, dst, scalar_of(value), line)


def retarget_traced(
    ctx: KernelContext, site: tuple[int, int], dst: View, src: Tensor, accumulate: bool = False
) -> bool:
    """``dst[...] = src`` (or ``dst += src`` with `accumulate`, PSUM accumulation) from the
    kernel statement at `site` (code id, instruction offset) in a trace-only run, when it is the
    plain case of `assign` / `augmented_assign`: a fresh API result of dst's shape, without a
    partition mask, whose instruction may write dst's memory (the same `_writable_by` rule).
    Does what they do then via `_retarget`, minus the frame walk for the line and the general
    checks; returns False (nothing done) for every other case, which they handle.

    The caller guarantees: `src` is a Tensor, the run has no numerics, no API call is running
    (so no replay log is being recorded) and the statement's frame called the tile method."""
    line = ctx._line_of.get(site)
    if line is None:  # the site's first assignment in this run: `assign` learns its line
        return False
    record = src._producer
    if record is None or src._alias is not None or not src._fresh or src._pmask is not None:
        return False
    if dst.shape != src.shape:
        return False
    tensor = dst._tensor
    memory = tensor.memory
    opcode = record.opcode
    if accumulate and opcode not in TENSOR_ENGINE_OPS:
        return False
    if not _writable_by(record.engine, opcode, memory):
        return False
    region = dst._region_cache
    if region is None:
        box = dst._box_cache
        if dst._oob or box is None:
            region = dst._region()
        else:  # View._region, inlined
            region = dst._region_cache = new_region(tensor._tid, box)
    writes = record.writes
    record.writes = (region,) if len(writes) == 1 else (region, *writes[1:])
    if dst.__class__ is not View:  # a tile-indexed destination: its index tile is read too
        record.reads = (*record.reads, *index_reads([dst]))
    record.dst_memory = memory
    record.out_dtype = dname(tensor.dtype)
    record.accumulate = accumulate
    ctx.note_write(tensor, region, line, accumulate or record.extra.get("api") == "loop_reduce")
    # ctx.forget_tensor, without its recorder check (the caller guarantees none is active)
    if ctx._pending.pop(src._tid, None) is None:
        ctx.trace.tensors.pop(src._tid, None)
    src._fresh = False
    src._exact = None
    src._alias = dst
    return True


def _retarget(ctx: KernelContext, dst: View, src: Tensor, line: int, accumulate: bool, exempt: bool) -> bool:
    record = src._producer
    assert record is not None
    dshape, sshape = dst.shape, src.shape
    if dshape != sshape:
        if prod(dshape) != prod(sshape):
            return False
        if (dshape[0] if dshape else 1) != (sshape[0] if sshape else 1):
            raise ctx.error(
                "err_num_partition_mismatch",
                f"cannot assign a tile with {sshape[0]} partitions to {dshape[0]} partitions",
                line,
            )
    memory = dst._tensor.memory
    if not _writable_by(record.engine, record.opcode, memory):
        if record.opcode in TENSOR_ENGINE_OPS and record.extra.get("strict"):
            raise ctx.error(
                "err_unsupported_memory",
                f"the Tensor Engine writes only PSUM; {record.opcode} cannot write a tensor in "
                f"{memory.value.upper()}",
                line,
            )
        if record.engine is Engine.GPSIMD and memory is Memory.PSUM:
            raise ctx.error("err_unsupported_memory", "the GpSimd engine cannot write PSUM", line)
        return False
    if accumulate and record.opcode not in TENSOR_ENGINE_OPS:
        return False
    pmask = src._pmask
    ranges = pmask.ranges if pmask is not None else None
    if ranges is not None and len(ranges) == len(dst.shape):
        region = dst._region(ranges)
    else:
        region = dst._region()
    record.writes = (region, *record.writes[1:])  # keep side outputs (e.g. reduce_res)
    if dst.__class__ is not View:  # a tile-indexed destination: its index tile is read too
        record.reads = (*record.reads, *index_reads([dst]))
    record.dst_memory = dst._tensor.memory
    record.out_dtype = dname(dst._tensor.dtype)
    record.accumulate = accumulate
    exempt = exempt or record.extra.get("api") == "loop_reduce"  # a reduction, not a conflict
    ctx.note_write(dst._tensor, region, line, accumulate or exempt)
    ctx.forget_tensor(src)
    if ctx.numerics and dst._tensor._data is not None:
        values = src._exact if src._exact is not None else src._data
        assert values is not None  # a numerics run gives every tile data
        if pmask is None:
            dst._write(np.reshape(values, dst.shape), accumulate=accumulate)
        elif pmask.exact_box and dst.shape == src.shape:
            dst._restrict(pmask.ranges)._write(values[pmask.slices], accumulate=accumulate)
        else:
            grid = np.reshape(pmask.grid, dst.shape)
            dst._write(np.reshape(values, dst.shape), mask=grid, accumulate=accumulate)
    src._fresh = False
    src._exact = None
    src._alias = dst
    return True


def copy_into(
    ctx: KernelContext, dst: View, src: View, line: int, *, accumulate: bool = False, exempt: bool = False
) -> None:
    """An explicit tile copy (or accumulate) into `dst`."""
    if dst._tensor.memory is Memory.HBM or src._tensor.memory is Memory.HBM:
        dma_copy(ctx, dst, src, line)
        return
    if prod(dst.shape) != prod(src.shape) and not _broadcastable(src.shape, dst.shape):
        raise ctx.error(
            "err_shape_mismatch", f"cannot assign a tile of shape {src.shape} to shape {dst.shape}", line
        )
    if (src.shape[0] if src.shape else 1) not in (1, dst.shape[0] if dst.shape else 1):
        raise ctx.error(
            "err_num_partition_mismatch",
            f"cannot assign a tile with {src.shape[0]} partitions to {dst.shape[0]} partitions",
            line,
        )
    legal = (
        (Engine.VECTOR, Engine.SCALAR)
        if Memory.PSUM in (dst._tensor.memory, src._tensor.memory)
        else (
            Engine.VECTOR,
            Engine.SCALAR,
            Engine.GPSIMD,
        )
    )
    opcode = (
        "tensor_tensor"
        if accumulate
        else ("psum_copy" if src._tensor.memory is Memory.PSUM else "tensor_copy")
    )
    reads = (src._region(), dst._region()) if accumulate else (src._region(),)
    partitions, free = pf(src.shape)
    region = dst._region()
    ctx.emit(
        Engine.VECTOR if accumulate else Engine.UNASSIGNED,
        opcode,
        partitions,
        free,
        dname(src._tensor.dtype),
        dname(dst._tensor.dtype),
        reads,
        (region,),
        src._tensor.memory,
        dst._tensor.memory,
        line,
        bytes=partitions * free * src._tensor.dtype.itemsize,
        vector_ops=prod(dst.shape) if accumulate else 0,
        extra={"op": "add"} if accumulate else unassigned_extra(Engine.UNASSIGNED, legal),
    )
    ctx.note_write(dst._tensor, region, line, accumulate or exempt)
    if ctx.numerics and dst._tensor._data is not None:
        values = src._read()
        if prod(values.shape) == prod(dst.shape):
            values = values.reshape(dst.shape)
        else:
            values = np.broadcast_to(pad_to(values, len(dst.shape)), dst.shape)
        dst._write(as_f32(values) if accumulate else values, accumulate=accumulate)


def _broadcastable(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    try:
        return partition_first_shape([src, dst]) == tuple(dst)
    except ValueError:
        return False


def fill_into(ctx: KernelContext, dst: View, value: float | int, line: int) -> None:
    partitions, free = pf(dst.shape)
    region = dst._region()
    memory = dst._tensor.memory
    legal: tuple[Engine, ...]
    if memory is Memory.HBM:
        engine, legal = Engine.DMA, (Engine.DMA,)
    else:
        legal = (
            (Engine.VECTOR, Engine.SCALAR)
            if memory is Memory.PSUM
            else (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)
        )
        engine = Engine.UNASSIGNED
    ctx.emit(
        engine,
        "memset",
        partitions,
        free,
        dname(dst._tensor.dtype),
        dname(dst._tensor.dtype),
        (),
        (region,),
        None,
        memory,
        line,
        bytes=partitions * free * dst._tensor.dtype.itemsize,
        extra=unassigned_extra(engine, legal, {"value": float(value)}),
    )
    ctx.note_write(dst._tensor, region, line, False)
    if ctx.numerics and dst._tensor._data is not None:
        dst._write(np.full(dst.shape, value, dtype=np.float32))


def augmented_assign(target: Any, value: Any, opname: str, site: tuple[int, int] | None = None) -> Any:
    """``target += value`` (and -=, *=, /=): PSUM accumulation for Tensor Engine results, else an
    elementwise instruction writing back into the target. Returns what Python rebinds. `site`:
    the calling kernel statement's (code id, instruction offset), if the tile method knows it."""
    ctx = current()
    log = ctx._call_log
    if log is not None and not ctx.api_depth:  # a run to be verified logs it (calllog.py)
        return log.augmented(ctx, augmented_assign, target, value, opname)
    dst = target._full_view() if isinstance(target, Tensor) else target
    if target is not None and isinstance(target, Tensor) and target._alias is not None:
        dst = target._alias
    if (
        opname == "add"
        and isinstance(value, Tensor)
        and value._fresh
        and value._producer is not None
        and value._producer.opcode in TENSOR_ENGINE_OPS
    ):
        if (
            site is not None
            and ctx.fast_paths
            and not ctx.numerics
            and ctx.recorder is None
            and not ctx.api_depth
            and dst._tensor.memory is Memory.PSUM
            and retarget_traced(ctx, site, dst, value, accumulate=True)
        ):
            return _rebind(ctx, target, dst)
        line = ctx.line()
        if dst._tensor.memory is Memory.PSUM and _retarget(ctx, dst, value, line, True, True):
            return _rebind(ctx, target, dst)
    language = sys.modules["accelopt.nki.language"]  # imports this module: resolved late
    spec = ops.spec(opname)
    line = ctx.line()
    result = language._binary(
        ctx, line, spec, dst, value, dtype=dst._tensor.dtype, api=f"'{opname}=' on a tile"
    )
    if not _retarget(ctx, dst, result, line, False, True):
        copy_into(ctx, dst, to_view(ctx, result, line), line, exempt=True)
    return _rebind(ctx, target, dst)


def _rebind(ctx: KernelContext, target: Any, dst: View) -> Any:
    if isinstance(target, Tensor):
        return target
    dst._assigned_at = len(ctx.trace.records)
    return dst


# --- DMA ------------------------------------------------------------------------------------


def dma_shape(hbm_view: View, partition_axis: int = 0) -> tuple[int, int]:
    """(contiguous bytes per chunk on the HBM side, number of chunks) of a DMA over a view."""
    itemsize = hbm_view._tensor.dtype.itemsize
    run = hbm_view._contiguous_run(partition_axis)
    total = prod(hbm_view.shape)
    return run * itemsize, max(1, total // max(run, 1)) if total else 0


def dma_copy(
    ctx: KernelContext,
    dst: View,
    src: View,
    line: int,
    *,
    opcode: str = "dma_copy",
    mask: MaskInfo | None = None,
) -> None:
    if Memory.PSUM in (dst._tensor.memory, src._tensor.memory):
        raise ctx.error("err_unsupported_memory", "DMA cannot access PSUM; copy the tile to SBUF first", line)
    if prod(dst.shape) != prod(src.shape):
        raise ctx.error(
            "err_shape_mismatch", f"cannot copy a tile of shape {src.shape} to shape {dst.shape}", line
        )
    hbm_side = src if src._tensor.memory is Memory.HBM else dst
    moved = src
    if mask is not None and mask.exact_box and hbm_side.shape == mask.shape:
        # only the selected elements move
        hbm_side = hbm_side._restrict(mask.ranges)
        if src.shape == mask.shape:
            moved = src._restrict(mask.ranges)
    chunk_bytes, chunks = dma_shape(hbm_side)
    partitions, free = pf(moved.shape)
    region = region_of(dst, mask)
    reads: tuple[Region, ...] = (region_of(src, mask),)
    extra = None
    if src.__class__ is not View or dst.__class__ is not View:
        # an indirect (tensor-indexed) side also reads its index tile (views.IndirectView); its
        # HBM region is the whole indexed dimension
        reads += tuple(v._index_view._region() for v in (src, dst) if v.__class__ is not View)
        extra = {"indirect": True}
    ctx.emit(
        Engine.DMA,
        opcode,
        partitions,
        free,
        dname(src._tensor.dtype),
        dname(dst._tensor.dtype),
        reads,
        (region,),
        src._tensor.memory,
        dst._tensor.memory,
        line,
        # a DMA casts between the two dtypes (nisa.dma_copy reference): HBM traffic is counted
        # in the HBM side's dtype
        bytes=prod(moved.shape) * hbm_side._tensor.dtype.itemsize,
        dma_chunk_bytes=chunk_bytes,
        dma_chunks=chunks,
        extra=extra,
    )
    ctx.note_write(dst._tensor, region, line, False)
    if ctx.numerics and dst._tensor._data is not None:
        if mask is None:
            dst._write(src._read().reshape(dst.shape))
        elif mask.exact_box and dst.shape == src.shape == mask.shape:
            dst._restrict(mask.ranges)._write(src._restrict(mask.ranges)._read())
        else:
            values = src._read(clip=True)
            dst._write(values.reshape(dst.shape), mask=np.reshape(mask.grid, dst.shape))
