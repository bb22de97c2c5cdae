"""``neuronxcc.nki.language`` (``nl``) on numpy: memories, tiles, loads/stores, loops, indexing
grids and the high-level compute API. Engine choice is left to the compiler (``UNASSIGNED`` in
the trace) where the real compiler would choose; transcendental functions run on the Scalar
Engine, tile-tile arithmetic and reductions on the Vector Engine, matmuls on the Tensor Engine.
"""

from __future__ import annotations

import builtins as _builtins
import sys as _sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from accelopt.nki import calllog as _calllog
from accelopt.nki import compiler as _compiler
from accelopt.nki import constants as _constants
from accelopt.nki import dtypes as _dt
from accelopt.nki import ops as _ops
from accelopt.nki import views as _views
from accelopt.nki.compiler import no_reorder  # noqa: F401

# Everything this module imports for its own use is bound to an underscore name: kernels see
# this module as `nl`, and the sandbox refuses underscore attributes, so helpers that could reach
# the run (the context, tensor values) stay out of a kernel's reach.
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.context import current as _current
from accelopt.nki.dtypes import (  # noqa: F401 - kernel-facing dtypes
    bfloat16,
    bool_,
    finfo,
    float4_e2m1fn,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
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
from accelopt.nki.dtypes import dname as _dname
from accelopt.nki.fast import replay as _replay
from accelopt.nki.indexing import arange, ds, mgrid  # noqa: F401
from accelopt.nki.instructions import HBM as _HBM
from accelopt.nki.instructions import MATMUL_MAX_K as _MATMUL_MAX_K
from accelopt.nki.instructions import MATMUL_MAX_M as _MATMUL_MAX_M
from accelopt.nki.instructions import MATMUL_MAX_N as _MATMUL_MAX_N
from accelopt.nki.instructions import PRIVATE_HBM as _PRIVATE_HBM
from accelopt.nki.instructions import PSUM as _PSUM
from accelopt.nki.instructions import PSUM_PARTITION_BYTES as _PSUM_PARTITION_BYTES
from accelopt.nki.instructions import SBUF as _SBUF
from accelopt.nki.instructions import SBUF_PARTITION_BYTES as _SBUF_PARTITION_BYTES
from accelopt.nki.instructions import SHARED_HBM as _SHARED_HBM
from accelopt.nki.instructions import check_on_chip as _check_on_chip
from accelopt.nki.instructions import check_partitions as _check_partitions
from accelopt.nki.instructions import dma_copy
from accelopt.nki.instructions import dma_shape as _dma_shape
from accelopt.nki.instructions import elementwise as _elementwise
from accelopt.nki.instructions import guard_bounds as _guard_bounds
from accelopt.nki.instructions import index_reads as _index_reads
from accelopt.nki.instructions import out_region as _out_region
from accelopt.nki.instructions import pf as _pf
from accelopt.nki.instructions import prod as _prod
from accelopt.nki.instructions import read_values as _read_values
from accelopt.nki.instructions import region_of as _region_of
from accelopt.nki.instructions import resolve_mask as _resolve_mask
from accelopt.nki.instructions import result_tile as _result_tile
from accelopt.nki.instructions import scalar_of as _scalar_of
from accelopt.nki.instructions import to_view as _to_view
from accelopt.nki.instructions import unassigned_extra as _unassigned_extra
from accelopt.nki.loops import affine_range, sequential_range, static_range  # noqa: F401
from accelopt.nki.mx import abs_max, abs_min  # noqa: F401
from accelopt.nki.registers import dynamic_range, fori_loop, while_loop  # noqa: F401
from accelopt.nki.spmd import nc, num_programs, program_id, program_ndim, spmd_dim  # noqa: F401
from accelopt.nki.spmd import shared_output as _shared_output
from accelopt.nki.tensor import Buffer as _Buffer
from accelopt.nki.tensor import Tensor as _Tensor
from accelopt.nki.tensor import TileOps as _TileOps
from accelopt.nki.tensor import View as _View
from accelopt.nki.tensor import new_data as _new_data
from accelopt.nki.tensor import normalize_shape as _normalize_shape
from accelopt.nki.tensor import par_dim  # noqa: F401
from accelopt.nki.trace import Engine as _Engine
from accelopt.nki.trace import Memory as _Memory
from accelopt.nki.unsupported import module_getattr as _module_getattr

# `nki.language.constants` resolves through sys.modules (runtime.install_aliases)
__path__: list[str] = []
constants = _constants
fp32 = _dt.fp32  # FP32 constants (nl.fp32.min)
# a listed NKI name this module does not define is refused NKI-style (unsupported.py)
__getattr__ = _module_getattr("nki.language")

sbuf = _SBUF
psum = _PSUM
hbm = _HBM
shared_hbm = _SHARED_HBM
private_hbm = _PRIVATE_HBM

_VECTOR_ONLY = (_Engine.VECTOR, _Engine.GPSIMD)
_ANY = (_Engine.VECTOR, _Engine.SCALAR, _Engine.GPSIMD)


class tile_size:
    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_max_size = 2048
    total_available_sbuf_size = 180224
    # The nki.* names of the same limits (NKI API reference, nki.language.tile_size, 2.30-2.33):
    # a PSUM bank per partition is 2 KiB = 512 fp32, 8 banks; the largest SBUF tile free size is
    # the usable bytes of a partition (as total_available_sbuf_size); sbuf_size_bytes is all 128
    # partitions (24 MiB, Trainium1, as the figure above).
    psum_fmax_bytes = 2048
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    sbuf_fmax_bytes = total_available_sbuf_size
    sbuf_fmax = total_available_sbuf_size // 4
    sbuf_size_bytes = 128 * 192 * 1024


# --- SPMD ----------------------------------------------------------------------------------


# program_id, num_programs, program_ndim, nc and spmd_dim live in accelopt.nki.spmd


def device_print(prefix: str, x: Any, **_: Any) -> None:
    """Print a tile's values (numeric runs) from inside a kernel; no hardware work is traced."""
    ctx = _current()
    if ctx.numerics and isinstance(x, (_Tensor, _View)):
        print(prefix, _to_view(ctx, x, ctx.line())._read())


# --- allocation ----------------------------------------------------------------------------


def _buffer(buffer: Any) -> _Buffer:
    if buffer is None:
        return _SBUF
    if isinstance(buffer, _Buffer):
        return buffer
    raise _current().error("err_unsupported_memory", f"unknown buffer {buffer!r}")


def _allocate(shape: Any, dtype: Any, buffer: Any, fill: Any, line: int, name: str) -> _Tensor:
    ctx = _current()
    dims, block_dims = _normalize_shape(shape)
    if block_dims and not ctx.api.block_dimensions:
        raise ctx.error(
            "err_unsupported_block_dimension",
            f"{ctx.api.label}: block dimensions were removed from the nki.* language (the partition "
            f"dimension of shape {dims} is dimension {block_dims}); put it first and keep the blocks "
            "in a Python list of tiles",
            line,
        )
    buf = _buffer(buffer)
    dtype = _dt.as_dtype(dtype if dtype is not None else float32)
    if buf.memory is not _Memory.HBM and dims:
        _check_partitions(ctx, dims[block_dims], f"a tile of shape {dims}", line)
        per_partition = _prod(dims[block_dims + 1 :]) * dtype.itemsize
        limit = _PSUM_PARTITION_BYTES if buf.memory is _Memory.PSUM else _SBUF_PARTITION_BYTES
        if per_partition > limit:
            raise ctx.error(
                "err_size_of_dimension_exceed_arch_limit",
                f"a {buf.memory.value.upper()} tile of shape {dims} needs {per_partition} bytes per partition; "
                f"at most {limit} fit",
                line,
            )
    if ctx.shared_outputs is not None and buf is _SHARED_HBM:
        shared = _shared_output(ctx, dims, dtype, line)
        if shared is not None:  # a later SPMD instance: the first instance's output
            return shared
    data = _new_data(dims, dtype, fill, block_dims) if ctx.numerics else None
    tensor = _Tensor(dims, dtype, buf, block_dims, data)
    ctx.register_tensor(tensor, name or ctx.name_at(line, "tensor"), line)
    if buf.__class__ is not _Buffer:  # ncc.sbuf/psum.(mod_)alloc: the kernel placed it
        _compiler._place(ctx, tensor, ctx.tensor_name(tensor), line)
    if ctx.shared_outputs is not None and buf is _SHARED_HBM:
        ctx.shared_outputs.append(tensor)
    return tensor


def ndarray(
    shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", address: Any = None, **_: Any
) -> _Tensor:
    """A new tensor; its memory reads as NaN until written (an unwritten output is visible).
    `address=(partition_offset, free_offset)` places it on chip by hand (accelopt.nki.compiler)."""
    ctx = _current()
    if address is not None:
        buffer = _compiler.at_address(_buffer(buffer), address) or buffer
    return _allocate(shape, dtype, buffer, None, ctx.line(), name)


def empty_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> _Tensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or _like_buffer(x), name)


def _like_buffer(x: Any) -> _Buffer:
    return x.buffer if isinstance(x, (_Tensor, _View)) and x.memory is not _Memory.HBM else _SBUF


def full(
    shape: Any,
    fill_value: Any,
    dtype: Any = float32,
    buffer: Any = None,
    name: str = "",
    lazy_initialization: bool = False,
    **_: Any,
) -> _Tensor:
    ctx = _current()
    line = ctx.line()
    value = _scalar_of(fill_value)
    tensor = _allocate(shape, dtype, buffer, value, line, name)
    if not lazy_initialization:
        _memset_record(ctx, tensor, value, line)
    else:
        tensor._written = True
    return tensor


def rand(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **_: Any) -> _Tensor:
    """A new tile of values drawn uniformly from [0, 1) (nki.language.rand). The hardware's
    generator is not public: the emulator's draws are a fixed hash of the instruction's place in
    the trace and each element's position, so a run and its verified re-run agree."""
    ctx = _current()
    line = ctx.line()
    tensor = _allocate(shape, dtype, buffer, 0.0, line, name)
    if ctx.numerics and tensor._data is not None:
        salt = np.full(tensor.shape, len(ctx.trace.records), dtype=np.float32)
        draws = _sys.modules["accelopt.nki.isa"]._drop_draws(salt)
        tensor._data[...] = draws.astype(tensor.dtype)
    _memset_record(ctx, tensor, 0.0, line, opcode="rand")
    return tensor


def _memset_record(
    ctx: _KernelContext, tensor: _Tensor, value: Any, line: int, opcode: str = "memset"
) -> None:
    memory = tensor.memory
    legal: tuple[_Engine, ...]
    if memory is _Memory.HBM:
        engine, legal = _Engine.DMA, (_Engine.DMA,)
    elif memory is _Memory.PSUM:
        engine, legal = _Engine.UNASSIGNED, (_Engine.VECTOR, _Engine.SCALAR)
    else:
        engine, legal = _Engine.UNASSIGNED, _ANY
    shape = tensor.shape[tensor.block_dims :]
    partitions, free = _pf(shape)
    free *= _prod(tensor.shape[: tensor.block_dims])
    region = tensor._full_region()
    ctx.emit(
        engine,
        opcode,
        partitions,
        free,
        _dname(tensor.dtype),
        _dname(tensor.dtype),
        (),
        (region,),
        None,
        memory,
        line,
        bytes=partitions * free * tensor.dtype.itemsize,
        extra=_unassigned_extra(engine, legal, {"value": float(value)}),
    )
    ctx.note_write(tensor, region, line, False)


def zeros(
    shape: Any,
    dtype: Any = float32,
    buffer: Any = None,
    name: str = "",
    lazy_initialization: bool = False,
    **kw: Any,
) -> _Tensor:
    return full(shape, 0, dtype, buffer, name, lazy_initialization)


def ones(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> _Tensor:
    return full(shape, 1, dtype, buffer, name, kw.get("lazy_initialization", False))


def zeros_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> _Tensor:
    return full(x.shape, 0, dtype or x.dtype, buffer or _like_buffer(x), name)


def ones_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> _Tensor:
    return full(x.shape, 1, dtype or x.dtype, buffer or _like_buffer(x), name)


def full_like(
    x: Any, fill_value: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any
) -> _Tensor:
    return full(x.shape, fill_value, dtype or x.dtype, buffer or _like_buffer(x), name)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> _Tensor:
    """A constant tensor in HBM built from host data (e.g. an identity matrix)."""
    ctx = _current()
    line = ctx.line()
    values = np.asarray(constant)
    dtype = _dt.as_dtype(dtype) if dtype is not None else values.dtype
    tensor = _Tensor(
        tuple(values.shape), dtype, _SHARED_HBM, 0, values.astype(dtype) if ctx.numerics else None
    )
    ctx.register_tensor(tensor, ctx.name_at(line, "constant"), line)
    tensor._written = True
    return tensor


def reshape(x: Any, shape: Any) -> _Tensor:
    """A tensor of a new shape over the same memory (HBM tensors, or whole tiles)."""
    ctx = _current()
    line = ctx.line()
    if not isinstance(x, _Tensor):
        raise ctx.error("err_unsupported_reshape", "only whole tensors can be reshaped", line)
    dims, block_dims = _normalize_shape(shape)
    if _prod(dims) != _prod(x.shape):
        raise ctx.error("err_unsupported_reshape", f"cannot reshape {x.shape} to {dims}", line)
    if x.memory is not _Memory.HBM:
        _check_partitions(ctx, dims[block_dims], f"a tile of shape {dims}", line)
    data = x._data.reshape(dims) if x._data is not None else None
    tensor = _Tensor(dims, x.dtype, x.buffer, block_dims, data)
    tensor._root = x if x._root is None else x._root
    tensor._written = x._written
    ctx.register_tensor(tensor, ctx.name_at(line, "reshaped"), line)
    return tensor


# --- data movement -------------------------------------------------------------------------


def load(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> _Tensor:
    """DMA a region of an HBM tensor into a new SBUF tile."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, src, line)
    if view._tensor.memory is not _Memory.HBM:
        raise ctx.error("err_unsupported_memory", "nl.load reads HBM; this tensor is already on chip", line)
    shape = view.shape if view.shape else (1,)
    _check_partitions(ctx, shape[0], f"the loaded tile of shape {shape}", line)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    minfo = _resolve_mask(ctx, mask, view.shape)
    _guard_bounds(ctx, view, minfo)
    values = None
    if ctx.numerics:
        if minfo is not None and minfo.exact_box and view.shape == shape:
            values = view._restrict(minfo.ranges)._read()
        else:
            values = view._read(clip=minfo is not None)
            if values.shape != shape:
                values = values.reshape(shape)
    tile = _result_tile(ctx, shape, out_dtype, _SBUF, line, "load", values, minfo)
    moved = view
    if minfo is not None and minfo.exact_box and view.shape == shape:
        moved = view._restrict(minfo.ranges)  # only the selected elements move
    chunk_bytes, chunks = _dma_shape(moved)
    partitions, free = _pf(moved.shape if moved.shape else shape)
    reads: tuple[Any, ...] = (_region_of(view, minfo),)
    extra = None
    if view.__class__ is not _View:  # an indirect load also reads its index tile
        reads += (view._index_view._region(),)
        extra = {"indirect": True}  # its HBM region is the whole indexed dimension
    tile._producer = ctx.emit(
        _Engine.DMA,
        "dma_load",
        partitions,
        free,
        _dname(view._tensor.dtype),
        _dname(out_dtype),
        reads,
        (_out_region(tile, minfo),),
        _Memory.HBM,
        _Memory.SBUF,
        line,
        bytes=partitions * free * view._tensor.dtype.itemsize,
        dma_chunk_bytes=chunk_bytes,
        dma_chunks=chunks,
        extra=extra,
    )
    return tile


def load_transpose2d(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> _Tensor:
    """DMA a [F, P] HBM region into a [P, F] SBUF tile (element-wise scatter: slow)."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, src, line)
    if view._tensor.memory is not _Memory.HBM or len(view.shape) != 2:
        raise ctx.error(
            "err_unsupported_memory", "nl.load_transpose2d reads a 2-D region of an HBM tensor", line
        )
    shape = (view.shape[1], view.shape[0])
    _check_partitions(ctx, shape[0], f"the transposed tile of shape {shape}", line)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    values = view._read().T if ctx.numerics else None
    tile = _result_tile(ctx, shape, out_dtype, _SBUF, line, "load_transpose2d", values, None)
    partitions, free = _pf(shape)
    itemsize = view._tensor.dtype.itemsize
    tile._producer = ctx.emit(
        _Engine.DMA,
        "dma_load",
        partitions,
        free,
        _dname(view._tensor.dtype),
        _dname(out_dtype),
        (view._region(),),
        (tile._full_region(),),
        _Memory.HBM,
        _Memory.SBUF,
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
    ctx = _current()
    line = ctx.line()
    dview = _to_view(ctx, dst, line)
    if dview._tensor.memory is not _Memory.HBM:
        raise ctx.error(
            "err_unsupported_memory", "nl.store writes HBM; assign into on-chip tiles instead", line
        )
    if not isinstance(value, _TileOps):
        raise ctx.error(
            "err_unsupported_operand", "nl.store needs a tile value (use nl.full for constants)", line
        )
    sview = _to_view(ctx, value, line)
    if sview._tensor.memory is _Memory.HBM:
        raise ctx.error("err_unsupported_memory", "nl.store's value must be an on-chip tile", line)
    if sview._tensor.memory is _Memory.PSUM:
        staged = copy(sview)
        sview = _to_view(ctx, staged, line)
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
    minfo = _resolve_mask(ctx, mask, dview.shape)
    _guard_bounds(ctx, dview, minfo)
    dma_copy(ctx, dview, sview, line, opcode="dma_store", mask=minfo)


# --- elementwise ---------------------------------------------------------------------------


def _unary(
    ctx: _KernelContext,
    line: int,
    spec: _ops.OpSpec,
    x: Any,
    dtype: Any = None,
    mask: Any = None,
    api: str = "",
) -> _Tensor:
    legal: tuple[_Engine, ...]
    if spec.transcendental:
        engine, legal, opcode = _Engine.SCALAR, (_Engine.SCALAR,), "activation"
    elif spec.trivial:
        engine, legal, opcode = _Engine.UNASSIGNED, _ANY, "tensor_copy"
    else:
        engine, legal, opcode = _Engine.UNASSIGNED, _ANY, "tensor_scalar"
    if opcode == "tensor_copy" and isinstance(x, (_Tensor, _View)) and x.memory is _Memory.PSUM:
        opcode = "psum_copy"
        legal = (_Engine.VECTOR, _Engine.SCALAR)
    return _elementwise(
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


def _binary(
    ctx: _KernelContext,
    line: int,
    spec: _ops.OpSpec,
    a: Any,
    b: Any,
    dtype: Any = None,
    mask: Any = None,
    api: str = "",
) -> _Tensor:
    a_tile, b_tile = isinstance(a, _TileOps), isinstance(b, _TileOps)
    if not a_tile and not b_tile:
        raise ctx.error("err_unsupported_operand", f"nl.{spec.name} needs at least one tile operand", line)
    legal: tuple[_Engine, ...]
    if a_tile and b_tile and _free_size(a) > 1 and _free_size(b) > 1:
        engine, legal, opcode = _Engine.VECTOR, _VECTOR_ONLY, "tensor_tensor"
        max_psum = 1
    else:
        # a scalar or a per-partition [P, 1] column: a tensor_scalar instruction
        engine, legal, opcode = _Engine.UNASSIGNED, _ANY, "tensor_scalar"
        max_psum = None
    main = 0 if a_tile and (not b_tile or _free_size(a) >= _free_size(b)) else 1
    return _elementwise(
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


def _apply_op(op: Any, *inputs: Any, dtype: Any = None, mask: Any = None) -> _Tensor:
    """Apply an operator given as an object (numpy ufunc, nl function) to tiles/scalars."""
    ctx = _current()
    line = ctx.line()
    spec = _ops.resolve(op)
    if spec.arity == 1:
        return _unary(ctx, line, spec, inputs[0], dtype, mask)
    return _binary(ctx, line, spec, inputs[0], inputs[1], dtype, mask)


_UNARY_NAMES: list[str] = []
_BINARY_NAMES: list[str] = []


def _make_unary(name: str) -> Any:
    spec = _ops.spec(name)
    _UNARY_NAMES.append(name)

    def fn(x: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
        ctx = _current()
        return _unary(ctx, ctx.line(), spec, x, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of a tile."
    _ops.register(fn, name)
    return fn


def _make_binary(name: str) -> Any:
    spec = _ops.spec(name)
    _BINARY_NAMES.append(name)

    def fn(x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
        ctx = _current()
        return _binary(ctx, ctx.line(), spec, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of two tiles (or a tile and a scalar)."
    _ops.register(fn, name)
    return fn


def dropout(x: Any, rate: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """Zero each element of `x` with probability `rate` (nki.language.dropout: the same
    instruction as nki.isa.dropout; a tile `rate` holds one value per partition)."""
    isa = _sys.modules["accelopt.nki.isa"]  # isa imports this module: resolved late
    result: _Tensor = isa._dropout_on(_current(), "nl.dropout", x, rate, mask, dtype)
    return result


exp = _make_unary("exp")
log = _make_unary("log")
sqrt = _make_unary("sqrt")
rsqrt = _make_unary("rsqrt")
sigmoid = _make_unary("sigmoid")
tanh = _make_unary("tanh")
gelu = _make_unary("gelu")
gelu_apprx_tanh = _make_unary("gelu_apprx_tanh")
gelu_apprx_sigmoid = _make_unary("gelu_apprx_sigmoid")
gelu_apprx_sigmoid_dx = _make_unary("gelu_apprx_sigmoid_dx")
gelu_dx = _make_unary("gelu_dx")
silu_dx = _make_unary("silu_dx")
erf_dx = _make_unary("erf_dx")
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


def copy(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """A copy of a tile into a new SBUF tile (PSUM → SBUF copies included)."""
    ctx = _current()
    return _unary(ctx, ctx.line(), _ops.spec("copy"), x, dtype, mask, api="nl.copy")


_ops.register(copy, "copy")


def identity(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    ctx = _current()
    return _unary(ctx, ctx.line(), _ops.spec("copy"), x, dtype, mask, api="nl.identity")


def _select(condition: Any, x: Any, y: Any) -> np.ndarray:
    return np.where(np.asarray(condition) != 0, x, y)


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    ctx = _current()
    line = ctx.line()
    return _elementwise(
        ctx,
        line,
        api="nl.where",
        opcode="select",
        operands=(condition, x, y),
        compute=_select,
        engine=_Engine.VECTOR,
        legal=_VECTOR_ONLY,
        dtype=dtype,
        mask=mask,
        main=1,
    )


# --- reductions ----------------------------------------------------------------------------


def _axes(ctx: _KernelContext, axis: Any, ndim: int, line: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(1, ndim)) if ndim > 1 else (0,)
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axes = tuple(sorted(int(a) % ndim for a in axis))
    return axes


def _reduce(
    ctx: _KernelContext,
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
    engine: _Engine | None = None,
    api: str = "",
) -> _Tensor:
    """Reduce a tile along axes with a binary op (free axes on the Vector Engine)."""
    view = _to_view(ctx, x, line)
    api = api or f"nl.{spec.name}"
    _check_on_chip(ctx, view, api, line)
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
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    partition_reduce = 0 in axes and len(view.shape) > 1
    if engine is None:
        engine = _Engine.GPSIMD if partition_reduce else _Engine.VECTOR
    minfo = _resolve_mask(ctx, mask, view.shape)
    values = None
    if ctx.numerics:
        data = _read_values(view, minfo is not None)
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
    out = _result_tile(ctx, shape, out_dtype, _SBUF, line, "reduce", values, None)
    partitions, free = _pf(view.shape)
    extra: dict[str, Any] = {"op": spec.name, "axes": list(axes)}
    if partition_reduce:
        extra["partition_reduce"] = True
    if negate:
        extra["negate"] = True
    out._producer = ctx.emit(
        engine,
        "tensor_reduce",
        partitions,
        free,
        _dname(view._tensor.dtype),
        _dname(out_dtype),
        (_region_of(view, minfo),),
        (out._full_region(),),
        view._tensor.memory,
        _Memory.SBUF,
        line,
        bytes=partitions * free * view._tensor.dtype.itemsize,
        vector_ops=partitions * free,
        extra=extra,
    )
    return out


def _make_reduction(name: str, op: str, *, mean: bool = False) -> Any:
    """``nl.<name>``: a reduction of a tile with the binary op ``op`` (a mean divides by the count)."""
    spec = _ops.spec(op)
    api = f"nl.{name}"

    def fn(
        x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
    ) -> _Tensor:
        ctx = _current()
        return _reduce(
            ctx, ctx.line(), spec, x, axis, dtype=dtype, keepdims=keepdims, mask=mask, mean=mean, api=api
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Reduce a tile along axes with {op}" + (", divided by the count." if mean else ".")
    return fn


sum = _make_reduction("sum", "add")
max = _make_reduction("max", "maximum")
min = _make_reduction("min", "minimum")
prod = _make_reduction("prod", "multiply")
mean = _make_reduction("mean", "add", mean=True)
# nl.all is a minimum reduction: on 0/1 tiles it is 1 only where every element is 1
all = _make_reduction("all", "minimum")


def var(x: Any, axis: Any = None, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    centered = subtract(x, mean(x, axis=axis, keepdims=True))
    return mean(square(centered), axis=axis, dtype=dtype)


_ops.register(sum, "add")
_ops.register(max, "maximum")
_ops.register(min, "minimum")


def softmax(x: Any, axis: Any = -1, dtype: Any = None, **_: Any) -> _Tensor:
    """softmax along the free axis: max, exp(x - max), sum, reciprocal, multiply."""
    row_max = max(x, axis=axis, keepdims=True)
    shifted = exp(subtract(x, row_max))
    total = sum(shifted, axis=axis, keepdims=True)
    return multiply(shifted, reciprocal(total), dtype=dtype)


# --- tensor engine -------------------------------------------------------------------------


def _matmul_record(
    ctx: _KernelContext,
    line: int,
    stationary: _View,
    moving: _View,
    *,
    api: str,
    is_transpose: bool = False,
    strict: bool = True,
    mask: Any = None,
    dtype: Any = None,
    rows_per_partition: int = 1,
) -> _Tensor:
    """``stationary.T @ moving`` on the Tensor Engine into a new fp32 PSUM tile.
    `rows_per_partition` 2 is the double-row FP8 mode: operands [K, 2, M] and [K, 2, N], each
    partition holding two rows of the contraction (2K deep)."""
    for v, role in ((stationary, "stationary"), (moving, "moving")):
        if v._tensor.memory is not _Memory.SBUF:
            raise ctx.error(
                "err_unsupported_memory",
                f"{api}: the Tensor Engine reads only SBUF, but the {role} operand is in {v._tensor.memory.value.upper()}",
                line,
            )
    k, m = _pf(stationary.shape)
    k2, n = _pf(moving.shape)
    m //= rows_per_partition
    n //= rows_per_partition
    if k != k2:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"{api}: stationary has {k} partitions (K) but moving has {k2}; the contraction sizes must match",
            line,
        )
    for size, limit, what in (
        (k, _MATMUL_MAX_K, "contraction (partition) size K"),
        (m, _MATMUL_MAX_M, "stationary free size M"),
        (n, _MATMUL_MAX_N, "moving free size N"),
    ):
        if size > limit:
            raise ctx.error(
                "err_size_of_dimension_exceed_arch_limit",
                f"{api}: {what} is {size}; at most {limit} is supported",
                line,
            )
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else float32
    if is_transpose and dtype is None:
        out_dtype = stationary._tensor.dtype
    values = None
    if ctx.numerics:
        s = _read_values(stationary, False).reshape(k * rows_per_partition, m)
        mv = _read_values(moving, False).reshape(k * rows_per_partition, n)
        values = s.T @ mv
        if is_transpose and dtype is None:
            values = values.astype(np.float32)
    if rows_per_partition > 1:
        shape: tuple[int, ...] = (m, n)
    else:
        shape = (m, *moving.shape[1:]) if len(moving.shape) > 2 else (m, n)
    if values is not None:
        values = values.reshape(shape)
    minfo = _resolve_mask(ctx, mask, shape)
    out = _result_tile(ctx, shape, out_dtype, _PSUM, line, "matmul", values, minfo)
    fp32 = stationary._tensor.dtype == np.float32 or moving._tensor.dtype == np.float32
    depth = k * rows_per_partition  # the logical contraction (the timing model's fp8 rate sees it)
    flops = 2 * depth * m * n * (2 if fp32 else 1)
    out._producer = ctx.emit(
        _Engine.TENSOR,
        "transpose" if is_transpose else "nc_matmul",
        k,
        n,
        _dname(stationary._tensor.dtype),
        _dname(out_dtype),
        (stationary._region(), moving._region()),
        (_out_region(out, minfo),),
        _Memory.SBUF,
        _Memory.PSUM,
        line,
        bytes=depth * n * moving._tensor.dtype.itemsize,
        flops=flops,
        is_transpose=is_transpose,
        matmul_kmn=(depth, m, n),
        extra={"api": api, "strict": strict},
    )
    return out


def _tensor_engine_transpose(
    ctx: _KernelContext, line: int, x: _View, api: str, strict: bool, out_buffer: _Buffer = _PSUM
) -> _Tensor:
    """A Tensor Engine transpose [P, F] → [F, P] into PSUM (a matmul with an identity)."""
    p, f = _pf(x.shape)
    if x._tensor.memory is not _Memory.SBUF:
        raise ctx.error(
            "err_unsupported_memory",
            f"{api}: the Tensor Engine reads only SBUF, but the tile is in {x._tensor.memory.value.upper()}",
            line,
        )
    _check_partitions(ctx, f, f"the transposed tile ({f} partitions)", line)
    values = _read_values(x, False).reshape(p, f).T if ctx.numerics else None
    out = _result_tile(ctx, (f, p), x._tensor.dtype, out_buffer, line, "transpose", values, None)
    fp32 = x._tensor.dtype == np.float32
    out._producer = ctx.emit(
        _Engine.TENSOR,
        "transpose",
        p,
        p,
        _dname(x._tensor.dtype),
        _dname(x._tensor.dtype),
        (x._region(),),
        (out._full_region(),),
        _Memory.SBUF,
        out_buffer.memory,
        line,
        bytes=p * f * x._tensor.dtype.itemsize,
        flops=2 * p * f * p * (2 if fp32 else 1),
        is_transpose=True,
        matmul_kmn=(p, f, p),
        extra={"api": api, "strict": strict},
    )
    return out


def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **_: Any) -> _Tensor:
    """``x @ y`` on the Tensor Engine into PSUM; without transpose_x, x is transposed there first."""
    ctx = _current()
    line = ctx.line()
    xv = _to_view(ctx, x, line)
    yv = _to_view(ctx, y, line)
    if not transpose_x:
        # the compiler stages the transposed x in SBUF for the matmul
        xt = _tensor_engine_transpose(ctx, line, xv, "nl.matmul", strict=False, out_buffer=_SBUF)
        xv = _to_view(ctx, xt, line)
    return _matmul_record(ctx, line, xv, yv, api="nl.matmul", strict=False, mask=mask)


def transpose(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
    """Transpose a 2-D tile (Tensor Engine, then a PSUM → SBUF copy)."""
    ctx = _current()
    line = ctx.line()
    xv = _to_view(ctx, x, line)
    _check_on_chip(ctx, xv, "nl.transpose", line)
    if xv._tensor.memory is _Memory.PSUM:
        xv = _to_view(ctx, copy(xv), line)
    t = _tensor_engine_transpose(ctx, line, xv, "nl.transpose", strict=False)
    return _unary(ctx, line, _ops.spec("copy"), t, dtype, mask, api="nl.transpose")


def broadcast_to(x: Any, shape: Any) -> _Tensor:
    """Broadcast a tile: across partitions on the Tensor Engine (a matmul with ones), along the
    free axis with a copy."""
    ctx = _current()
    line = ctx.line()
    view = _to_view(ctx, x, line)
    _check_on_chip(ctx, view, "broadcast_to", line)
    shape = tuple(int(s) for s in shape)
    src_shape = view.shape + (1,) * (len(shape) - len(view.shape))
    for s, d in zip(src_shape, shape):
        if s != d and s != 1:
            raise ctx.error(
                "err_shape_mismatch", f"cannot broadcast a tile of shape {view.shape} to {shape}", line
            )
    if src_shape == shape:
        return x if isinstance(x, _Tensor) else copy(view)
    _check_partitions(ctx, shape[0], f"the broadcast tile of shape {shape}", line)
    values = None
    if ctx.numerics:
        values = np.broadcast_to(_read_values(view, False).reshape(src_shape), shape)
    out = _result_tile(ctx, shape, view._tensor.dtype, _SBUF, line, "broadcast", values, None)
    partitions, free = _pf(shape)
    costs: dict[str, Any]
    if src_shape[0] == 1 and shape[0] > 1:
        # one row to many partitions runs as a K=1 matmul on the Tensor Engine
        fp32 = view._tensor.dtype == np.float32
        engine, opcode, rows = _Engine.TENSOR, "broadcast", 1
        costs = {
            "flops": 2 * partitions * free * (2 if fp32 else 1),
            "matmul_kmn": (1, partitions, free),
            "extra": {"api": "broadcast_to"},
        }
    else:
        legal = (_Engine.VECTOR, _Engine.SCALAR) if view._tensor.memory is _Memory.PSUM else _ANY
        engine, opcode, rows = _Engine.UNASSIGNED, "tensor_copy", partitions
        costs = {"extra": _unassigned_extra(_Engine.UNASSIGNED, legal, {"api": "broadcast_to"})}
    out._producer = ctx.emit(
        engine,
        opcode,
        rows,
        free,
        _dname(view._tensor.dtype),
        _dname(view._tensor.dtype),
        (view._region(),),
        (out._full_region(),),
        view._tensor.memory,
        _Memory.SBUF,
        line,
        bytes=_prod(view.shape) * view._tensor.dtype.itemsize,
        **costs,
    )
    return out


# --- loop-carried reduction ----------------------------------------------------------------


def loop_reduce(
    x: Any, op: Any, loop_indices: Sequence[Any], dtype: Any = None, mask: Any = None, **_: Any
) -> _Tensor:
    """Reduce `x` across iterations of the given loops: the first iteration initialises the
    accumulator, later ones combine into it with `op`. Returns the accumulator tile."""
    ctx = _current()
    line = ctx.line()
    spec = _ops.resolve(op)
    if isinstance(loop_indices, (int, np.integer)):
        loop_indices = [loop_indices]
    loop_ids = {getattr(i, "loop_id", None) for i in loop_indices}
    if None in loop_ids:
        raise ctx.error(
            "err_unsupported_loop_reduce", "loop_indices must be loop variables of enclosing loops", line
        )
    view = _to_view(ctx, x, line)
    _check_on_chip(ctx, view, "nl.loop_reduce", line)
    frames = ctx.frames
    first = _builtins.all(f.iteration == 0 for f in frames if f.loop_id in loop_ids)
    outer = tuple(f for f in frames if f.loop_id not in loop_ids)
    key = (*ctx.call_site(), outer)  # the calling kernel statement (a re-run: the recorded one)
    acc: _Tensor | None = ctx.loop_reduce_state.get(key)
    out_dtype = _dt.as_dtype(dtype) if dtype is not None else view._tensor.dtype
    minfo = _resolve_mask(ctx, mask, view.shape)
    partitions, free = _pf(view.shape)
    if first or acc is None:
        acc = _Tensor(
            view.shape, out_dtype, _SBUF, 0, _new_data(view.shape, out_dtype) if ctx.numerics else None
        )
        ctx.register_tensor(acc, ctx.name_at(line, "loop_reduce"), line, alloc_loops=outer)
        acc._alloc_scopes = tuple(s for s in ctx.scopes if s.loop_id not in loop_ids)
        ctx.loop_reduce_state[key] = acc
        region = _region_of(acc._full_view(), minfo)
        record = ctx.emit(
            _Engine.UNASSIGNED,
            "tensor_copy",
            partitions,
            free,
            _dname(view._tensor.dtype),
            _dname(out_dtype),
            (_region_of(view, minfo),),
            (region,),
            view._tensor.memory,
            _Memory.SBUF,
            line,
            bytes=partitions * free * view._tensor.dtype.itemsize,
            extra=_unassigned_extra(_Engine.UNASSIGNED, _ANY, {"api": "loop_reduce"}),
        )
        ctx.note_write(acc, region, line, True)
        if ctx.numerics:
            acc._full_view()._write(
                _read_values(view, minfo is not None), mask=None if minfo is None else minfo.grid
            )
    else:
        # the running value lives where the kernel assigned it (e.g. `red[...] = nl.loop_reduce(...)`)
        target = acc._alias if acc._alias is not None else acc._full_view()
        region = _region_of(target, minfo)
        record = ctx.emit(
            _Engine.VECTOR,
            "tensor_tensor",
            partitions,
            free,
            _dname(view._tensor.dtype),
            _dname(out_dtype),
            (_region_of(view, minfo), region),
            (region,),
            view._tensor.memory,
            _Memory.SBUF,
            line,
            bytes=partitions * free * view._tensor.dtype.itemsize,
            vector_ops=partitions * free,
            extra={"op": spec.name, "api": "loop_reduce"},
        )
        ctx.note_write(target._tensor, region, line, True)
        if ctx.numerics:
            with np.errstate(all="ignore"):
                combined = spec.fn(_read_values(target, False), _read_values(view, minfo is not None))
            target._write(combined.reshape(target.shape), mask=None if minfo is None else minfo.grid)
    # assigning the result into a tile makes that tile the accumulator (no extra copy)
    acc._producer = record
    acc._fresh = acc._alias is None
    return acc


# --- nki.* language (NKI 0.2-0.7) ---------------------------------------------------------


class _TensorAnnotation(type):
    """`isinstance(x, nl.NkiTensor)` holds for every tensor and view a kernel holds."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, (_Tensor, _View))

    def __getitem__(cls, args: Any) -> Any:
        return cls  # `nl.NkiTensor[...]` in annotations


class NkiTensor(metaclass=_TensorAnnotation):
    """The tensor type of the nki.* language, for annotations and isinstance checks (tensors
    are made by nl.ndarray and friends, not by calling this class)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from accelopt.nki.unsupported import refuse

        refuse("nki.language.NkiTensor(...)", "make tensors with nl.ndarray")


class NKIObject:
    """Base class of kernel-side configuration objects (a plain Python base under emulation)."""


def is_hbm(buffer: Any) -> bool:
    return _buffer(buffer).memory is _Memory.HBM


def is_sbuf(buffer: Any) -> bool:
    return _buffer(buffer).memory is _Memory.SBUF


def is_psum(buffer: Any) -> bool:
    return _buffer(buffer).memory is _Memory.PSUM


def is_on_chip(buffer: Any) -> bool:
    return _buffer(buffer).memory is not _Memory.HBM


def shared_identity_matrix(n: int, dtype: Any = uint8, **_: Any) -> _Tensor:
    """An n x n identity tile in SBUF: a constant in HBM loaded once per call."""
    return load(shared_constant(np.eye(int(n)), dtype=dtype))


class MemoryRegion:
    """The memories a tensor can live in, by name (``nl.MemoryRegion.sbuf`` is ``nl.sbuf``)."""

    sbuf = _SBUF
    psum = _PSUM
    private_hbm = _PRIVATE_HBM
    shared_hbm = _SHARED_HBM


def gather_flattened(data: Any, indices: Any, axis: int = 0, dtype: Any = None, **_: Any) -> _Tensor:
    """``out[p, i...] = data[p].flat[indices[p, i...]]`` (nl.gather_flattened): each partition
    gathers from its own flattened free dimensions."""
    from accelopt.nki import isa as _isa

    ctx = _current()
    if int(axis) != 0:
        from accelopt.nki.unsupported import refuse

        refuse("nki.language.gather_flattened", f"axis={axis}")
    return _isa._gather_free(ctx, ctx.line(), "nl.gather_flattened", data, indices, dtype, _Engine.GPSIMD)


def rms_norm(
    x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None, compute_dtype: Any = None
) -> _Tensor:
    """``x / RMS(x) * w`` with ``RMS(x) = sqrt(sum(x^2 along axis) / n + epsilon)``
    (nl.rms_norm; the epsilon placement is read from its parameter description)."""
    total = sum(square(x), axis=axis, keepdims=True)
    inverse = rsqrt(add(multiply(total, 1.0 / float(n)), float(epsilon)))
    return multiply(multiply(x, inverse), w, dtype=dtype)


def atomic_rmw(dst: Any, value: Any, op: Any, mask: Any = None, **_: Any) -> None:
    """``dst = op(dst, value)`` on HBM, atomically, by DMA (nl.atomic_rmw): `value` an on-chip
    tile of `dst`'s shape. With tile-indexed rows (``dst[index_tile, ...]``) two partitions may
    name the same row; atomicity means both updates land, so the rows are updated partition by
    partition (the order does not matter for add/max/min, the ops the page shows). `mask` is a
    predicate over index grids or, as the SDK's own atomic_rmw example passes, a tile of
    run-time booleans (broadcast over the free axis from [P, 1]); the reference only documents
    compile-time masks, so the run-time form is *inferred*: a false element is not updated."""
    ctx = _current()
    line = ctx.line()
    spec = _ops.resolve(op)
    dview = _to_view(ctx, dst, line)
    sview = _to_view(ctx, value, line)
    if dview._tensor.memory is not _Memory.HBM or sview._tensor.memory is _Memory.HBM:
        raise ctx.error("err_unsupported_memory", "nl.atomic_rmw updates HBM from an on-chip tile", line)
    if _prod(dview.shape) != _prod(sview.shape):
        raise ctx.error(
            "err_shape_mismatch",
            f"nl.atomic_rmw: a tile of shape {sview.shape} for a region of shape {dview.shape}",
            line,
        )
    keep_view = None
    runtime_keep = None
    if isinstance(mask, _TileOps):
        keep_view = _runtime_mask(ctx, mask, dview.shape, line)
        minfo = None
        if keep_view._tensor._data is not None:
            flags = np.asarray(keep_view._read()).reshape(dview.shape[0], -1) != 0
            if flags.shape[1] == 1:
                flags = np.broadcast_to(flags, (dview.shape[0], _prod(dview.shape[1:])))
            runtime_keep = flags.reshape(dview.shape)
            if hasattr(dview, "_excuse_rows"):  # sentinel rows masked out are never touched
                dview._excuse_rows(flags.any(axis=1))
    else:
        minfo = _resolve_mask(ctx, mask, dview.shape)
    region = _region_of(dview, minfo)
    partitions, free = _pf(sview.shape)
    reads = (_region_of(sview, None), region, *_index_reads([dview]))
    if keep_view is not None:
        reads += (keep_view._region(),)
    ctx.emit(
        _Engine.DMA,
        "dma_copy",
        partitions,
        free,
        _dname(sview._tensor.dtype),
        _dname(dview._tensor.dtype),
        reads,
        (region,),
        sview._tensor.memory,
        _Memory.HBM,
        line,
        bytes=2 * partitions * free * dview._tensor.dtype.itemsize,
        dma_chunk_bytes=_dma_shape(dview)[0],
        dma_chunks=_dma_shape(dview)[1],
        extra={"api": "nl.atomic_rmw", "op": spec.name},
    )
    ctx.note_write(dview._tensor, region, line, True)
    if not ctx.numerics or dview._tensor._data is None:
        return
    keep = runtime_keep if minfo is None else np.reshape(minfo.grid, dview.shape)
    values = _read_values(sview, False).reshape(dview.shape)
    if dview.__class__ is _View or not dview.shape:
        with np.errstate(all="ignore"):
            combined = spec.fn(_read_values(dview, False), values)
        dview._write(combined, mask=keep)
        return
    full = [(0, n) for n in dview.shape[1:]]
    for p in range(dview.shape[0]):
        row = dview._restrict([(p, p + 1), *full])
        with np.errstate(all="ignore"):
            combined = spec.fn(_read_values(row, False), values[p : p + 1])
        row._write(combined, mask=None if keep is None else keep[p : p + 1])


def _runtime_mask(ctx: _KernelContext, mask: Any, shape: tuple[int, ...], line: int) -> _View:
    view = _to_view(ctx, mask, line)
    if view._tensor.memory is _Memory.HBM:
        raise ctx.error("err_unsupported_mask", "a run-time mask must be an on-chip tile", line)
    # one value per partition ([P, 1]) or one per element; the partition axis aligns first
    free = _prod(view.shape[1:])
    fits = bool(shape) and view.shape[:1] == shape[:1] and free in (1, _prod(shape[1:]))
    if not fits:
        raise ctx.error(
            "err_unsupported_mask",
            f"a run-time mask of shape {view.shape} does not fit an access of shape {shape}",
            line,
        )
    return view


def expand_dims(x: Any, axis: int) -> Any:
    """A view of `x` with a new axis of size 1 at `axis`."""
    return _views.expand_dim_view(x, axis)


# Trace-only runs replay repeated calls of these from the same kernel statement (see replay.py).
_replay.make_replayable(
    globals(),
    (
        "ndarray",
        "empty_like",
        "full",
        "zeros",
        "ones",
        "zeros_like",
        "ones_like",
        "full_like",
        "load",
        "load_transpose2d",
        "store",
        *_UNARY_NAMES,
        *_BINARY_NAMES,
        "copy",
        "identity",
        "where",
        "sum",
        "max",
        "min",
        "prod",
        "mean",
        "all",
        "var",
        "softmax",
        "matmul",
        "transpose",
        "broadcast_to",
        # trn3 (accelopt.nki.mx), bound here as nl.*
        "abs_max",
        "abs_min",
    ),
)
bitwise_not = invert  # the wrapped function, like its other name

# Verified runs log these too (calllog.py); the ones above are logged by their replay wrapper.
_calllog.logged(globals(), ("loop_reduce", "shared_constant", "reshape", "_apply_op"))

# Numeric runs to be verified log these as one call each (calllog.py).
_calllog.logged(globals(), ("shared_identity_matrix", "gather_flattened", "rms_norm", "atomic_rmw"))
_calllog.logged(globals(), ("dropout", "rand"))
