"""``neuronxcc.nki.isa`` (``nisa``) on numpy: one function per NeuronCore instruction, with the
engine fixed by the instruction (or chosen with ``engine=``) and the memory rules checked."""

from __future__ import annotations

import enum as _enum
import functools as _functools
import inspect as _inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki import calllog as _calllog
from accelopt.nki import context as _context
from accelopt.nki import dtypes as _dt
from accelopt.nki import language as _nl
from accelopt.nki import ops as _ops

# Imported helpers are bound to underscore names: kernels see this module as `nisa` (see language.py).
from accelopt.nki.activation import attach_reduce as _attach_reduce
from accelopt.nki.activation import scalar_activation as _scalar_activation
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.context import current as _current
from accelopt.nki.dtypes import dname as _dname
from accelopt.nki.fast import replay as _replay
from accelopt.nki.indexing import IndexExpr as _IndexExpr
from accelopt.nki.indexing import Predicate as _Predicate
from accelopt.nki.instructions import SBUF as _SBUF
from accelopt.nki.instructions import TENSOR_ENGINE_OPS as _TENSOR_ENGINE_OPS
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
from accelopt.nki.registers import (  # noqa: F401 - kernel-facing
    NkiScalar,
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
)
from accelopt.nki.target import get_nc_version, nc_version  # noqa: F401 - kernel-facing
from accelopt.nki.tensor import Tensor as _Tensor
from accelopt.nki.tensor import TileOps as _TileOps
from accelopt.nki.tensor import View as _View
from accelopt.nki.trace import Engine as _Engine
from accelopt.nki.trace import Memory as _Memory
from accelopt.nki.unsupported import module_getattr as _module_getattr
from accelopt.nki.unsupported import not_supported as _not_supported

_ANY = (_Engine.VECTOR, _Engine.SCALAR, _Engine.GPSIMD)
_VECTOR_ONLY = (_Engine.VECTOR, _Engine.GPSIMD)

# a listed NKI name this module does not define is refused NKI-style (unsupported.py)
__getattr__ = _module_getattr("nki.isa")


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
    "tensor_partition_reduce": 0,
    "tensor_copy": 1,
    "dma_transpose": 1,
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
        if dst is None and args and isinstance(args[0], _TileOps):
            ctx = _context._ACTIVE
            if ctx is not None and not ctx.api.legacy:
                # the nki.* language: `dst` is always the first argument (NKI migration guide)
                dst, args = args[0], args[1:]
            elif leading is not None and (len(args) > leading or kwargs):
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


def _nc_matmul_result(
    stationary: Any,
    moving: Any,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    mask: Any = None,
    perf_mode: Any = None,
    **_: Any,
) -> _Tensor:
    """``stationary.T @ moving`` into a new fp32 PSUM tile: stationary [K<=128, M<=128], moving
    [K, N<=512]. Accumulate with ``psum_tile[...] += nisa.nc_matmul(...)``. ``perf_mode=
    double_row`` (NeuronCore-v3 and newer, FP8 operands): stationary [K, 2, M] and moving
    [K, 2, N] contract over both rows of every partition (nki.isa.nc_matmul, "Performance
    mode"; the [K, 2, F] layout is the one the SDK's double-row example uses)."""
    ctx = _current()
    line = ctx.line()
    s = _to_view(ctx, stationary, line)
    m = _to_view(ctx, moving, line)
    rows = _double_row_checked(ctx, line, s, m) if _is_double_row(perf_mode) else 1
    out = _nl._matmul_record(
        ctx,
        line,
        s,
        m,
        api="nisa.nc_matmul",
        is_transpose=is_transpose,
        strict=True,
        mask=mask,
        rows_per_partition=rows,
    )
    if is_stationary_onezero or is_moving_onezero:
        assert out._producer is not None
        out._producer.extra["onezero"] = True
    return out


def _is_double_row(perf_mode: Any) -> bool:
    if perf_mode is None or perf_mode is matmul_perf_mode.none or perf_mode == "none":
        return False
    if perf_mode is matmul_perf_mode.double_row or perf_mode in ("double_row", "double_row_gen3"):
        return True
    raise _current().error("err_invalid_argument", f"nisa.nc_matmul: unknown perf_mode {perf_mode!r}")


_FP8 = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn"})


def _double_row_checked(ctx: _KernelContext, line: int, s: _View, m: _View) -> int:
    if ctx.target == "trn1":
        raise ctx.error(
            "err_unsupported_on_target",
            "nisa.nc_matmul: perf_mode=double_row needs NeuronCore-v3 or newer (trn2, trn3); "
            "on NeuronCore-v2 performance modes are not supported",
            line,
        )
    for view, role in ((s, "stationary"), (m, "moving")):
        if _dname(view._tensor.dtype) not in _FP8:
            raise ctx.error(
                "err_unsupported_dtype",
                f"nisa.nc_matmul: perf_mode=double_row takes FP8 operands; the {role} is {_dname(view._tensor.dtype)}",
                line,
            )
        if len(view.shape) != 3 or view.shape[1] != 2:
            raise ctx.error(
                "err_invalid_shape",
                f"nisa.nc_matmul: perf_mode=double_row needs the {role} as [K, 2, F]; got {view.shape}",
                line,
            )
    return 2


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
    _check_reduce_cmd(reduce_cmd, "nisa.activation")
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
    return _scalar_activation(
        ctx,
        line,
        api,
        operands,
        compute,
        dtype=dtype,
        mask=mask,
        ops_per_element=ops_per_element,
        extra={"op": spec.name, "has_bias": has_bias, "has_scale": not _is_trivial_scale(scale)},
        reduce_op=reduce_op,
        reduce_res=reduce_res,
    )


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
        extra={
            "op": spec0.name,
            "op1": spec1.name if spec1 else None,
            "num_ops": 1 if spec1 is None else 2,
            # which operands are [P, 1] tiles (the rest are constants): the timing model's engine
            # choice depends on it (profiling/lowering.py)
            "tile_operands": [isinstance(operand0, _TileOps), isinstance(operand1, _TileOps)],
        },
    )


# the returning form, for tensor_scalar_reduce
_tensor_scalar_result: Callable[..., Any] = tensor_scalar.__wrapped__  # type: ignore[attr-defined]


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


def _dynamic_copy(src: Any, dtype: Any, mask: Any, engine: Any, api: str) -> _Tensor:
    """A tensor_copy whose source or destination is placed by a run-time offset (NKI API
    reference v2.26, tensor_copy_dynamic_src/dst). The offset lives in the tile-indexed view
    (views.dynamic_offset_view), so the copy itself is an ordinary tensor_copy record that also
    reads the offset tile. The pages give a minimum initiation interval of roughly 600 cycles
    for dynamic locations; the timing model does not model that minimum yet (the record is
    marked `dynamic` for it)."""
    out = tensor_copy(src, dtype=dtype, mask=mask, engine=engine)
    record = out._producer
    assert record is not None
    record.extra["api"] = api
    record.extra["dynamic"] = True
    return out


@_writes_dst
def tensor_copy_dynamic_src(
    src: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any
) -> _Tensor:
    """Copy `src`, a tile indexed at a run-time offset (``tile[ix, offsets[0, i] + iy]``)."""
    return _dynamic_copy(src, dtype, mask, engine, "nisa.tensor_copy_dynamic_src")


@_writes_dst
def tensor_copy_dynamic_dst(
    src: Any, dtype: Any = None, mask: Any = None, engine: Any = None, **_: Any
) -> _Tensor:
    """Copy `src` into `dst=`, a tile indexed at a run-time offset (the write goes through the
    tile-indexed view, which `_writes_dst` assigns)."""
    return _dynamic_copy(src, dtype, mask, engine, "nisa.tensor_copy_dynamic_dst")


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


def _drop_draws(data: np.ndarray) -> np.ndarray:
    """Uniform draws in [0, 1), one per element, for dropout. The hardware's random stream is not
    public, so the emulator's is a fixed hash of each element's value and position: the same
    tile always drops the same elements (a run, its verified re-run and its fast paths agree),
    and no kernel-visible state is involved."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    position = np.arange(bits.size, dtype=np.uint64).reshape(bits.shape)
    mixed = (
        bits * np.uint64(0x9E3779B1) + position * np.uint64(0x85EBCA77) + np.uint64(0x27D4EB2F)
    ) & np.uint64(0xFFFFFFFF)
    mixed ^= mixed >> np.uint64(15)
    mixed = (mixed * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    mixed ^= mixed >> np.uint64(12)
    return (mixed & np.uint64(0xFFFFFF)).astype(np.float64) / float(1 << 24)


def _dropped(data: np.ndarray, prob: Any) -> np.ndarray:
    """`data` with each element replaced by zero with probability `prob` (a scalar, or one
    value per partition); the kept elements are not rescaled (nki.isa.dropout)."""
    return np.where(_drop_draws(data) < np.asarray(prob, dtype=np.float64), 0.0, data)


@_writes_dst
def dropout(data: Any, prob: Any, mask: Any = None, dtype: Any = None, **_: Any) -> _Tensor:
    """Zero each element of `data` with drop probability `prob` (a scalar, or a [P, 1] tile:
    one probability per partition) on the Vector Engine (nki.isa.dropout)."""
    return _dropout_on(_current(), "nisa.dropout", data, prob, mask, dtype)


def _dropout_on(ctx: _KernelContext, api: str, data: Any, prob: Any, mask: Any, dtype: Any) -> _Tensor:
    line = ctx.line()
    if isinstance(prob, _TileOps):
        view = _to_view(ctx, prob, line)
        if len(view.shape) < 2 or int(np.prod(view.shape[1:])) != 1:
            raise ctx.error(
                "err_shape_mismatch",
                f"{api}: prob is a scalar or a tile of one value per partition ([P, 1]); got {view.shape}",
                line,
            )
    return _elementwise(
        ctx,
        line,
        api=api,
        opcode="dropout",
        operands=(data, prob),
        compute=_dropped,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=dtype,
        mask=mask,
        extra={"op": "dropout"},
    )


def _memset_result(
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


def _iota_result(expr: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
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


def _affine_select_result(
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


# --- destination-passing forms of the nki.* language (NKI 0.2-0.7) --------------------------


def _dst_view(dst: Any) -> _View:
    return dst._full_view() if isinstance(dst, _Tensor) else dst


def _new_form(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call passes `dst` (keyword, or a tile first where the legacy form takes none)."""
    return "dst" in kwargs or bool(args and isinstance(args[0], _TileOps))


def nc_matmul(*args: Any, **kwargs: Any) -> Any:
    """``stationary.T @ moving`` on the Tensor Engine. Legacy form: returns a new fp32 PSUM tile
    (accumulate with ``psum[...] += nisa.nc_matmul(...)``). nki.* form ``nc_matmul(dst,
    stationary, moving, ..., accumulate=None)``: writes `dst`, adding to it when `accumulate` is
    True; None (the default) overwrites on the first write to the location and accumulates on
    later ones (nki.isa.nc_matmul, "Accumulation mode"), read here as: accumulate when the last
    instruction to touch those elements of `dst` was a Tensor Engine write (an accumulation
    group is closed by anything reading or otherwise writing them, e.g. its copy to SBUF)."""
    accumulate = kwargs.pop("accumulate", None)
    ctx = _context._ACTIVE
    legacy = ctx is None or ctx.api.legacy
    dst = kwargs.pop("dst", None)
    if dst is None and args and isinstance(args[0], _TileOps):
        if not legacy and len(args) == 2 and not any(k in kwargs for k in ("stationary", "moving")):
            # `psum += nisa.nc_matmul(a, b)` in a kernel written with `import nki`: the nki.*
            # signature is (dst, stationary, moving), so the real tracer fails on the missing
            # `moving`; say what the call means and how the nki.* API spells it
            raise _current().error(
                "err_invalid_argument",
                "nisa.nc_matmul(stationary, moving) returning a PSUM tile is the legacy "
                "neuronxcc.nki form; in the nki.* API (this kernel imports nki) every nisa op "
                "takes dst first and returns nothing: write nisa.nc_matmul(dst=psum_tile, "
                "stationary=..., moving=..., accumulate=True) to accumulate",
            )
        if not legacy or len(args) > 2 or any(k in kwargs for k in ("stationary", "moving")):
            dst, args = args[0], args[1:]
    if dst is None:
        if accumulate is not None:
            raise _current().error(
                "err_unsupported_operand",
                "nisa.nc_matmul: accumulate= needs a dst PSUM tile to accumulate into",
            )
        return _nc_matmul_result(*args, **kwargs)
    target = _dst_view(dst)
    if accumulate is None:
        accumulate = _accumulation_open(_current(), target)
    _nc_matmul_into(target, bool(accumulate), *args, **kwargs)
    return dst


def _nc_matmul_into_impl(target: _View, accumulate: bool, *args: Any, **kwargs: Any) -> None:
    result = _nc_matmul_result(*args, **kwargs)
    _assign(target, result, accumulate=accumulate)


_nc_matmul_into = _replay.replayable(_nc_matmul_into_impl)


def _accumulation_open(ctx: _KernelContext, target: _View) -> bool:
    """Whether the last instruction touching `target`'s elements was a Tensor Engine write."""
    tensor = target._tensor
    if not tensor._written or tensor.memory is not _Memory.PSUM:
        return False
    tid = tensor._tid
    box = target._box()

    def touches(region: Any) -> bool:
        if region.tensor_id != tid:
            return False
        for (a0, a1), (b0, b1) in zip(region.box, box):
            if a0 >= b1 or b0 >= a1:
                return False
        return True

    for record in reversed(ctx.trace.records):
        for region in record.writes:
            if touches(region):
                return record.opcode in _TENSOR_ENGINE_OPS
        for region in record.reads:
            if touches(region):
                return False
    return False


def memset(*args: Any, **kwargs: Any) -> Any:
    """Fill with a constant. Legacy ``memset(shape, value, dtype)`` returns a new SBUF tile;
    nki.* ``memset(dst, value, engine=)`` fills `dst`."""
    if not _new_form(args, kwargs):
        return _memset_result(*args, **kwargs)
    return _memset_into(*args, **kwargs)


def _memset_into(dst: Any, value: Any, engine: Any = None, name: Any = None, **_: Any) -> Any:
    target = _dst_view(dst)
    _assign(target, _memset_result(target.shape, value, dtype=target.dtype, engine=engine))
    return dst


def nc_stream_shuffle(*args: Any, **kwargs: Any) -> Any:
    """Cross-partition move within each quadrant of 32 partitions on the Vector Engine: output
    partition i of a quadrant copies input partition ``shuffle_mask[i]`` of the same quadrant
    (255 leaves it unmodified); the same mask serves every quadrant (nki.isa.nc_stream_shuffle).
    Legacy form ``(src, dst, shuffle_mask)``, nki.* form ``(dst, src, shuffle_mask)``; both
    write `dst` in place."""
    ctx = _current()
    names = ("src", "dst", "shuffle_mask") if ctx.api.legacy else ("dst", "src", "shuffle_mask")
    bound = dict(zip(names, args, strict=False))
    for name in names:
        if name in kwargs:
            bound[name] = kwargs.pop(name)
    missing = [n for n in names if n not in bound]
    if missing:
        raise ctx.error(
            "err_invalid_argument", f"nisa.nc_stream_shuffle: missing argument(s) {', '.join(missing)}"
        )
    target = _to_view(ctx, bound["dst"], ctx.line())
    _assign(target, _stream_shuffled(bound["src"], target, bound["shuffle_mask"], kwargs.get("mask")))
    return bound["dst"]


def _stream_shuffled(src: Any, target: _View, shuffle_mask: Any, mask: Any = None) -> _Tensor:
    ctx = _current()
    line = ctx.line()
    api = "nisa.nc_stream_shuffle"
    if mask is not None:
        raise _not_supported(f"{api} with mask=")
    view = _to_view(ctx, src, line)
    sp, sf = _pf(view.shape)
    dp, df = _pf(target.shape)
    order = [int(_scalar_of(m)) for m in shuffle_mask]
    if len(order) != 32 or any(not (0 <= m < 32 or m == 255) for m in order):
        raise ctx.error(
            "err_invalid_argument",
            f"{api}: shuffle_mask is 32 partition numbers 0-31 (or 255: unmodified), got {order}",
            line,
        )
    if sf != df or view._tensor.dtype != target._tensor.dtype:
        raise ctx.error(
            "err_shape_mismatch",
            f"{api}: dst must have src's dtype and elements per partition; got src {view.shape} "
            f"{_dname(view._tensor.dtype)} and dst {target.shape} {_dname(target._tensor.dtype)}",
            line,
        )
    sources = []
    for row in range(dp):
        pick = order[row % 32]
        source = -1 if pick == 255 else (row // 32) * 32 + pick
        if source >= sp:
            raise ctx.error(
                "err_tensor_access_out_of_bound",
                f"{api}: dst partition {row} copies src partition {source} (quadrant {row // 32}, "
                f"shuffle_mask[{row % 32}]={pick}), but src has {sp} partitions",
                line,
            )
        sources.append(source)
    keeps = -1 in sources
    values = None
    if ctx.numerics:
        data = _read_values(view, False).reshape(sp, sf)
        old = _read_values(target, False).reshape(dp, df) if keeps else None
        values = np.stack([old[r] if s < 0 and old is not None else data[s] for r, s in enumerate(sources)])
        values = values.reshape(target.shape)
    inputs = (view, target) if keeps else (view,)
    return _emit_op(
        ctx,
        line,
        api,
        "stream_shuffle",
        _Engine.VECTOR,
        inputs,
        tuple(target.shape),
        target._tensor.dtype,
        values,
        dp * df,
    )


def _pattern_values(
    pattern: Any, offset: Any, channel_multiplier: Any, shape: tuple[int, ...], api: str
) -> Any:
    """``offset + p * channel_multiplier + sum(step * index)`` over a [[step, num], ...] pattern
    (nki.isa.iota / affine_select), shaped like the tile (numeric runs; None otherwise)."""
    ctx = _current()
    steps = [(int(step), int(num)) for step, num in pattern]
    per_partition = int(np.prod([n for _, n in steps])) if steps else 1
    p, f = _pf(shape)
    if per_partition != f:
        raise ctx.error(
            "err_shape_mismatch",
            f"{api}: the pattern {pattern} gives {per_partition} elements per partition, the tile holds {f}",
        )
    if not ctx.numerics:
        return None
    free = np.zeros(1, dtype=np.int64)
    for step, num in steps:
        free = (free[:, None] + step * np.arange(num, dtype=np.int64)[None, :]).reshape(-1)
    rows = int(channel_multiplier) * np.arange(p, dtype=np.int64)[:, None]
    return (int(offset) + rows + free[None, :]).reshape(shape)


def iota(*args: Any, **kwargs: Any) -> Any:
    """Legacy ``iota(expr, dtype)`` returns a tile of an index expression's values; nki.*
    ``iota(dst, pattern, offset=0, channel_multiplier=0)`` fills `dst` with
    ``offset + p * channel_multiplier + sum(step * i)`` (nki.isa.iota)."""
    if (args and isinstance(args[0], _TileOps)) or "pattern" in kwargs:
        return _iota_into(*args, **kwargs)
    dst = kwargs.pop("dst", None)
    result = _iota_result(*args, **kwargs)
    if dst is None:
        return result
    _assign(_dst_view(dst), result)
    return dst


def _iota_into(dst: Any, pattern: Any, offset: Any = 0, channel_multiplier: Any = 0, name: Any = None) -> Any:
    ctx = _current()
    line = ctx.line()
    target = _dst_view(dst)
    if target._tensor.memory is not _Memory.SBUF:
        raise ctx.error("err_unsupported_memory", "nisa.iota writes SBUF", line)
    shape = target.shape
    values = _pattern_values(pattern, offset, channel_multiplier, shape, "nisa.iota")
    out = _result_tile(ctx, shape, target.dtype, _SBUF, line, "iota", values, None)
    p, f = _pf(shape)
    out._producer = ctx.emit(
        _Engine.GPSIMD,
        "iota",
        p,
        f,
        _dname(target.dtype),
        _dname(target.dtype),
        (),
        (out._full_region(),),
        None,
        _Memory.SBUF,
        line,
        bytes=p * f * target.dtype.itemsize,
        vector_ops=p * f,
        extra={
            "pattern": [[int(step), int(num)] for step, num in pattern],
            "offset": int(offset),
            "channel_multiplier": int(channel_multiplier),
        },
    )
    _assign(target, out)
    return dst


def affine_select(*args: Any, **kwargs: Any) -> Any:
    """Legacy ``affine_select(pred, on_true_tile, on_false_value)`` with an nl.arange predicate;
    nki.* ``affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
    cmp_op=nl.equal, offset=0)``: keep `on_true_tile` where ``cmp_op(affine value, 0)``."""
    if (args and isinstance(args[0], _TileOps)) or "pattern" in kwargs:
        return _affine_select_into(*args, **kwargs)
    dst = kwargs.pop("dst", None)
    result = _affine_select_result(*args, **kwargs)
    if dst is None:
        return result
    _assign(_dst_view(dst), result)
    return dst


def _affine_select_into(
    dst: Any,
    pattern: Any,
    channel_multiplier: Any,
    on_true_tile: Any,
    on_false_value: Any,
    cmp_op: Any = None,
    offset: Any = 0,
    name: Any = None,
) -> Any:
    ctx = _current()
    line = ctx.line()
    target = _dst_view(dst)
    view = _to_view(ctx, on_true_tile, line)
    if _Memory.PSUM in (view._tensor.memory, target._tensor.memory):
        raise ctx.error("err_unsupported_memory", "the GpSimd engine cannot access PSUM", line)
    spec = _ops.resolve(cmp_op if cmp_op is not None else "equal")
    affine = _pattern_values(pattern, offset, channel_multiplier, view.shape, "nisa.affine_select")
    fill = np.float32(float(_scalar_of(on_false_value)))

    def compute(x: np.ndarray) -> np.ndarray:
        keep = np.asarray(spec.fn(affine, 0)) != 0
        return np.where(keep, x, fill)

    out = _elementwise(
        ctx,
        line,
        api="nisa.affine_select",
        opcode="affine_select",
        operands=(view,),
        compute=compute,
        engine=_Engine.GPSIMD,
        legal=(_Engine.GPSIMD,),
        dtype=target.dtype,
        mask=None,
        extra={
            "value": float(fill),
            "cmp_op": spec.name,
            "pattern": [[int(step), int(num)] for step, num in pattern],
            "offset": int(offset),
            "channel_multiplier": int(channel_multiplier),
        },
    )
    _assign(target, out)
    return dst


_REDUCE_CMDS_SUPPORTED = ("idle", "reset_reduce")


def _check_reduce_cmd(reduce_cmd: Any, api: str) -> None:
    from accelopt.nki.unsupported import refuse

    name = getattr(reduce_cmd, "name", None) if reduce_cmd is not None else None
    if name is not None and name not in _REDUCE_CMDS_SUPPORTED:
        refuse(api, f"reduce_cmd={name}: accumulator registers kept across instructions")


@_writes_dst
def tensor_scalar_reduce(
    data: Any,
    op0: Any,
    operand0: Any,
    reduce_op: Any,
    reduce_res: Any = None,
    reverse0: bool = False,
    reduce_cmd: Any = None,
    reduce_init: Any = None,
    reduce_res_negate: bool = False,
    dtype: Any = None,
    mask: Any = None,
    **_: Any,
) -> _Tensor:
    """``data <op0> operand0`` on the Vector Engine, with the free-axis `reduce_op` reduction of
    the result written to `reduce_res` ([P, 1]); `reduce_res_negate` negates it
    (nki.isa.tensor_scalar_reduce)."""
    ctx = _current()
    line = ctx.line()
    _check_reduce_cmd(reduce_cmd, "nisa.tensor_scalar_reduce")
    if reduce_init is not None:
        from accelopt.nki.unsupported import refuse

        refuse("nisa.tensor_scalar_reduce", "reduce_init=")
    out = _tensor_scalar_result(
        data, op0, operand0, reverse0=reverse0, dtype=dtype, mask=mask, engine=engine.vector
    )
    if reduce_res is not None:
        _attach_reduce(
            ctx,
            line,
            out,
            reduce_op,
            reduce_res,
            "nisa.tensor_scalar_reduce",
            negate=reduce_res_negate,
            opcode=None,
        )
    return out


@_writes_dst
def exponential(
    src: Any,
    max_value: Any = 0.0,
    reduce_res: Any = None,
    reduce_cmd: Any = None,
    reduce_init: Any = 0.0,
    dtype: Any = None,
    **_: Any,
) -> _Tensor:
    """``exp(src - max_value)`` on the Vector Engine (NeuronCore-v4 and newer), `max_value` a
    scalar or a [P, 1] tile, with the free-axis sum written to `reduce_res` if given
    (nki.isa.exponential)."""
    ctx = _current()
    line = ctx.line()
    _check_reduce_cmd(reduce_cmd, "nisa.exponential")
    if not isinstance(reduce_init, _TileOps) and float(_scalar_of(reduce_init)) != 0.0:
        from accelopt.nki.unsupported import refuse

        refuse("nisa.exponential", "reduce_init= (a preloaded accumulator)")
    shift = max_value if isinstance(max_value, _TileOps) else float(_scalar_of(max_value))

    def compute(x: np.ndarray, m: Any) -> np.ndarray:
        return np.exp(np.asarray(x, dtype=np.float32) - m)

    out = _elementwise(
        ctx,
        line,
        api="nisa.exponential",
        opcode="exponential",
        operands=(src, shift),
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=dtype,
        mask=None,
        ops_per_element=2,
        extra={"op": "exp", "max_value": None if isinstance(shift, _TileOps) else shift},
    )
    if reduce_res is not None:
        _attach_reduce(ctx, line, out, np.add, reduce_res, "nisa.exponential", opcode=None)
    return out


@_writes_dst
def range_select(
    on_true_tile: Any,
    comp_op0: Any,
    comp_op1: Any,
    bound0: Any,
    bound1: Any,
    reduce_cmd: Any = None,
    reduce_res: Any = None,
    reduce_op: Any = None,
    range_start: Any = 0,
    on_false_value: Any = None,
    dtype: Any = None,
    **_: Any,
) -> _Tensor:
    """Keep `on_true_tile`'s elements whose free index + `range_start` passes both
    ``comp_op0(index, bound0)`` and ``comp_op1(index, bound1)`` (bounds: scalars or [P, 1]
    tiles), else `on_false_value` (fp32 min by default); the free-axis `reduce_op` (max by
    default) of the result goes to `reduce_res` (nki.isa.range_select)."""
    ctx = _current()
    line = ctx.line()
    _check_reduce_cmd(reduce_cmd, "nisa.range_select")
    spec0 = _ops.resolve(comp_op0)
    spec1 = _ops.resolve(comp_op1)
    fill = np.float32(
        _dt.fp32.min if on_false_value is None or on_false_value is Ellipsis else _scalar_of(on_false_value)
    )
    start = float(_scalar_of(range_start))
    view = _to_view(ctx, on_true_tile, line)
    f = _pf(view.shape)[1]

    def operand(bound: Any) -> Any:
        return bound if isinstance(bound, _TileOps) else float(_scalar_of(bound))

    def compute(x: np.ndarray, b0: Any, b1: Any) -> np.ndarray:
        index = (start + np.arange(f, dtype=np.float32)).reshape((1, *view.shape[1:]))
        keep = (np.asarray(spec0.fn(index, b0)) != 0) & (np.asarray(spec1.fn(index, b1)) != 0)
        return np.where(keep, x, fill)

    out = _elementwise(
        ctx,
        line,
        api="nisa.range_select",
        opcode="range_select",
        operands=(view, operand(bound0), operand(bound1)),
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=dtype,
        mask=None,
        ops_per_element=2,
        extra={"op": spec0.name, "op1": spec1.name, "range_start": start, "value": float(fill)},
    )
    if reduce_res is not None:
        _attach_reduce(ctx, line, out, reduce_op or np.maximum, reduce_res, "nisa.range_select", opcode=None)
    return out


@_writes_dst
def select_reduce(
    predicate: Any,
    on_true: Any,
    on_false: Any,
    reduce_res: Any = None,
    reduce_cmd: Any = None,
    reduce_op: Any = None,
    reverse_pred: bool = False,
    dtype: Any = None,
    **_: Any,
) -> _Tensor:
    """``where(predicate, on_true, on_false)`` on the Vector Engine (`on_false` a scalar or a
    [P, 1] tile; `reverse_pred` inverts the predicate), with the free-axis max of the result
    written to `reduce_res` if given (nki.isa.select_reduce)."""
    ctx = _current()
    line = ctx.line()
    _check_reduce_cmd(reduce_cmd, "nisa.select_reduce")
    if reduce_op is not None and _ops.resolve(reduce_op).name != "maximum":
        raise ctx.error("err_unsupported_op", "nisa.select_reduce reduces only with max", line)
    fallback = on_false if isinstance(on_false, _TileOps) else float(_scalar_of(on_false))

    def compute(pred: np.ndarray, x: np.ndarray, other: Any) -> np.ndarray:
        keep = (np.asarray(pred) != 0) != bool(reverse_pred)
        return np.where(keep, x, other)

    out = _elementwise(
        ctx,
        line,
        api="nisa.select_reduce",
        opcode="select_reduce",
        operands=(predicate, on_true, fallback),
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=dtype if dtype is not None else _to_view(ctx, on_true, line).dtype,
        mask=None,
        max_psum_inputs=1,
        main=1,
        extra={"reverse_pred": bool(reverse_pred)},
    )
    if reduce_res is not None:
        _attach_reduce(ctx, line, out, np.maximum, reduce_res, "nisa.select_reduce", opcode=None)
    return out


@_writes_dst
def tensor_partition_reduce(op: Any, data: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """Reduce across partitions with `op` on GpSimd: [P, F] -> [1, F]."""
    ctx = _current()
    line = ctx.line()
    return _nl._reduce(
        ctx,
        line,
        _ops.resolve(op),
        data,
        0,
        dtype=dtype,
        keepdims=True,
        mask=mask,
        engine=_Engine.GPSIMD,
        api="nisa.tensor_partition_reduce",
    )


@_writes_dst
def dma_transpose(src: Any, axes: Any = None, dtype: Any = None, **kwargs: Any) -> _Tensor:
    """Transpose on a DMA queue: 2-D [A, B] -> [B, A] (axes (1, 0)); 3-D and 4-D permutations
    (2, 1, 0) and (3, 1, 2, 0) (nki.isa.dma_transpose)."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, src, line)
    ndim = len(view.shape)
    default = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(ndim)
    order = tuple(int(a) for a in axes) if axes is not None else default
    if order is None or order != default:
        from accelopt.nki.unsupported import refuse

        refuse("nisa.dma_transpose", f"axes {order} of a {ndim}-D tile")
    if view._tensor.memory is _Memory.PSUM:
        raise ctx.error("err_unsupported_memory", "DMA cannot access PSUM; copy the tile to SBUF first", line)
    shape = tuple(view.shape[a] for a in order)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    values = np.transpose(view._read(), order) if ctx.numerics else None
    out = _result_tile(ctx, shape, out_dtype, _SBUF, line, "dma_transpose", values, None)
    p, f = _pf(shape)
    itemsize = view._tensor.dtype.itemsize
    extra: dict[str, Any] = {"transpose": True, "api": "nisa.dma_transpose", "axes": list(order)}
    reads: tuple[Any, ...] = (view._region(),)
    if hasattr(view, "_index_view"):  # a gather: it also reads its index tile (views.IndirectView)
        reads += (view._index_view._region(),)
        extra["indirect"] = True
    out._producer = ctx.emit(
        _Engine.DMA,
        "dma_copy",
        p,
        f,
        _dname(view._tensor.dtype),
        _dname(out_dtype),
        reads,
        (out._full_region(),),
        view._tensor.memory,
        _Memory.SBUF,
        line,
        bytes=p * f * itemsize,
        is_transpose=True,
        dma_chunk_bytes=itemsize,
        dma_chunks=p * f,
        extra=extra,
    )
    return out


# --- more Vector / GpSimd instructions of the reference ---------------------------------------


class matmul_perf_mode(_enum.Enum):
    none = "none"
    double_row = "double_row"


class dma_engine(_enum.Enum):
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


class NkiValidationError(Exception):
    """Raised when hardware constraints are violated (kernels may catch it by name)."""


def _emit_op(
    ctx: _KernelContext,
    line: int,
    api: str,
    opcode: str,
    engine: _Engine,
    inputs: tuple[_View, ...],
    shape: tuple[int, ...],
    out_dtype: Any,
    values: Any,
    vector_ops: int,
) -> _Tensor:
    """A new SBUF tile of `shape` written by one instruction reading `inputs` (the first is the
    main operand); `values` are its fp32 contents in numeric runs."""
    for view in inputs:
        _check_on_chip(ctx, view, api, line)
        if engine is _Engine.GPSIMD and view._tensor.memory is _Memory.PSUM:
            raise ctx.error("err_unsupported_memory", f"{api}: the GpSimd engine cannot access PSUM", line)
    out = _result_tile(ctx, shape, out_dtype, _SBUF, line, opcode, values, None)
    p, f = _pf(inputs[0].shape)
    main = inputs[0]._tensor
    out._producer = ctx.emit(
        engine,
        opcode,
        p,
        f,
        _dname(main.dtype),
        _dname(out_dtype),
        tuple(v._region() for v in inputs),
        (out._full_region(),),
        main.memory,
        _Memory.SBUF,
        line,
        bytes=p * f * main.dtype.itemsize,
        vector_ops=vector_ops,
        extra={"api": api},
    )
    return out


@_writes_dst
def max8(src: Any, dtype: Any = None, **_: Any) -> _Tensor:
    """The 8 largest values of each partition, in descending order: [P, ...] -> [P, 8]
    (nki.isa.max8; 8 to 16384 elements per partition)."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, src, line)
    p, f = _pf(view.shape)
    if not 8 <= f <= 16384:
        raise ctx.error(
            "err_size_of_dimension_exceed_arch_limit",
            f"nisa.max8 reads 8 to 16384 elements per partition, got {f}",
            line,
        )
    values = None
    if ctx.numerics:
        flat = _read_values(view, False).reshape(p, f)
        values = -np.sort(-flat, axis=1)[:, :8]
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    return _emit_op(ctx, line, "nisa.max8", "max8", _Engine.VECTOR, (view,), (p, 8), out_dtype, values, p * f)


def _match_positions(data: np.ndarray, vals: np.ndarray, order: range) -> np.ndarray:
    """Per partition, for each of the 8 values (taken in `order`), the first position holding it
    that an earlier value did not take; all ones (as int64 -1) where none is left."""
    p = data.shape[0]
    found = np.full((p, vals.shape[1]), -1, dtype=np.int64)
    for row in range(p):
        taken: set[int] = set()
        for i in order:
            for j in np.flatnonzero(data[row] == vals[row, i]):
                if int(j) not in taken:
                    taken.add(int(j))
                    found[row, i] = int(j)
                    break
    return found


def _eight(ctx: _KernelContext, line: int, api: str, data: Any, vals: Any) -> tuple[_View, _View, int, int]:
    dview = _to_view(ctx, data, line)
    vview = _to_view(ctx, vals, line)
    p, f = _pf(dview.shape)
    if not 8 <= f <= 16384 or _pf(vview.shape) != (p, 8):
        raise ctx.error(
            "err_shape_mismatch",
            f"{api} takes 8 to 16384 data elements and exactly 8 values per partition; got data "
            f"{dview.shape} and values {vview.shape}",
            line,
        )
    return dview, vview, p, f


@_writes_dst
def nc_find_index8(data: Any, vals: Any, dtype: Any = None, **_: Any) -> _Tensor:
    """Per partition, the index of the first occurrence of each of 8 values in `data` (repeated
    values take successive occurrences); all ones where a value is absent
    (nki.isa.nc_find_index8; uint32 unless `dtype` says uint16)."""
    ctx = _current()
    line = ctx.line()
    dview, vview, p, f = _eight(ctx, line, "nisa.nc_find_index8", data, vals)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.uint32
    values = None
    if ctx.numerics:
        found = _match_positions(
            _read_values(dview, False).reshape(p, f), _read_values(vview, False).reshape(p, 8), range(8)
        )
        values = np.where(found < 0, np.iinfo(out_dtype).max, found)
    return _emit_op(
        ctx,
        line,
        "nisa.nc_find_index8",
        "find_index8",
        _Engine.VECTOR,
        (dview, vview),
        (p, 8),
        out_dtype,
        values,
        p * f,
    )


@_writes_dst
def nc_match_replace8(data: Any, vals: Any, imm: Any, dst_idx: Any = None, **_: Any) -> _Tensor:
    """`data` with the first occurrence of each of 8 values replaced by `imm` (values taken from
    the last to the first), and the positions replaced written to `dst_idx` if given
    (nki.isa.nc_match_replace8)."""
    ctx = _current()
    line = ctx.line()
    dview, vview, p, f = _eight(ctx, line, "nisa.nc_match_replace8", data, vals)
    fill = float(_scalar_of(imm))
    values = positions = None
    if ctx.numerics:
        flat = _read_values(dview, False).reshape(p, f)
        positions = _match_positions(flat, _read_values(vview, False).reshape(p, 8), range(7, -1, -1))
        values = flat.copy()
        rows, cols = np.nonzero(positions >= 0)
        values[rows, positions[rows, cols]] = fill
        values = values.reshape(dview.shape)
    out = _emit_op(
        ctx,
        line,
        "nisa.nc_match_replace8",
        "match_replace8",
        _Engine.VECTOR,
        (dview, vview),
        dview.shape,
        dview._tensor.dtype,
        values,
        p * f,
    )
    if dst_idx is not None:
        index_view = _to_view(ctx, dst_idx, line)
        record = out._producer
        assert record is not None
        region = index_view._region()
        record.writes = (*record.writes, region)
        ctx.note_write(index_view._tensor, region, line, False)
        if ctx.numerics and positions is not None:
            sentinel = np.iinfo(index_view._tensor.dtype).max if index_view._tensor.dtype.kind in "iu" else -1
            index_view._write(np.where(positions < 0, sentinel, positions).reshape(index_view.shape))
    return out


def _gather_free(
    ctx: _KernelContext, line: int, api: str, data: Any, indices: Any, dtype: Any, engine: _Engine
) -> _Tensor:
    """``out[p, i...] = data[p].flat[indices[p, i...]]``: a gather within each partition."""
    dview = _to_view(ctx, data, line)
    iview = _to_view(ctx, indices, line)
    p, f = _pf(dview.shape)
    if iview.shape[0] != p:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"{api}: data has {p} partitions but indices have {iview.shape[0]}",
            line,
        )
    values = None
    if ctx.numerics:
        flat = _read_values(dview, False).reshape(p, f)
        idx = np.asarray(iview._read(), dtype=np.int64).reshape(p, -1)
        if idx.size and (idx.min() < 0 or idx.max() >= f):
            raise ctx.error(
                "err_tensor_access_out_of_bound",
                f"{api}: an index reaches element {int(idx.max())} of a partition holding {f}",
                line,
            )
        values = np.take_along_axis(flat, idx, axis=1).reshape(iview.shape)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else dview._tensor.dtype
    n = int(np.prod(iview.shape))
    return _emit_op(
        ctx, line, api, "gather", engine, (dview, iview), tuple(iview.shape), out_dtype, values, n
    )


@_writes_dst
def nc_n_gather(data: Any, indices: Any, dtype: Any = None, **_: Any) -> _Tensor:
    """Gather elements of each partition's (flattened) free dimensions by `indices` on GpSimd
    (nki.isa.nc_n_gather): the output takes the indices' shape."""
    ctx = _current()
    return _gather_free(ctx, ctx.line(), "nisa.nc_n_gather", data, indices, dtype, _Engine.GPSIMD)


_GPSIMD_CORE_PARTITIONS = 16  # each of the 8 GpSimd cores serves 16 adjacent partitions
_LOCAL_GATHER_ELEMENTS = (1, 2, 4, 8, 16, 32)
_LOCAL_GATHER_MAX_INDICES = 4096  # per core


def local_gather(*args: Any, **kwargs: Any) -> Any:
    """Gather on GpSimd within each 16-partition core group (nki.isa.local_gather): a core
    reads its group's index rows flattened partition-first (column-major over the
    [16, free] slice), keeps the first `num_valid_indices`, and every partition of the group
    takes `num_elem_per_idx` contiguous elements of its own flattened free dimension at each
    index. This is the NumPy equivalent published with the API's example (the docstring
    calls the indices "partition offsets"; its NumPy reference gathers along the free axis,
    and that is what is modelled). Legacy form returns the tile; nki.* form writes `dst`."""
    ctx = _current()
    line = ctx.line()
    api = "nisa.local_gather"
    names: tuple[str, ...] = ("src_buffer", "index", "num_elem_per_idx", "num_valid_indices")
    if not ctx.api.legacy:
        names = ("dst", *names)
    bound: dict[str, Any] = dict(zip(names, args, strict=False))
    if len(args) > len(names):
        raise ctx.error(
            "err_invalid_argument", f"{api}: takes at most {len(names)} positional arguments", line
        )
    for name in (*names, "dst"):
        if name in kwargs:
            bound[name] = kwargs.pop(name)
    if kwargs.pop("mask", None) is not None:
        raise _not_supported(f"{api} with mask=")
    missing = [n for n in ("src_buffer", "index") if n not in bound]
    if missing or (not ctx.api.legacy and "dst" not in bound):
        raise ctx.error(
            "err_invalid_argument",
            f"{api}: missing argument(s) {', '.join(missing or ['dst'])}",
            line,
        )
    src = _to_view(ctx, bound["src_buffer"], line)
    index = _to_view(ctx, bound["index"], line)
    per_index = int(_scalar_of(bound.get("num_elem_per_idx", 1)))
    sp, sf = _pf(src.shape)
    ip, i_free = _pf(index.shape)
    group = _GPSIMD_CORE_PARTITIONS
    if sp != ip or sp % group:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"{api}: src_buffer and index need the same partition count, a multiple of {group}; "
            f"got {sp} and {ip}",
            line,
        )
    if index._tensor.dtype.kind not in "iu":
        raise ctx.error(
            "err_invalid_argument",
            f"{api}: index must hold integers (uint16), got {_dname(index._tensor.dtype)}",
            line,
        )
    if per_index not in _LOCAL_GATHER_ELEMENTS:
        raise ctx.error(
            "err_invalid_argument",
            f"{api}: num_elem_per_idx must be one of {list(_LOCAL_GATHER_ELEMENTS)}, got {per_index}",
            line,
        )
    available = group * i_free
    valid_arg = bound.get("num_valid_indices")
    valid = available if valid_arg is None else int(_scalar_of(valid_arg))
    if not 0 < valid <= min(available, _LOCAL_GATHER_MAX_INDICES):
        raise ctx.error(
            "err_invalid_argument",
            f"{api}: num_valid_indices must be 1..{min(available, _LOCAL_GATHER_MAX_INDICES)} (the index "
            f"elements of one 16-partition group, at most {_LOCAL_GATHER_MAX_INDICES}), got {valid}",
            line,
        )
    per_partition = valid * per_index
    target = _to_view(ctx, bound["dst"], line) if "dst" in bound else None
    if target is not None:
        shape = tuple(target.shape)
        if _pf(shape) != (sp, per_partition):
            raise ctx.error(
                "err_shape_mismatch",
                f"{api}: dst {list(shape)} must hold {sp} partitions of {valid} indices x "
                f"{per_index} elements = {per_partition}",
                line,
            )
    elif valid == available:
        # inferred from the API example's annotation (index [128, 4] -> tile [128, 4, 16, n]):
        # the index free axes, then the 16 partitions of the group, then the gathered elements
        shape = (sp, *index.shape[1:], group, per_index)
    else:
        shape = (sp, valid, per_index)
    values = None
    if ctx.numerics:
        data = _read_values(src, False).reshape(sp, sf)
        raw = np.asarray(index._read(), dtype=np.int64).reshape(ip, i_free)
        out = np.empty((sp, valid, per_index), dtype=np.float32)
        span = np.arange(per_index)
        for start in range(0, sp, group):
            offsets = raw[start : start + group].flatten(order="F")[:valid]
            if offsets.min() < 0 or offsets.max() + per_index > sf:
                raise ctx.error(
                    "err_tensor_access_out_of_bound",
                    f"{api}: partitions {start}-{start + group - 1} gather {per_index} element(s) at "
                    f"offset {int(offsets.max())}, but src_buffer holds {sf} per partition",
                    line,
                )
            out[start : start + group] = data[start : start + group][:, offsets[:, None] + span]
        values = out.reshape(shape)
    result = _emit_op(
        ctx,
        line,
        api,
        "gather",
        _Engine.GPSIMD,
        (src, index),
        shape,
        src._tensor.dtype,
        values,
        sp * per_partition,
    )
    if target is None:
        return result
    _assign(target, result)
    return bound["dst"]


def _tensor_copy_predicated_into(
    dst: Any, src: Any, predicate: Any, reverse_pred: bool = False, **_: Any
) -> Any:
    ctx = _current()
    line = ctx.line()
    target = _dst_view(dst)
    pview = _to_view(ctx, predicate, line)
    operands: list[Any] = [target, pview]
    scalar = not isinstance(src, _TileOps)
    if not scalar:
        operands.append(src)
    fill = float(_scalar_of(src)) if scalar else 0.0

    def compute(current: np.ndarray, pred: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        take = (np.asarray(pred) != 0) != bool(reverse_pred)
        return np.where(take, rest[0] if rest else np.float32(fill), current)

    out = _elementwise(
        ctx,
        line,
        api="nisa.tensor_copy_predicated",
        opcode="tensor_copy_predicated",
        operands=operands,
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=target.dtype,
        mask=None,
        max_psum_inputs=None,
        extra={"reverse_pred": bool(reverse_pred)},
    )
    _assign(target, out)
    return dst


def _predicated(*args: Any, **kwargs: Any) -> Any:
    """Copy `src` into `dst` where `predicate` is nonzero (zero with `reverse_pred`); elsewhere
    `dst` keeps its values (nki.isa.tensor_copy_predicated)."""
    if _new_form(args, kwargs):
        return _tensor_copy_predicated_into(*args, **kwargs)
    from accelopt.nki.unsupported import refuse

    refuse("nisa.tensor_copy_predicated", "without a dst tile")


@_writes_dst
def tensor_scalar_cumulative(
    src: Any, op0: Any, op1: Any, imm0: Any, imm1: Any = None, reduce_cmd: Any = None, **_: Any
) -> _Tensor:
    """Per partition along the free axis: ``reg = op1(op0(src[i], imm0), reg); out[i] = reg``
    with ``reg`` starting at op1's identity (``reset_reduce``, the default) or at `imm1`
    (``load_reduce``) (nki.isa.tensor_scalar_cumulative)."""
    from accelopt.nki.unsupported import refuse

    ctx = _current()
    line = ctx.line()
    command = getattr(reduce_cmd, "name", "reset_reduce") if reduce_cmd is not None else "reset_reduce"
    if command not in ("reset_reduce", "load_reduce"):
        refuse(
            "nisa.tensor_scalar_cumulative", f"reduce_cmd={command}: an accumulator kept across instructions"
        )
    spec0 = _ops.resolve(op0)
    spec1 = _ops.resolve(op1)
    identities = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
    if command == "reset_reduce" and spec1.name not in identities:
        raise ctx.error(
            "err_unsupported_op", f"nisa.tensor_scalar_cumulative: {spec1.name} cannot accumulate", line
        )
    view = _to_view(ctx, src, line)
    operands: list[Any] = [view, imm0 if isinstance(imm0, _TileOps) else _scalar_of(imm0)]
    if command == "load_reduce":
        operands.append(imm1 if isinstance(imm1, _TileOps) else _scalar_of(imm1))

    def compute(x: np.ndarray, a: Any, start: Any = None) -> np.ndarray:
        p = x.shape[0]
        flat = np.asarray(spec0.fn(x, a), dtype=np.float32).reshape(p, -1)
        reg = np.broadcast_to(
            np.asarray(identities.get(spec1.name, 0.0) if start is None else start, dtype=np.float32).reshape(
                -1
            ),
            (p,),
        ).copy()
        out = np.empty_like(flat)
        for i in range(flat.shape[1]):
            reg = np.asarray(spec1.fn(flat[:, i], reg), dtype=np.float32)
            out[:, i] = reg
        return out.reshape(x.shape)

    return _elementwise(
        ctx,
        line,
        api="nisa.tensor_scalar_cumulative",
        opcode="tensor_scalar_cumulative",
        operands=operands,
        compute=compute,
        engine=_Engine.VECTOR,
        legal=(_Engine.VECTOR,),
        dtype=None,
        mask=None,
        ops_per_element=2,
        extra={"op": spec0.name, "op1": spec1.name, "reduce_cmd": command},
    )


# Trace-only runs replay repeated calls of these from the same kernel statement (see replay.py).
_replay.make_replayable(
    globals(),
    (
        "_nc_matmul_result",
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
        "dropout",
        "_memset_result",
        "_iota_result",
        "_affine_select_result",
        "tensor_scalar_reduce",
        "tensor_partition_reduce",
        "exponential",
        "range_select",
        "select_reduce",
        "dma_transpose",
        "max8",
        "nc_find_index8",
        "nc_match_replace8",
        "nc_n_gather",
        "tensor_scalar_cumulative",
        "bn_stats",
        "bn_aggr",
        "dma_copy",
        # trn3 (accelopt.nki.mx), bound here as nisa.*
        "activate2",
        "nc_matmul_mx",
        "quantize_mx",
    ),
)

tensor_copy_predicated = _predicated

# Numeric runs to be verified log these dispatchers as one call each (calllog.py); what they run
# inside is not logged again.
_calllog.logged(
    globals(),
    (
        "nc_matmul",
        "memset",
        "iota",
        "affine_select",
        "tensor_copy_predicated",
        "nc_stream_shuffle",
        "local_gather",
        "tensor_copy_dynamic_src",
        "tensor_copy_dynamic_dst",
    ),
)
