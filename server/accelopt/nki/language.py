"""``neuronxcc.nki.language`` (``nl``) on numpy: memories, tiles, loads/stores, loops, indexing
grids and the high-level compute API. Engine choice is left to the compiler (``UNASSIGNED`` in
the trace) where the real compiler would choose; transcendental functions run on the Scalar
Engine, tile-tile arithmetic and reductions on the Vector Engine, matmuls on the Tensor Engine.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from accelopt.nki import dtypes as _dt
from accelopt.nki import ops as _ops
from accelopt.nki.context import KernelContext, current
from accelopt.nki.dtypes import (  # noqa: F401 - re-exported kernel-facing names
    bfloat16,
    bool_,
    dname,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from accelopt.nki.indexing import arange, ds, mgrid  # noqa: F401
from accelopt.nki.instructions import (
    HBM,
    MATMUL_MAX_K,
    MATMUL_MAX_M,
    MATMUL_MAX_N,
    PRIVATE_HBM,
    PSUM,
    PSUM_PARTITION_BYTES,
    SBUF,
    SBUF_PARTITION_BYTES,
    SHARED_HBM,
    check_on_chip,
    check_partitions,
    dma_copy,
    dma_shape,
    elementwise,
    guard_bounds,
    out_region,
    pf,
    read_values,
    region_of,
    resolve_mask,
    result_tile,
    scalar_of,
    to_view,
    unassigned_extra,
)
from accelopt.nki.instructions import (
    prod as _prod,
)
from accelopt.nki.loops import affine_range, sequential_range, static_range  # noqa: F401
from accelopt.nki.tensor import Buffer, Tensor, TileOps, View, new_data, normalize_shape, par_dim  # noqa: F401
from accelopt.nki.trace import Engine, Memory

sbuf = SBUF
psum = PSUM
hbm = HBM
shared_hbm = SHARED_HBM
private_hbm = PRIVATE_HBM

_VECTOR_ONLY = (Engine.VECTOR, Engine.GPSIMD)
_ANY = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


class tile_size:
    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_max_size = 2048
    total_available_sbuf_size = 180224


# --- SPMD ----------------------------------------------------------------------------------


def program_id(axis: int = 0) -> int:
    ids = current().program_ids
    return ids[axis] if axis < len(ids) else 0


def num_programs(axis: int | None = None) -> int:
    return 1


def program_ndim() -> int:
    return 0


def device_print(prefix: str, x: Any, **_: Any) -> None:
    """Print a tile's values (numeric runs) from inside a kernel; no hardware work is traced."""
    ctx = current()
    if ctx.numerics and isinstance(x, (Tensor, View)):
        print(prefix, to_view(ctx, x, ctx.line()).read())


# --- allocation ----------------------------------------------------------------------------


def _buffer(buffer: Any) -> Buffer:
    if buffer is None:
        return SBUF
    if isinstance(buffer, Buffer):
        return buffer
    raise current().error("err_unsupported_memory", f"unknown buffer {buffer!r}")


def _allocate(shape: Any, dtype: Any, buffer: Any, fill: Any, line: int, name: str) -> Tensor:
    ctx = current()
    dims, block_dims = normalize_shape(shape)
    buf = _buffer(buffer)
    dtype = _dt.as_dtype(dtype if dtype is not None else float32)
    if buf.memory is not Memory.HBM and dims:
        check_partitions(ctx, dims[block_dims], f"a tile of shape {dims}", line)
        per_partition = _prod(dims[block_dims + 1 :]) * dtype.itemsize
        limit = PSUM_PARTITION_BYTES if buf.memory is Memory.PSUM else SBUF_PARTITION_BYTES
        if per_partition > limit:
            raise ctx.error(
                "err_size_of_dimension_exceed_arch_limit",
                f"a {buf.memory.value.upper()} tile of shape {dims} needs {per_partition} bytes per partition; "
                f"at most {limit} fit",
                line,
            )
    data = new_data(dims, dtype, fill) if ctx.numerics else None
    tensor = Tensor(dims, dtype, buf, block_dims, data)
    ctx.register_tensor(tensor, name or ctx.name_at(line, "tensor"), line)
    return tensor


def ndarray(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **_: Any) -> Tensor:
    """A new tensor; its memory reads as NaN until written (an unwritten output is visible)."""
    ctx = current()
    return _allocate(shape, dtype, buffer, None, ctx.line(), name)


def empty_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or _like_buffer(x), name)


def _like_buffer(x: Any) -> Buffer:
    return x.buffer if isinstance(x, (Tensor, View)) and x.memory is not Memory.HBM else SBUF


def full(
    shape: Any,
    fill_value: Any,
    dtype: Any = float32,
    buffer: Any = None,
    name: str = "",
    lazy_initialization: bool = False,
    **_: Any,
) -> Tensor:
    ctx = current()
    line = ctx.line()
    value = scalar_of(fill_value)
    tensor = _allocate(shape, dtype, buffer, value, line, name)
    if not lazy_initialization:
        _memset_record(ctx, tensor, value, line)
    else:
        tensor.written = True
    return tensor


def _memset_record(ctx: KernelContext, tensor: Tensor, value: Any, line: int) -> None:
    memory = tensor.memory
    if memory is Memory.HBM:
        engine, legal = Engine.DMA, (Engine.DMA,)
    elif memory is Memory.PSUM:
        engine, legal = Engine.UNASSIGNED, (Engine.VECTOR, Engine.SCALAR)
    else:
        engine, legal = Engine.UNASSIGNED, _ANY
    shape = tensor.shape[tensor.block_dims :]
    partitions, free = pf(shape)
    free *= _prod(tensor.shape[: tensor.block_dims])
    region = tensor.full_region()
    ctx.emit(
        engine,
        "memset",
        partitions,
        free,
        dname(tensor.dtype),
        dname(tensor.dtype),
        (),
        (region,),
        None,
        memory,
        line,
        bytes=partitions * free * tensor.dtype.itemsize,
        extra=unassigned_extra(engine, legal, {"value": float(value)}),
    )
    ctx.note_write(tensor, region, line, False)


def zeros(
    shape: Any,
    dtype: Any = float32,
    buffer: Any = None,
    name: str = "",
    lazy_initialization: bool = False,
    **kw: Any,
) -> Tensor:
    return full(shape, 0, dtype, buffer, name, lazy_initialization)


def ones(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    return full(shape, 1, dtype, buffer, name, kw.get("lazy_initialization", False))


def zeros_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tensor:
    return full(x.shape, 0, dtype or x.dtype, buffer or _like_buffer(x), name)


def ones_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tensor:
    return full(x.shape, 1, dtype or x.dtype, buffer or _like_buffer(x), name)


def full_like(
    x: Any, fill_value: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any
) -> Tensor:
    return full(x.shape, fill_value, dtype or x.dtype, buffer or _like_buffer(x), name)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> Tensor:
    """A constant tensor in HBM built from host data (e.g. an identity matrix)."""
    ctx = current()
    line = ctx.line()
    values = np.asarray(constant)
    dtype = _dt.as_dtype(dtype) if dtype is not None else values.dtype
    tensor = Tensor(tuple(values.shape), dtype, SHARED_HBM, 0, values.astype(dtype) if ctx.numerics else None)
    ctx.register_tensor(tensor, ctx.name_at(line, "constant"), line)
    tensor.written = True
    return tensor


def reshape(x: Any, shape: Any) -> Tensor:
    """A tensor of a new shape over the same memory (HBM tensors, or whole tiles)."""
    ctx = current()
    line = ctx.line()
    if not isinstance(x, Tensor):
        raise ctx.error("err_unsupported_reshape", "only whole tensors can be reshaped", line)
    dims, block_dims = normalize_shape(shape)
    if _prod(dims) != _prod(x.shape):
        raise ctx.error("err_unsupported_reshape", f"cannot reshape {x.shape} to {dims}", line)
    if x.memory is not Memory.HBM:
        check_partitions(ctx, dims[block_dims], f"a tile of shape {dims}", line)
    data = x.data.reshape(dims) if x.data is not None else None
    tensor = Tensor(dims, x.dtype, x.buffer, block_dims, data)
    tensor.root = x.root
    tensor.written = x.written
    ctx.register_tensor(tensor, ctx.name_at(line, "reshaped"), line)
    return tensor


# --- data movement -------------------------------------------------------------------------


def load(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Tensor:
    """DMA a region of an HBM tensor into a new SBUF tile."""
    ctx = current()
    line = ctx.line()
    view = to_view(ctx, src, line)
    if view.tensor.memory is not Memory.HBM:
        raise ctx.error("err_unsupported_memory", "nl.load reads HBM; this tensor is already on chip", line)
    shape = view.shape if view.shape else (1,)
    check_partitions(ctx, shape[0], f"the loaded tile of shape {shape}", line)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view.tensor.dtype
    minfo = resolve_mask(ctx, mask, view.shape)
    guard_bounds(ctx, view, minfo)
    values = None
    if ctx.numerics:
        if minfo is not None and minfo.exact_box and view.shape == shape:
            values = view.restrict(minfo.ranges).read()
        else:
            values = view.read(clip=minfo is not None)
            if values.shape != shape:
                values = values.reshape(shape)
    tile = result_tile(ctx, shape, out_dtype, SBUF, line, "load", values, minfo)
    moved = view
    if minfo is not None and minfo.exact_box and view.shape == shape:
        moved = view.restrict(minfo.ranges)  # only the selected elements move
    chunk_bytes, chunks = dma_shape(moved)
    partitions, free = pf(moved.shape if moved.shape else shape)
    tile.producer = ctx.emit(
        Engine.DMA,
        "dma_load",
        partitions,
        free,
        dname(view.tensor.dtype),
        dname(out_dtype),
        (region_of(view, minfo),),
        (out_region(tile, minfo),),
        Memory.HBM,
        Memory.SBUF,
        line,
        bytes=partitions * free * view.tensor.dtype.itemsize,
        dma_chunk_bytes=chunk_bytes,
        dma_chunks=chunks,
    )
    return tile


def load_transpose2d(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Tensor:
    """DMA a [F, P] HBM region into a [P, F] SBUF tile (element-wise scatter: slow)."""
    ctx = current()
    line = ctx.line()
    view = to_view(ctx, src, line)
    if view.tensor.memory is not Memory.HBM or len(view.shape) != 2:
        raise ctx.error(
            "err_unsupported_memory", "nl.load_transpose2d reads a 2-D region of an HBM tensor", line
        )
    shape = (view.shape[1], view.shape[0])
    check_partitions(ctx, shape[0], f"the transposed tile of shape {shape}", line)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view.tensor.dtype
    values = view.read().T if ctx.numerics else None
    tile = result_tile(ctx, shape, out_dtype, SBUF, line, "load_transpose2d", values, None)
    partitions, free = pf(shape)
    itemsize = view.tensor.dtype.itemsize
    tile.producer = ctx.emit(
        Engine.DMA,
        "dma_load",
        partitions,
        free,
        dname(view.tensor.dtype),
        dname(out_dtype),
        (view.region(),),
        (tile.full_region(),),
        Memory.HBM,
        Memory.SBUF,
        line,
        bytes=partitions * free * itemsize,
        is_transpose=True,
        dma_chunk_bytes=itemsize,
        dma_chunks=partitions * free,
        extra={"transpose": True},
    )
    return tile


def store(dst: Any, value: Any, mask: Any = None, **_: Any) -> None:
    """DMA a tile into a region of an HBM tensor (a PSUM tile is first copied to SBUF)."""
    ctx = current()
    line = ctx.line()
    dview = to_view(ctx, dst, line)
    if dview.tensor.memory is not Memory.HBM:
        raise ctx.error(
            "err_unsupported_memory", "nl.store writes HBM; assign into on-chip tiles instead", line
        )
    if not isinstance(value, TileOps):
        raise ctx.error(
            "err_unsupported_operand", "nl.store needs a tile value (use nl.full for constants)", line
        )
    sview = to_view(ctx, value, line)
    if sview.tensor.memory is Memory.HBM:
        raise ctx.error("err_unsupported_memory", "nl.store's value must be an on-chip tile", line)
    if sview.tensor.memory is Memory.PSUM:
        staged = copy(sview)
        sview = to_view(ctx, staged, line)
    dparts = dview.shape[0] if dview.shape else 1
    sparts = sview.shape[0] if sview.shape else 1
    if dparts != sparts and _prod(dview.shape) != _prod(sview.shape):
        raise ctx.error(
            "err_num_partition_mismatch",
            f"storing a tile with {sparts} partitions into a region with {dparts} partitions",
            line,
        )
    if _prod(dview.shape) != _prod(sview.shape):
        raise ctx.error(
            "err_shape_mismatch",
            f"storing a tile of shape {sview.shape} into a region of shape {dview.shape}",
            line,
        )
    minfo = resolve_mask(ctx, mask, dview.shape)
    guard_bounds(ctx, dview, minfo)
    dma_copy(ctx, dview, sview, line, opcode="dma_store", mask=minfo)


# --- elementwise ---------------------------------------------------------------------------


def unary(
    ctx: KernelContext,
    line: int,
    spec: _ops.OpSpec,
    x: Any,
    dtype: Any = None,
    mask: Any = None,
    api: str = "",
) -> Tensor:
    if spec.transcendental:
        engine, legal, opcode = Engine.SCALAR, (Engine.SCALAR,), "activation"
    elif spec.trivial:
        engine, legal, opcode = Engine.UNASSIGNED, _ANY, "tensor_copy"
    else:
        engine, legal, opcode = Engine.UNASSIGNED, _ANY, "tensor_scalar"
    if opcode == "tensor_copy" and isinstance(x, (Tensor, View)) and x.memory is Memory.PSUM:
        opcode = "psum_copy"
        legal = (Engine.VECTOR, Engine.SCALAR)
    return elementwise(
        ctx,
        line,
        api=api or f"nl.{spec.name}",
        opcode=opcode,
        operands=(x,),
        compute=spec.fn,
        engine=engine,
        legal=legal,
        dtype=dtype,
        mask=mask,
        ops_per_element=0 if spec.trivial else 1,
        extra={"op": spec.name},
    )


def binary(
    ctx: KernelContext,
    line: int,
    spec: _ops.OpSpec,
    a: Any,
    b: Any,
    dtype: Any = None,
    mask: Any = None,
    api: str = "",
) -> Tensor:
    a_tile, b_tile = isinstance(a, TileOps), isinstance(b, TileOps)
    if not a_tile and not b_tile:
        raise ctx.error("err_unsupported_operand", f"nl.{spec.name} needs at least one tile operand", line)
    if a_tile and b_tile and _free_size(a) > 1 and _free_size(b) > 1:
        engine, legal, opcode = Engine.VECTOR, _VECTOR_ONLY, "tensor_tensor"
        max_psum = 1
    else:
        # a scalar or a per-partition [P, 1] column: a tensor_scalar instruction
        engine, legal, opcode = Engine.UNASSIGNED, _ANY, "tensor_scalar"
        max_psum = None
    main = 0 if a_tile and (not b_tile or _free_size(a) >= _free_size(b)) else 1
    return elementwise(
        ctx,
        line,
        api=api or f"nl.{spec.name}",
        opcode=opcode,
        operands=(a, b),
        compute=spec.fn,
        engine=engine,
        legal=legal,
        dtype=dtype,
        mask=mask,
        max_psum_inputs=max_psum,
        main=main,
        extra={"op": spec.name},
    )


def _free_size(x: Any) -> int:
    shape = x.shape
    return _prod(shape[1:]) if shape else 1


def apply_op(op: Any, *inputs: Any, dtype: Any = None, mask: Any = None) -> Tensor:
    """Apply an operator given as an object (numpy ufunc, nl function) to tiles/scalars."""
    ctx = current()
    line = ctx.line()
    spec = _ops.resolve(op)
    if spec.arity == 1:
        return unary(ctx, line, spec, inputs[0], dtype, mask)
    return binary(ctx, line, spec, inputs[0], inputs[1], dtype, mask)


def _make_unary(name: str) -> Any:
    spec = _ops.spec(name)

    def fn(x: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
        ctx = current()
        return unary(ctx, ctx.line(), spec, x, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of a tile."
    _ops.register(fn, name)
    return fn


def _make_binary(name: str) -> Any:
    spec = _ops.spec(name)

    def fn(x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
        ctx = current()
        return binary(ctx, ctx.line(), spec, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of two tiles (or a tile and a scalar)."
    _ops.register(fn, name)
    return fn


exp = _make_unary("exp")
log = _make_unary("log")
sqrt = _make_unary("sqrt")
rsqrt = _make_unary("rsqrt")
sigmoid = _make_unary("sigmoid")
tanh = _make_unary("tanh")
gelu = _make_unary("gelu")
gelu_apprx_tanh = _make_unary("gelu_apprx_tanh")
silu = _make_unary("silu")
softplus = _make_unary("softplus")
mish = _make_unary("mish")
erf = _make_unary("erf")
sin = _make_unary("sin")
cos = _make_unary("cos")
tan = _make_unary("tan")
arctan = _make_unary("arctan")
square = _make_unary("square")
abs = _make_unary("abs")
negative = _make_unary("negative")
reciprocal = _make_unary("reciprocal")
relu = _make_unary("relu")
sign = _make_unary("sign")
floor = _make_unary("floor")
ceil = _make_unary("ceil")
trunc = _make_unary("trunc")
logical_not = _make_unary("logical_not")
invert = _make_unary("invert")
bitwise_not = invert

add = _make_binary("add")
subtract = _make_binary("subtract")
multiply = _make_binary("multiply")
divide = _make_binary("divide")
maximum = _make_binary("maximum")
minimum = _make_binary("minimum")
power = _make_binary("power")
fmod = _make_binary("fmod")
mod = _make_binary("mod")
equal = _make_binary("equal")
not_equal = _make_binary("not_equal")
greater = _make_binary("greater")
greater_equal = _make_binary("greater_equal")
less = _make_binary("less")
less_equal = _make_binary("less_equal")
logical_and = _make_binary("logical_and")
logical_or = _make_binary("logical_or")
logical_xor = _make_binary("logical_xor")
bitwise_and = _make_binary("bitwise_and")
bitwise_or = _make_binary("bitwise_or")
bitwise_xor = _make_binary("bitwise_xor")
left_shift = _make_binary("left_shift")
right_shift = _make_binary("right_shift")


def copy(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
    """A copy of a tile into a new SBUF tile (PSUM → SBUF copies included)."""
    ctx = current()
    return unary(ctx, ctx.line(), _ops.spec("copy"), x, dtype, mask, api="nl.copy")


_ops.register(copy, "copy")


def identity(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
    ctx = current()
    return unary(ctx, ctx.line(), _ops.spec("copy"), x, dtype, mask, api="nl.identity")


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
    ctx = current()
    line = ctx.line()
    return elementwise(
        ctx,
        line,
        api="nl.where",
        opcode="select",
        operands=(condition, x, y),
        compute=lambda c, a, b: np.where(np.asarray(c) != 0, a, b),
        engine=Engine.VECTOR,
        legal=_VECTOR_ONLY,
        dtype=dtype,
        mask=mask,
        main=1,
    )


# --- reductions ----------------------------------------------------------------------------


def _axes(ctx: KernelContext, axis: Any, ndim: int, line: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(1, ndim)) if ndim > 1 else (0,)
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axes = tuple(sorted(int(a) % ndim for a in axis))
    return axes


def reduce(
    ctx: KernelContext,
    line: int,
    spec: _ops.OpSpec,
    x: Any,
    axis: Any,
    *,
    dtype: Any = None,
    keepdims: bool = False,
    mask: Any = None,
    negate: bool = False,
    mean: bool = False,
    engine: Engine | None = None,
    api: str = "",
) -> Tensor:
    """Reduce a tile along axes with a binary op (free axes on the Vector Engine)."""
    view = to_view(ctx, x, line)
    api = api or f"nl.{spec.name}"
    check_on_chip(ctx, view, api, line)
    if spec.reduce is None:
        raise ctx.error("err_unsupported_op", f"{spec.name} cannot be used as a reduction", line)
    axes = _axes(ctx, axis, len(view.shape), line)
    shape = (
        tuple(1 if i in axes else n for i, n in enumerate(view.shape))
        if keepdims
        else tuple(n for i, n in enumerate(view.shape) if i not in axes)
    )
    if not shape:
        shape = (1,)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view.tensor.dtype
    partition_reduce = 0 in axes and len(view.shape) > 1
    if engine is None:
        engine = Engine.GPSIMD if partition_reduce else Engine.VECTOR
    minfo = resolve_mask(ctx, mask, view.shape)
    values = None
    if ctx.numerics:
        data = read_values(view, minfo is not None)
        if minfo is not None and minfo.grid is not None:
            identity_value = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf, "multiply": 1.0}.get(
                spec.name, 0.0
            )
            data = np.where(np.broadcast_to(minfo.grid, view.shape), data, np.float32(identity_value))
        with np.errstate(all="ignore"):
            values = spec.reduce(data, axis=axes, keepdims=keepdims)
            if mean:
                values = values / np.float32(_prod([view.shape[a] for a in axes]))
            if negate:
                values = -values
        values = np.asarray(values, dtype=np.float32 if _dt.is_float(out_dtype) else values.dtype).reshape(
            shape
        )
    out = result_tile(ctx, shape, out_dtype, SBUF, line, "reduce", values, None)
    partitions, free = pf(view.shape)
    extra: dict[str, Any] = {"op": spec.name, "axes": list(axes)}
    if partition_reduce:
        extra["partition_reduce"] = True
    if negate:
        extra["negate"] = True
    out.producer = ctx.emit(
        engine,
        "tensor_reduce",
        partitions,
        free,
        dname(view.tensor.dtype),
        dname(out_dtype),
        (region_of(view, minfo),),
        (out.full_region(),),
        view.tensor.memory,
        Memory.SBUF,
        line,
        bytes=partitions * free * view.tensor.dtype.itemsize,
        vector_ops=partitions * free,
        extra=extra,
    )
    return out


def sum(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx, ctx.line(), _ops.spec("add"), x, axis, dtype=dtype, keepdims=keepdims, mask=mask, api="nl.sum"
    )


def max(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx,
        ctx.line(),
        _ops.spec("maximum"),
        x,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        api="nl.max",
    )


def min(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx,
        ctx.line(),
        _ops.spec("minimum"),
        x,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        api="nl.min",
    )


def prod(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx,
        ctx.line(),
        _ops.spec("multiply"),
        x,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        api="nl.prod",
    )


def mean(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx,
        ctx.line(),
        _ops.spec("add"),
        x,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        mean=True,
        api="nl.mean",
    )


def all(
    x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> Tensor:
    ctx = current()
    return reduce(
        ctx,
        ctx.line(),
        _ops.spec("minimum"),
        x,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        api="nl.all",
    )


def var(x: Any, axis: Any = None, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
    centered = subtract(x, mean(x, axis=axis, keepdims=True))
    return mean(square(centered), axis=axis, dtype=dtype)


_ops.register(sum, "add")
_ops.register(max, "maximum")
_ops.register(min, "minimum")


def softmax(x: Any, axis: Any = -1, dtype: Any = None, **_: Any) -> Tensor:
    """softmax along the free axis: max, exp(x - max), sum, reciprocal, multiply."""
    row_max = max(x, axis=axis, keepdims=True)
    shifted = exp(subtract(x, row_max))
    total = sum(shifted, axis=axis, keepdims=True)
    return multiply(shifted, reciprocal(total), dtype=dtype)


# --- tensor engine -------------------------------------------------------------------------


def matmul_record(
    ctx: KernelContext,
    line: int,
    stationary: View,
    moving: View,
    *,
    api: str,
    is_transpose: bool = False,
    strict: bool = True,
    mask: Any = None,
    dtype: Any = None,
) -> Tensor:
    """``stationary.T @ moving`` on the Tensor Engine into a new fp32 PSUM tile."""
    for v, role in ((stationary, "stationary"), (moving, "moving")):
        if v.tensor.memory is not Memory.SBUF:
            raise ctx.error(
                "err_unsupported_memory",
                f"{api}: the Tensor Engine reads only SBUF, but the {role} operand is in {v.tensor.memory.value.upper()}",
                line,
            )
    k, m = pf(stationary.shape)
    k2, n = pf(moving.shape)
    if k != k2:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"{api}: stationary has {k} partitions (K) but moving has {k2}; the contraction sizes must match",
            line,
        )
    for size, limit, what in (
        (k, MATMUL_MAX_K, "contraction (partition) size K"),
        (m, MATMUL_MAX_M, "stationary free size M"),
        (n, MATMUL_MAX_N, "moving free size N"),
    ):
        if size > limit:
            raise ctx.error(
                "err_size_of_dimension_exceed_arch_limit",
                f"{api}: {what} is {size}; at most {limit} is supported",
                line,
            )
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else float32
    if is_transpose and dtype is None:
        out_dtype = stationary.tensor.dtype
    values = None
    if ctx.numerics:
        s = read_values(stationary, False).reshape(k, m)
        mv = read_values(moving, False).reshape(k, n)
        values = s.T @ mv
        if is_transpose and dtype is None:
            values = values.astype(np.float32)
    shape = (m, *moving.shape[1:]) if len(moving.shape) > 2 else (m, n)
    if values is not None:
        values = values.reshape(shape)
    minfo = resolve_mask(ctx, mask, shape)
    out = result_tile(ctx, shape, out_dtype, PSUM, line, "matmul", values, minfo)
    fp32 = stationary.tensor.dtype == np.float32 or moving.tensor.dtype == np.float32
    flops = 2 * k * m * n * (2 if fp32 else 1)
    out.producer = ctx.emit(
        Engine.TENSOR,
        "transpose" if is_transpose else "nc_matmul",
        k,
        n,
        dname(stationary.tensor.dtype),
        dname(out_dtype),
        (stationary.region(), moving.region()),
        (out_region(out, minfo),),
        Memory.SBUF,
        Memory.PSUM,
        line,
        bytes=k * n * moving.tensor.dtype.itemsize,
        flops=flops,
        is_transpose=is_transpose,
        matmul_kmn=(k, m, n),
        extra={"api": api, "strict": strict},
    )
    return out


def tensor_engine_transpose(
    ctx: KernelContext, line: int, x: View, api: str, strict: bool, out_buffer: Buffer = PSUM
) -> Tensor:
    """A Tensor Engine transpose [P, F] → [F, P] into PSUM (a matmul with an identity)."""
    p, f = pf(x.shape)
    if x.tensor.memory is not Memory.SBUF:
        raise ctx.error(
            "err_unsupported_memory",
            f"{api}: the Tensor Engine reads only SBUF, but the tile is in {x.tensor.memory.value.upper()}",
            line,
        )
    check_partitions(ctx, f, f"the transposed tile ({f} partitions)", line)
    values = read_values(x, False).reshape(p, f).T if ctx.numerics else None
    out = result_tile(ctx, (f, p), x.tensor.dtype, out_buffer, line, "transpose", values, None)
    fp32 = x.tensor.dtype == np.float32
    out.producer = ctx.emit(
        Engine.TENSOR,
        "transpose",
        p,
        p,
        dname(x.tensor.dtype),
        dname(x.tensor.dtype),
        (x.region(),),
        (out.full_region(),),
        Memory.SBUF,
        out_buffer.memory,
        line,
        bytes=p * f * x.tensor.dtype.itemsize,
        flops=2 * p * f * p * (2 if fp32 else 1),
        is_transpose=True,
        matmul_kmn=(p, f, p),
        extra={"api": api, "strict": strict},
    )
    return out


def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **_: Any) -> Tensor:
    """``x @ y`` on the Tensor Engine into PSUM; without transpose_x, x is transposed there first."""
    ctx = current()
    line = ctx.line()
    xv = to_view(ctx, x, line)
    yv = to_view(ctx, y, line)
    if not transpose_x:
        # the compiler stages the transposed x in SBUF for the matmul
        xt = tensor_engine_transpose(ctx, line, xv, "nl.matmul", strict=False, out_buffer=SBUF)
        xv = to_view(ctx, xt, line)
    return matmul_record(ctx, line, xv, yv, api="nl.matmul", strict=False, mask=mask)


def transpose(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tensor:
    """Transpose a 2-D tile (Tensor Engine, then a PSUM → SBUF copy)."""
    ctx = current()
    line = ctx.line()
    xv = to_view(ctx, x, line)
    check_on_chip(ctx, xv, "nl.transpose", line)
    if xv.tensor.memory is Memory.PSUM:
        xv = to_view(ctx, copy(xv), line)
    t = tensor_engine_transpose(ctx, line, xv, "nl.transpose", strict=False)
    return unary(ctx, line, _ops.spec("copy"), t, dtype, mask, api="nl.transpose")


def broadcast_to(x: Any, shape: Any) -> Tensor:
    """Broadcast a tile: across partitions on the Tensor Engine (a matmul with ones), along the
    free axis with a copy."""
    ctx = current()
    line = ctx.line()
    view = to_view(ctx, x, line)
    check_on_chip(ctx, view, "broadcast_to", line)
    shape = tuple(int(s) for s in shape)
    src_shape = view.shape + (1,) * (len(shape) - len(view.shape))
    for s, d in zip(src_shape, shape):
        if s != d and s != 1:
            raise ctx.error(
                "err_shape_mismatch", f"cannot broadcast a tile of shape {view.shape} to {shape}", line
            )
    if src_shape == shape:
        return x if isinstance(x, Tensor) else copy(view)
    check_partitions(ctx, shape[0], f"the broadcast tile of shape {shape}", line)
    values = None
    if ctx.numerics:
        values = np.broadcast_to(read_values(view, False).reshape(src_shape), shape)
    out = result_tile(ctx, shape, view.tensor.dtype, SBUF, line, "broadcast", values, None)
    partitions, free = pf(shape)
    if src_shape[0] == 1 and shape[0] > 1:
        fp32 = view.tensor.dtype == np.float32
        out.producer = ctx.emit(
            Engine.TENSOR,
            "broadcast",
            1,
            free,
            dname(view.tensor.dtype),
            dname(view.tensor.dtype),
            (view.region(),),
            (out.full_region(),),
            view.tensor.memory,
            Memory.SBUF,
            line,
            bytes=_prod(view.shape) * view.tensor.dtype.itemsize,
            flops=2 * partitions * free * (2 if fp32 else 1),
            matmul_kmn=(1, partitions, free),
            extra={"api": "broadcast_to"},
        )
    else:
        legal = (Engine.VECTOR, Engine.SCALAR) if view.tensor.memory is Memory.PSUM else _ANY
        out.producer = ctx.emit(
            Engine.UNASSIGNED,
            "tensor_copy",
            partitions,
            free,
            dname(view.tensor.dtype),
            dname(view.tensor.dtype),
            (view.region(),),
            (out.full_region(),),
            view.tensor.memory,
            Memory.SBUF,
            line,
            bytes=_prod(view.shape) * view.tensor.dtype.itemsize,
            extra=unassigned_extra(Engine.UNASSIGNED, legal, {"api": "broadcast_to"}),
        )
    return out


# --- loop-carried reduction ----------------------------------------------------------------


def loop_reduce(
    x: Any, op: Any, loop_indices: Sequence[Any], dtype: Any = None, mask: Any = None, **_: Any
) -> Tensor:
    """Reduce `x` across iterations of the given loops: the first iteration initialises the
    accumulator, later ones combine into it with `op`. Returns the accumulator tile."""
    ctx = current()
    line = ctx.line()
    spec = _ops.resolve(op)
    if isinstance(loop_indices, (int, np.integer)):
        loop_indices = [loop_indices]
    loop_ids = {getattr(i, "loop_id", None) for i in loop_indices}
    if None in loop_ids:
        raise ctx.error(
            "err_unsupported_loop_reduce", "loop_indices must be loop variables of enclosing loops", line
        )
    view = to_view(ctx, x, line)
    check_on_chip(ctx, view, "nl.loop_reduce", line)
    frames = ctx.frames
    first = builtins.all(f.iteration == 0 for f in frames if f.loop_id in loop_ids)
    outer = tuple(f for f in frames if f.loop_id not in loop_ids)
    caller = sys._getframe(1)
    key = (caller.f_code, caller.f_lasti, outer)
    acc: Tensor | None = ctx.loop_reduce_state.get(key)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view.tensor.dtype
    minfo = resolve_mask(ctx, mask, view.shape)
    partitions, free = pf(view.shape)
    if first or acc is None:
        acc = Tensor(
            view.shape, out_dtype, SBUF, 0, new_data(view.shape, out_dtype) if ctx.numerics else None
        )
        ctx.register_tensor(acc, ctx.name_at(line, "loop_reduce"), line, alloc_loops=outer)
        acc.alloc_scopes = tuple(s for s in ctx.scopes if s.loop_id not in loop_ids)
        ctx.loop_reduce_state[key] = acc
        region = region_of(acc.full_view(), minfo)
        record = ctx.emit(
            Engine.UNASSIGNED,
            "tensor_copy",
            partitions,
            free,
            dname(view.tensor.dtype),
            dname(out_dtype),
            (region_of(view, minfo),),
            (region,),
            view.tensor.memory,
            Memory.SBUF,
            line,
            bytes=partitions * free * view.tensor.dtype.itemsize,
            extra=unassigned_extra(Engine.UNASSIGNED, _ANY, {"api": "loop_reduce"}),
        )
        ctx.note_write(acc, region, line, True)
        if ctx.numerics:
            acc.full_view().write(
                read_values(view, minfo is not None), mask=None if minfo is None else minfo.grid
            )
    else:
        # the running value lives where the kernel assigned it (e.g. `red[...] = nl.loop_reduce(...)`)
        target = acc.alias if acc.alias is not None else acc.full_view()
        region = region_of(target, minfo)
        record = ctx.emit(
            Engine.VECTOR,
            "tensor_tensor",
            partitions,
            free,
            dname(view.tensor.dtype),
            dname(out_dtype),
            (region_of(view, minfo), region),
            (region,),
            view.tensor.memory,
            Memory.SBUF,
            line,
            bytes=partitions * free * view.tensor.dtype.itemsize,
            vector_ops=partitions * free,
            extra={"op": spec.name, "api": "loop_reduce"},
        )
        ctx.note_write(target.tensor, region, line, True)
        if ctx.numerics:
            with np.errstate(all="ignore"):
                combined = spec.fn(read_values(target, False), read_values(view, minfo is not None))
            target.write(combined.reshape(target.shape), mask=None if minfo is None else minfo.grid)
    # assigning the result into a tile makes that tile the accumulator (no extra copy)
    acc.producer = record
    acc.fresh = acc.alias is None
    return acc
