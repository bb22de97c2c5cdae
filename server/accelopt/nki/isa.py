"""``neuronxcc.nki.isa`` (``nisa``) on numpy: one function per NeuronCore instruction, with the
engine fixed by the instruction (or chosen with ``engine=``) and the memory rules checked."""

from __future__ import annotations

import enum as _enum
import functools as _functools
import inspect as _inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki import dtypes as _dt
from accelopt.nki import language as _nl
from accelopt.nki import ops as _ops

# Imported helpers are bound to underscore names: kernels see this module as `nisa` (see language.py).
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.context import current as _current
from accelopt.nki.dtypes import dname as _dname
from accelopt.nki.fast import replay as _replay
from accelopt.nki.indexing import IndexExpr as _IndexExpr
from accelopt.nki.indexing import Predicate as _Predicate
from accelopt.nki.instructions import SBUF as _SBUF
from accelopt.nki.instructions import assign as _assign
from accelopt.nki.instructions import check_on_chip as _check_on_chip
from accelopt.nki.instructions import dma_copy as _dma_copy
from accelopt.nki.instructions import elementwise as _elementwise
from accelopt.nki.instructions import engine_of as _engine_of
from accelopt.nki.instructions import pf as _pf
from accelopt.nki.instructions import read_values as _read_values
from accelopt.nki.instructions import region_of as _region_of
from accelopt.nki.instructions import resolve_mask as _resolve_mask
from accelopt.nki.instructions import result_tile as _result_tile
from accelopt.nki.instructions import scalar_of as _scalar_of
from accelopt.nki.instructions import to_view as _to_view
from accelopt.nki.instructions import unassigned_extra as _unassigned_extra
from accelopt.nki.mx import activate2, nc_matmul_mx, quantize_mx  # noqa: F401 - kernel-facing
from accelopt.nki.target import get_nc_version, nc_version  # noqa: F401 - kernel-facing
from accelopt.nki.tensor import Tensor as _Tensor
from accelopt.nki.tensor import TileOps as _TileOps
from accelopt.nki.tensor import View as _View
from accelopt.nki.trace import Engine as _Engine
from accelopt.nki.trace import Memory as _Memory

_ANY = (_Engine.VECTOR, _Engine.SCALAR, _Engine.GPSIMD)
_VECTOR_ONLY = (_Engine.VECTOR, _Engine.GPSIMD)


class engine(_enum.Enum):
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    unknown = "unassigned"

    @property
    def trace_engine(self) -> _Engine:
        return _TRACE_ENGINE[self]


_TRACE_ENGINE = {member: _Engine(member.value) for member in engine}

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown




class reduce_cmd(_enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class oob_mode(_enum.Enum):
    error = 0
    skip = 1


class dge_mode(_enum.Enum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


# Legacy calls begin with this many tile arguments; the newer API puts `dst` in front of the
# same parameters (`nisa.tensor_tensor(out, a, b, op=nl.add)`). APIs whose newer signature is not
# `dst` + the legacy one (memset, iota, affine_select) or is ambiguous (tensor_tensor_scan, whose
# `initial` may be a tile) take `dst` only as a keyword.
_LEGACY_LEADING_TILES = {
    "nc_matmul": 2,
    "nc_transpose": 1,
    "activation": 0,
    "activation_reduce": 0,
    "tensor_scalar": 1,
    "scalar_tensor_tensor": 1,
    "tensor_tensor": 2,
    "tensor_reduce": 0,
    "tensor_copy": 1,
    "reciprocal": 1,
    "bn_stats": 1,
    "bn_aggr": 1,
}


def _split_positional_dst(
    args: tuple[Any, ...], kwargs: dict[str, Any], leading: int, names: tuple[str, ...]
) -> tuple[Any, tuple[Any, ...]]:
    """(dst, remaining args) for a newer-API call with `dst` first, else (None, args)."""
    tiles = 0
    for a in args:
        if not isinstance(a, _TileOps):
            break
        tiles += 1
    # one tile more than the legacy form starts with, or a keyword the positionals would also fill
    if tiles > leading:
        return args[0], args[1:]
    for name in names[: len(args)]:
        if name in kwargs:
            return args[0], args[1:]
    return None, args


def _writes_dst(fn: Callable[..., _Tensor]) -> Callable[..., Any]:
    """Accept the newer API's `dst` (keyword, or first positional where the newer signature is
    `dst` + the legacy parameters): the result is written into `dst` (and `dst` is returned),
    exactly as assigning the returned tile would."""
    leading = _LEGACY_LEADING_TILES.get(fn.__name__)
    names = tuple(_inspect.signature(fn).parameters)

    @_functools.wraps(fn)
    def wrapper(*args: Any, dst: Any = None, **kwargs: Any) -> Any:
        if (
            dst is None
            and leading is not None
            and args
            and (len(args) > leading or kwargs)  # else it cannot be the newer form
            and isinstance(args[0], _TileOps)
        ):
            dst, args = _split_positional_dst(args, kwargs, leading, names)
        result = fn(*args, **kwargs)
        if dst is None:
            return result
        target = dst._full_view() if isinstance(dst, _Tensor) else dst
        _assign(target, result)
        return dst

    return wrapper


def _engine(
    ctx: _KernelContext, requested: Any, default: _Engine, legal: tuple[_Engine, ...], api: str, line: int
) -> _Engine:
    if requested is None:
        return default
    return _engine_of(ctx, requested, default, legal, api, line)


# --- Tensor Engine -------------------------------------------------------------------------


@_writes_dst
def nc_matmul(
    stationary: Any,
    moving: Any,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    mask: Any = None,
    **_: Any,
) -> _Tensor:
    """``stationary.T @ moving`` into a new fp32 PSUM tile: stationary [K<=128, M<=128], moving
    [K, N<=512]. Accumulate with ``psum_tile[...] += nisa.nc_matmul(...)``."""
    ctx = _current()
    line = ctx.line()
    s = _to_view(ctx, stationary, line)
    m = _to_view(ctx, moving, line)
    out = _nl._matmul_record(
        ctx, line, s, m, api="nisa.nc_matmul", is_transpose=is_transpose, strict=True, mask=mask
    )
    if is_stationary_onezero or is_moving_onezero:
        assert out._producer is not None
        out._producer.extra["onezero"] = True
    return out


def _emit_vector_whole_tile(
    ctx: _KernelContext, line: int, opcode: str, view: _View, out: _Tensor, out_dtype: Any, **costs: Any
) -> None:
    """Record a Vector Engine instruction that reads all of ``view`` (unmasked) into the new SBUF
    tile ``out``; ``costs`` are the instruction's own extra fields (vector_ops, is_transpose)."""
    p, f = _pf(view.shape)
    out._producer = ctx.emit(
        _Engine.VECTOR,
        opcode,
        p,
        f,
        _dname(view._tensor.dtype),
        _dname(out_dtype),
        (view._region(),),
        (out._full_region(),),
        view._tensor.memory,
        _Memory.SBUF,
        line,
        bytes=p * f * view._tensor.dtype.itemsize,
        **costs,
    )


@_writes_dst
def nc_transpose(data: Any, mask: Any = None, dtype: Any = None, engine: Any = None, **_: Any) -> _Tensor:
    """Transpose a tile: on the Tensor Engine into PSUM (default), or on the Vector Engine
    (at most 32x32) into SBUF.

    Per the nc_transpose reference page: the Tensor Engine reads SBUF and writes PSUM; the Vector
    Engine reads and writes SBUF or PSUM; without `engine` the compiler picks by shape. So with no
    engine given, a PSUM input of at most 32x32 goes to the Vector Engine, and a Tensor Engine
    result assigned into an SBUF tile lands there through a PSUM -> SBUF copy (what the compiler
    emits); an explicit ``engine=nisa.tensor_engine`` result still writes only PSUM."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, data, line)
    _check_on_chip(ctx, view, "nisa.nc_transpose", line)
    compiler_choice = engine is None or engine is unknown_engine
    if compiler_choice and view._tensor.memory is _Memory.PSUM:
        p, f = _pf(view.shape)
        if p <= 32 and f <= 32:
            engine = vector_engine
    chosen = _engine(ctx, engine, _Engine.TENSOR, (_Engine.TENSOR, _Engine.VECTOR), "nisa.nc_transpose", line)
    if chosen is _Engine.UNASSIGNED:
        chosen = _Engine.TENSOR
    if chosen is _Engine.VECTOR:
        p, f = _pf(view.shape)
        if p > 32 or f > 32:
            raise ctx.error(
                "err_size_of_dimension_exceed_arch_limit",
                f"a Vector Engine transpose handles at most 32x32, got {p}x{f}",
                line,
            )
        out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
        values = _read_values(view, False).reshape(p, f).T if ctx.numerics else None
        out = _result_tile(ctx, (f, p), out_dtype, _SBUF, line, "transpose", values, None)
        _emit_vector_whole_tile(ctx, line, "transpose", view, out, out_dtype, is_transpose=True)
        return out
    return _nl._tensor_engine_transpose(ctx, line, view, "nisa.nc_transpose", strict=not compiler_choice)


# --- Scalar Engine -------------------------------------------------------------------------


def _is_trivial_scale(scale: Any) -> bool:
    return not isinstance(scale, _TileOps) and float(_scalar_of(scale)) == 1.0


@_writes_dst
def activation(
    op: Any,
    data: Any,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: Any = None,
    reduce_cmd: Any = None,
    dtype: Any = None,
    mask: Any = None,
    **_: Any,
) -> _Tensor:
    """``op(data * scale + bias)`` on the Scalar Engine; bias a [P, 1] tile, scale a scalar or
    [P, 1] tile. With reduce_op/reduce_res the free-axis reduction of the result is written too."""
    ctx = _current()
    return _activation(
        ctx, ctx.line(), op, data, bias, scale, reduce_op, reduce_res, dtype, mask, "nisa.activation"
    )


@_writes_dst
def activation_reduce(
    op: Any,
    data: Any,
    reduce_op: Any = None,
    reduce_res: Any = None,
    bias: Any = None,
    scale: Any = 1.0,
    dtype: Any = None,
    mask: Any = None,
    **_: Any,
) -> _Tensor:
    ctx = _current()
    return _activation(
        ctx,
        ctx.line(),
        op,
        data,
        bias,
        scale,
        reduce_op or np.add,
        reduce_res,
        dtype,
        mask,
        "nisa.activation_reduce",
    )


def _activation(
    ctx: _KernelContext,
    line: int,
    op: Any,
    data: Any,
    bias: Any,
    scale: Any,
    reduce_op: Any,
    reduce_res: Any,
    dtype: Any,
    mask: Any,
    api: str,
) -> _Tensor:
    spec = _ops.resolve(op)
    if spec.arity != 1:
        raise ctx.error("err_unsupported_op", f"{api}: op must be a unary function, got {spec.name}", line)
    scale_tile = isinstance(scale, _TileOps)
    operands: list[Any] = [data]
    if bias is not None:
        operands.append(bias)
    operands.append(scale if scale_tile else float(_scalar_of(scale)))
    has_bias = bias is not None

    def compute(x: np.ndarray, *rest: Any) -> np.ndarray:
        if has_bias:
            b, s = rest
        else:
            (s,) = rest
            b = None
        y = x * s if not (isinstance(s, float) and s == 1.0) else x
        if b is not None:
            y = y + b
        return spec.fn(np.asarray(y, dtype=np.float32))

    ops_per_element = (
        (0 if spec.trivial else 1) + (0 if _is_trivial_scale(scale) else 1) + (1 if has_bias else 0)
    )
    out = _elementwise(
        ctx,
        line,
        api=api,
        opcode="activation",
        operands=operands,
        compute=compute,
        engine=_Engine.SCALAR,
        legal=(_Engine.SCALAR,),
        dtype=dtype,
        mask=mask,
        ops_per_element=ops_per_element,
        extra={"op": spec.name, "has_bias": has_bias, "has_scale": not _is_trivial_scale(scale)},
    )
    if reduce_res is not None:
        _attach_reduce(ctx, line, out, reduce_op or np.add, reduce_res, api)
    return out


def _attach_reduce(
    ctx: _KernelContext, line: int, out: _Tensor, reduce_op: Any, reduce_res: Any, api: str
) -> None:
    """Fold a free-axis reduction of `out` into the instruction that produced it."""
    rspec = _ops.resolve(reduce_op)
    if rspec.reduce is None:
        raise ctx.error("err_unsupported_op", f"{api}: {rspec.name} cannot reduce", line)
    dst = _to_view(ctx, reduce_res, line)
    _check_on_chip(ctx, dst, api, line)
    record = out._producer
    assert record is not None
    region = dst._region()
    record.opcode = "activation_reduce"
    record.writes = (*record.writes, region)
    record.vector_ops += out.shape[0] * (int(np.prod(out.shape[1:])) if len(out.shape) > 1 else 1)
    record.extra["has_reduce"] = True
    record.extra["reduce_op"] = rspec.name
    ctx.note_write(dst._tensor, region, line, False)
    if ctx.numerics:
        values = out._exact if out._exact is not None else out._data
        assert values is not None
        axes = tuple(range(1, values.ndim))
        reduced = rspec.reduce(np.asarray(values, dtype=np.float32), axis=axes, keepdims=True)
        dst._write(reduced.reshape(dst.shape) if reduced.size == int(np.prod(dst.shape)) else reduced)


# --- Vector / any engine -------------------------------------------------------------------


@_writes_dst
def tensor_scalar(
    data: Any,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_: Any,
) -> _Tensor:
    """``op1(op0(data, operand0), operand1)`` with scalar or [P, 1] operands; reverseN swaps the
    operands of opN."""
    ctx = _current()
    line = ctx.line()
    spec0 = _ops.resolve(op0)
    spec1 = _ops.resolve(op1) if op1 is not None else None
    chosen = _engine(ctx, engine, _Engine.UNASSIGNED, _ANY, "nisa.tensor_scalar", line)
    operands: list[Any] = [data, operand0 if isinstance(operand0, _TileOps) else _scalar_of(operand0)]
    if spec1 is not None:
        operands.append(operand1 if isinstance(operand1, _TileOps) else _scalar_of(operand1))

    def compute(x: np.ndarray, a: Any, b: Any = None) -> np.ndarray:
        y = spec0.fn(a, x) if reverse0 else spec0.fn(x, a)
        if spec1 is not None:
            y = spec1.fn(b, y) if reverse1 else spec1.fn(y, b)
        return y

    return _elementwise(
        ctx,
        line,
        api="nisa.tensor_scalar",
        opcode="tensor_scalar",
        operands=operands,
        compute=compute,
        engine=chosen,
        legal=_ANY,
        dtype=dtype,
        mask=mask,
        ops_per_element=1 if spec1 is None else 2,
        extra={"op": spec0.name, "op1": spec1.name if spec1 else None, "num_ops": 1 if spec1 is None else 2},
    )


@_writes_dst
def scalar_tensor_tensor(
    data: Any,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_: Any,
) -> _Tensor:
    """``op1(op0(data, operand0), operand1)`` where operand1 is a tile."""
    ctx = _current()
    line = ctx.line()
    spec0 = _ops.resolve(op0)
    spec1 = _ops.resolve(op1)
    chosen = _engine(ctx, engine, _Engine.VECTOR, _VECTOR_ONLY, "nisa.scalar_tensor_tensor", line)

    def compute(x: np.ndarray, a: Any, b: np.ndarray) -> np.ndarray:
        y = spec0.fn(a, x) if reverse0 else spec0.fn(x, a)
        return spec1.fn(b, y) if reverse1 else spec1.fn(y, b)

    return _elementwise(
        ctx,
        line,
        api="nisa.scalar_tensor_tensor",
        opcode="scalar_tensor_tensor",
        operands=[data, operand0 if isinstance(operand0, _TileOps) else _scalar_of(operand0), operand1],
        compute=compute,
        engine=chosen,
        legal=_VECTOR_ONLY,
        dtype=dtype,
        mask=mask,
        ops_per_element=2,
        max_psum_inputs=1,
        extra={"op": spec0.name, "op1": spec1.name, "num_ops": 2},
    )


@_writes_dst
def tensor_tensor(
    data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any
) -> _Tensor:
    """Elementwise ``op(data1, data2)`` of two tiles (at most one of them in PSUM)."""
    ctx = _current()
    line = ctx.line()
    spec = _ops.resolve(op)
    chosen = _engine(ctx, engine, _Engine.VECTOR, _VECTOR_ONLY, "nisa.tensor_tensor", line)
    return _elementwise(
        ctx,
        line,
        api="nisa.tensor_tensor",
        opcode="tensor_tensor",
        operands=(data1, data2),
        compute=spec.fn,
        engine=chosen,
        legal=_VECTOR_ONLY,
        dtype=dtype,
        mask=mask,
        max_psum_inputs=1,
        extra={"op": spec.name},
    )


@_writes_dst
def tensor_tensor_scan(
    data0: Any,
    data1: Any,
    initial: Any,
    op0: Any,
    op1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    **_: Any,
) -> _Tensor:
    """Per partition along the free axis: ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` with
    ``r[-1] = initial`` (a scalar or [P, 1] tile)."""
    ctx = _current()
    line = ctx.line()
    spec0 = _ops.resolve(op0)
    spec1 = _ops.resolve(op1)
    operands: list[Any] = [data0, data1, initial if isinstance(initial, _TileOps) else _scalar_of(initial)]

    def compute(d0: np.ndarray, d1: np.ndarray, init: Any) -> np.ndarray:
        shape = np.broadcast_shapes(d0.shape, d1.shape)
        p = shape[0]
        d0 = np.broadcast_to(d0, shape).reshape(p, -1)
        d1 = np.broadcast_to(d1, shape).reshape(p, -1)
        # columns as contiguous rows: one vectorised step per free position
        a = np.ascontiguousarray(d0.T, dtype=np.float32)
        b = np.ascontiguousarray(d1.T, dtype=np.float32)
        out = np.empty_like(a)
        r = np.broadcast_to(np.asarray(init, dtype=np.float32).reshape(-1), (p,)).copy()
        f0, f1 = spec0.fn, spec1.fn
        fast = spec0.name == "multiply" and spec1.name == "add" and not reverse0 and not reverse1
        for i in range(a.shape[0]):
            if fast:
                np.multiply(a[i], r, out=r)
                np.add(r, b[i], out=r)
            else:
                t = f0(r, a[i]) if reverse0 else f0(a[i], r)
                r = np.asarray(f1(b[i], t) if reverse1 else f1(t, b[i]), dtype=np.float32)
            out[i] = r
        return out.T.reshape(shape)

    return _elementwise(
        ctx,
        line,
        api="nisa.tensor_tensor_scan",
        opcode="tensor_tensor_scan",
        operands=operands,
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=dtype,
        mask=mask,
        ops_per_element=2,
        max_psum_inputs=1,
        extra={"op": spec0.name, "op1": spec1.name},
    )


@_writes_dst
def tensor_reduce(
    op: Any,
    data: Any,
    axis: Any,
    negate: bool = False,
    keepdims: bool = False,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_: Any,
) -> _Tensor:
    """Reduce along free axes with `op`; `negate` flips the sign of the result."""
    ctx = _current()
    line = ctx.line()
    chosen = _engine(ctx, engine, _Engine.VECTOR, _VECTOR_ONLY, "nisa.tensor_reduce", line)
    return _nl._reduce(
        ctx,
        line,
        _ops.resolve(op),
        data,
        axis,
        dtype=dtype,
        keepdims=keepdims,
        mask=mask,
        negate=negate,
        engine=chosen,
        api="nisa.tensor_reduce",
    )


@_writes_dst
def tensor_copy(src: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> _Tensor:
    ctx = _current()
    line = ctx.line()
    chosen = _engine(ctx, engine, _Engine.UNASSIGNED, _ANY, "nisa.tensor_copy", line)
    out = _nl._unary(ctx, line, _ops.spec("copy"), src, dtype, mask, api="nisa.tensor_copy")
    record = out._producer
    assert record is not None
    if chosen is not _Engine.UNASSIGNED:
        if chosen is _Engine.GPSIMD and record.src_memory is _Memory.PSUM:
            raise ctx.error("err_unsupported_memory", "the GpSimd engine cannot access PSUM", line)
        record.engine = chosen
        record.extra.pop("engines", None)
    return out


@_writes_dst
def reciprocal(data: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any) -> _Tensor:
    ctx = _current()
    line = ctx.line()
    # The API's default engine is "unknown": the compiler picks Vector or Scalar (the ISA
    # reference: Vector is ~8x slower on large tiles), so the timing model places it.
    legal = (_Engine.VECTOR, _Engine.SCALAR)
    chosen = _engine(ctx, engine, _Engine.UNASSIGNED, legal, "nisa.reciprocal", line)
    spec = _ops.spec("reciprocal")
    return _elementwise(
        ctx,
        line,
        api="nisa.reciprocal",
        opcode="reciprocal",
        operands=(data,),
        compute=spec.fn,
        engine=chosen,
        legal=legal,
        dtype=dtype,
        mask=mask,
        extra={"op": "reciprocal"},
    )


@_writes_dst
def memset(
    shape: Any, value: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any
) -> _Tensor:
    """A new SBUF tile filled with `value`."""
    ctx = _current()
    line = ctx.line()
    dims = tuple(int(s) for s in shape)
    chosen = _engine(ctx, engine, _Engine.UNASSIGNED, _ANY, "nisa.memset", line)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.float32
    fill = _scalar_of(value)
    minfo = _resolve_mask(ctx, mask, dims)
    values = (
        np.full(dims, fill, dtype=np.float32 if _dt.is_float(out_dtype) else out_dtype)
        if ctx.numerics
        else None
    )
    out = _result_tile(ctx, dims, out_dtype, _SBUF, line, "memset", values, minfo)
    p, f = _pf(dims)
    out._producer = ctx.emit(
        chosen,
        "memset",
        p,
        f,
        _dname(out_dtype),
        _dname(out_dtype),
        (),
        (_region_of(out._full_view(), minfo),),
        None,
        _Memory.SBUF,
        line,
        bytes=p * f * out_dtype.itemsize,
        extra=_unassigned_extra(chosen, _ANY, {"value": float(fill)}),
    )
    return out


# --- GpSimd ---------------------------------------------------------------------------------


@_writes_dst
def iota(expr: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """A tile holding the values of an index expression (e.g. ``nl.arange(128)[:, None]``)."""
    ctx = _current()
    line = ctx.line()
    if isinstance(expr, (int, np.integer)):
        expr = _IndexExpr((1, 1), (0, 0), int(expr))
    if not isinstance(expr, _IndexExpr):
        raise ctx.error("err_unsupported_operand", "nisa.iota takes an nl.arange expression", line)
    shape = expr.sizes if len(expr.sizes) >= 2 else (*expr.sizes, 1)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.int32
    minfo = _resolve_mask(ctx, mask, shape)
    values = expr.materialize().reshape(shape) if ctx.numerics else None
    out = _result_tile(ctx, shape, out_dtype, _SBUF, line, "iota", values, minfo)
    p, f = _pf(shape)
    out._producer = ctx.emit(
        _Engine.GPSIMD,
        "iota",
        p,
        f,
        _dname(out_dtype),
        _dname(out_dtype),
        (),
        (_region_of(out._full_view(), minfo),),
        None,
        _Memory.SBUF,
        line,
        bytes=p * f * out_dtype.itemsize,
        vector_ops=p * f,
    )
    return out


@_writes_dst
def affine_select(
    pred: Any, on_true_tile: Any, on_false_value: Any, dtype: Any = None, mask: Any = None, **_: Any
) -> _Tensor:
    """``where(pred, on_true_tile, on_false_value)`` with an affine predicate over the tile's
    index grid (e.g. a causal mask), on GpSimd."""
    ctx = _current()
    line = ctx.line()
    if not isinstance(pred, _Predicate):
        raise ctx.error(
            "err_unsupported_operand", "nisa.affine_select needs a predicate over nl.arange grids", line
        )
    fill = float(_scalar_of(on_false_value))
    view = _to_view(ctx, on_true_tile, line)
    if view._tensor.memory is _Memory.PSUM:
        raise ctx.error("err_unsupported_memory", "the GpSimd engine cannot access PSUM", line)
    shape = view.shape

    def compute(x: np.ndarray) -> np.ndarray:
        grid = np.broadcast_to(pred.materialize(), shape)
        return np.where(grid, x, np.float32(fill))

    return _elementwise(
        ctx,
        line,
        api="nisa.affine_select",
        opcode="affine_select",
        operands=(view,),
        compute=compute,
        engine=_Engine.GPSIMD,
        legal=(_Engine.GPSIMD,),
        dtype=dtype,
        mask=mask,
        extra={"value": fill},
    )


# --- batch-norm statistics -----------------------------------------------------------------

_BN_STATS_FMAX = 512
_BN_STATS_DIM = 6
_BN_AGGR_DIM = 2


@_writes_dst
def bn_stats(data: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """Per-partition statistics of up to 512 free elements as [P, 6] (count, mean and M2 of the
    even and the odd elements); combine with `bn_aggr`."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, data, line)
    _check_on_chip(ctx, view, "nisa.bn_stats", line)
    p, f = _pf(view.shape)
    if f > _BN_STATS_FMAX:
        raise ctx.error(
            "err_size_of_dimension_exceed_arch_limit",
            f"nisa.bn_stats takes at most {_BN_STATS_FMAX} free elements per partition, got {f}",
            line,
        )
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.float32
    values = None
    if ctx.numerics:
        x = _read_values(view, False).reshape(p, f).astype(np.float64)
        cols = []
        for half in (x[:, 0::2], x[:, 1::2]):
            n = half.shape[1]
            mean = half.mean(axis=1) if n else np.zeros(p)
            m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(p)
            cols += [np.full(p, n, dtype=np.float64), mean, m2]
        values = np.stack(cols, axis=1).astype(np.float32)
    out = _result_tile(ctx, (p, _BN_STATS_DIM), out_dtype, _SBUF, line, "bn_stats", values, None)
    _emit_vector_whole_tile(ctx, line, "bn_stats", view, out, out_dtype, vector_ops=2 * p * f)
    return out


@_writes_dst
def bn_aggr(data: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """Combine bn_stats groups ([P, 6*k]) into [P, 2] = (mean, variance)."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, data, line)
    _check_on_chip(ctx, view, "nisa.bn_aggr", line)
    p, f = _pf(view.shape)
    if f % _BN_STATS_DIM:
        raise ctx.error(
            "err_shape_mismatch", f"nisa.bn_aggr expects a multiple of 6 statistics, got {f}", line
        )
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.float32
    values = None
    if ctx.numerics:
        stats = _read_values(view, False).reshape(p, f // 3, 3).astype(np.float64)
        counts, means, m2s = stats[..., 0], stats[..., 1], stats[..., 2]
        total = counts.sum(axis=1)
        safe = np.where(total > 0, total, 1)
        mean = (counts * means).sum(axis=1) / safe
        m2 = (m2s + counts * (means - mean[:, None]) ** 2).sum(axis=1)
        values = np.stack([mean, m2 / safe], axis=1).astype(np.float32)
    out = _result_tile(ctx, (p, _BN_AGGR_DIM), out_dtype, _SBUF, line, "bn_aggr", values, None)
    _emit_vector_whole_tile(ctx, line, "bn_aggr", view, out, out_dtype, vector_ops=p * f)
    return out


# --- DMA ------------------------------------------------------------------------------------


def dma_copy(dst: Any = None, src: Any = None, mask: Any = None, **_: Any) -> None:
    """Copy between HBM and SBUF (or HBM and HBM) on a DMA queue."""
    ctx = _current()
    line = ctx.line()
    dview = _to_view(ctx, dst, line)
    sview = _to_view(ctx, src, line)
    minfo = _resolve_mask(ctx, mask, dview.shape)
    _dma_copy(ctx, dview, sview, line, mask=minfo)


# Trace-only runs replay repeated calls of these from the same kernel statement (see replay.py).
_replay.make_replayable(
    globals(),
    (
        "nc_matmul",
        "nc_transpose",
        "activation",
        "activation_reduce",
        "tensor_scalar",
        "scalar_tensor_tensor",
        "tensor_tensor",
        "tensor_tensor_scan",
        "tensor_reduce",
        "tensor_copy",
        "reciprocal",
        "memset",
        "iota",
        "affine_select",
        "bn_stats",
        "bn_aggr",
        "dma_copy",
    ),
)
