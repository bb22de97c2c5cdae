"""NeuronCore-v4 (Trainium3) instructions: OCP microscaling (MX) quantization and matmul,
``activate2``, and the ``abs_max`` / ``abs_min`` operators.

MX layout (NKI API reference, ``nki.isa.quantize_mx`` and ``nki.isa.nc_matmul_mx``, v2.29-v2.33):
a group of 32 values is 8 partitions x 4 consecutive free elements. A 4-packed element
(``float8_e5m2_x4``, ``float8_e4m3fn_x4``: 32 bits; ``float4_e2m1fn_x4``: 16 bits) holds the 4
free elements of one partition, element i in bits [8i, 8i+8) (FP4: [4i, 4i+4)). So a source tile
[P, F] quantizes to data [P, F/4] of a packed type and one E8M0 scale per group.

*Our reading* where the pages leave it open: the scale tile is [P/8, F/4] (one per group) or
[P, F/4] (every partition of a group holding its group's scale); the block scale is
2^(floor(log2(amax)) - emax + 1), the doubled OCP scale the v2.32 page describes, so the largest
value of a group never saturates (emax: 8 for e4m3fn, 15 for e5m2, 2 for e2m1); an all-zero group
gets the smallest scale, 2^-127. ``nc_matmul_mx`` contracts over partitions x 4: stationary
[K, M] and moving [K, N] packed tiles are logically [4K, M] and [4K, N] with row 4k+i holding
element i of partition k, each value times its group's scale; the result [M, N] is fp32 in PSUM.

Numerics are a pure function of the inputs and the recorded parameters (op names, immediates).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes as _ml_dtypes
import numpy as np

from accelopt.nki import dtypes as _dt
from accelopt.nki import ops as _ops
from accelopt.nki.activation import scalar_activation as _scalar_activation
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.context import current as _current
from accelopt.nki.dtypes import dname as _dname
from accelopt.nki.instructions import PSUM as _PSUM
from accelopt.nki.instructions import assign as _assign
from accelopt.nki.instructions import pf as _pf
from accelopt.nki.instructions import read_values as _read_values
from accelopt.nki.instructions import result_tile as _result_tile
from accelopt.nki.instructions import scalar_of as _scalar_of
from accelopt.nki.instructions import to_view as _to_view
from accelopt.nki.target import require_generation as _require_generation
from accelopt.nki.tensor import Tensor as _Tensor
from accelopt.nki.tensor import TileOps as _TileOps
from accelopt.nki.tensor import View as _View
from accelopt.nki.trace import Engine as _Engine
from accelopt.nki.trace import Memory as _Memory

_GROUP_PARTITIONS = 8
_GROUP_ELEMENTS = 4
_EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1fn": 2}
_SCALE_BIAS = 127  # E8M0: the byte is the exponent + 127
_NEURONCORE_V4 = 4


def _sbuf_view(ctx: _KernelContext, x: Any, api: str, role: str, line: int) -> _View:
    view = _to_view(ctx, x, line)
    if view._tensor.memory is not _Memory.SBUF:
        raise ctx.error(
            "err_unsupported_memory",
            f"{api}: {role} must be in SBUF, it is in {view._tensor.memory.value.upper()}",
            line,
        )
    return view


def _element_type(ctx: _KernelContext, view: _View, api: str, role: str, line: int) -> np.dtype:
    element = _dt.PACKED_X4.get(view._tensor.dtype)
    if element is None:
        raise ctx.error(
            "err_unsupported_dtype",
            f"{api}: {role} must be float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4, "
            f"not {_dname(view._tensor.dtype)}",
            line,
        )
    return element


# --- packing -----------------------------------------------------------------------------------


def pack_x4(values: np.ndarray, packed: np.dtype) -> np.ndarray:
    """[P, F] values (already representable) -> [P, F/4] of the 4-packed type `packed`."""
    element = _dt.PACKED_X4[packed]
    p, f = values.shape
    codes = np.asarray(values, dtype=np.float32).astype(element).view(np.uint8).reshape(p, f // 4, 4)
    if element == _dt.float4_e2m1fn:
        words = codes[..., 0].astype(np.uint16) & 0xF
        for i in range(1, 4):
            words |= (codes[..., i].astype(np.uint16) & 0xF) << (4 * i)
        return words.view(packed)
    words32 = codes[..., 0].astype(np.uint32)
    for i in range(1, 4):
        words32 |= codes[..., i].astype(np.uint32) << (8 * i)
    return words32.view(packed)


def unpack_x4(data: np.ndarray) -> np.ndarray:
    """[P, F] of a 4-packed type -> [P, 4F] fp32 element values (element i of word j at 4j+i)."""
    element = _dt.PACKED_X4[data.dtype]
    bits = data.view(np.uint16 if element == _dt.float4_e2m1fn else np.uint32)
    width, mask = (4, 0xF) if element == _dt.float4_e2m1fn else (8, 0xFF)
    codes = np.stack([(bits >> (width * i)) & mask for i in range(4)], axis=-1).astype(np.uint8)
    return codes.view(element).astype(np.float32).reshape(data.shape[0], data.shape[1] * 4)


def _scale_exponents(ctx: _KernelContext, view: _View, groups: int, api: str, role: str, line: int) -> np.ndarray:
    """The E8M0 exponent (unbiased) of every group row of a scale tile: [groups, F]."""
    p = view.shape[0]
    raw = view._read(False)
    codes = raw.view(np.uint8) if raw.dtype == _dt.float8_e8m0fnu else np.asarray(raw).astype(np.uint8)
    codes = codes.reshape(p, -1)
    if p == groups:
        rows = codes
    elif p == groups * _GROUP_PARTITIONS:
        rows = codes[::_GROUP_PARTITIONS]
    else:
        raise ctx.error(
            "err_shape_mismatch",
            f"{api}: {role} has {p} partitions; expected {groups} (one per 8-partition group) "
            f"or {groups * _GROUP_PARTITIONS}",
            line,
        )
    return rows.astype(np.int32) - _SCALE_BIAS


# --- quantize_mx -------------------------------------------------------------------------------


def quantize_mx(dst: Any, src: Any, dst_scale: Any, **_: Any) -> Any:
    """Quantize an fp16/bf16 SBUF tile [P, F] to MX: data [P, F/4] (4-packed FP8) and one E8M0
    scale per group of 8 partitions x 4 elements, on the Vector Engine (NeuronCore-v4+)."""
    ctx = _current()
    line = ctx.line()
    api = "nisa.quantize_mx"
    _require_generation(api, _NEURONCORE_V4, line)
    sview = _sbuf_view(ctx, src, api, "src", line)
    dview = _sbuf_view(ctx, dst, api, "dst", line)
    scale_view = _sbuf_view(ctx, dst_scale, api, "dst_scale", line)
    if sview._tensor.dtype not in (_dt.float16, _dt.bfloat16):
        raise ctx.error("err_unsupported_dtype", f"{api}: src must be float16 or bfloat16", line)
    element = _element_type(ctx, dview, api, "dst", line)
    if element == _dt.float4_e2m1fn:
        raise ctx.error("err_unsupported_dtype", f"{api}: dst must be a 4-packed FP8 type", line)
    p, f = _pf(sview.shape)
    if p % 32 or p > 128 or f % _GROUP_ELEMENTS:
        raise ctx.error(
            "err_size_of_dimension_exceed_arch_limit",
            f"{api}: src is {p}x{f}; its partitions must be a multiple of 32 (at most 128) and its "
            "free size a multiple of 4",
            line,
        )
    if _pf(dview.shape) != (p, f // _GROUP_ELEMENTS):
        raise ctx.error(
            "err_shape_mismatch", f"{api}: dst must be [{p}, {f // _GROUP_ELEMENTS}], got {dview.shape}", line
        )
    groups = p // _GROUP_PARTITIONS
    sp, sf = _pf(scale_view.shape)
    if sf != f // _GROUP_ELEMENTS or sp not in (groups, p):
        raise ctx.error(
            "err_shape_mismatch",
            f"{api}: dst_scale must be [{groups}, {f // _GROUP_ELEMENTS}] or [{p}, {f // _GROUP_ELEMENTS}], "
            f"got {scale_view.shape}",
            line,
        )
    ctx.emit(
        _Engine.VECTOR,
        "quantize_mx",
        p,
        f,
        _dname(sview._tensor.dtype),
        _dname(dview._tensor.dtype),
        (sview._region(),),
        (dview._region(), scale_view._region()),
        _Memory.SBUF,
        _Memory.SBUF,
        line,
        bytes=p * f * sview._tensor.dtype.itemsize,
        vector_ops=2 * p * f,
        extra={"api": api, "mx": True, "scale_rows": "group" if sp == groups else "partition"},
    )
    ctx.note_write(dview._tensor, dview._region(), line, False)
    ctx.note_write(scale_view._tensor, scale_view._region(), line, False)
    if ctx.numerics:
        data, exponents = quantize_values(_read_values(sview, False).reshape(p, f), dview._tensor.dtype)
        dview._write(data.reshape(dview.shape))
        codes = (exponents + _SCALE_BIAS).astype(np.uint8)
        if sp == p:
            codes = np.repeat(codes, _GROUP_PARTITIONS, axis=0)
        stype = scale_view._tensor.dtype
        scale_view._write((codes.view(stype) if stype == _dt.float8_e8m0fnu else codes).reshape(scale_view.shape))
    return dst


def quantize_values(values: np.ndarray, packed: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """MX quantization of [P, F] fp32 values: (packed data [P, F/4], scale exponents [P/8, F/4])."""
    element = _dt.PACKED_X4[packed]
    p, f = values.shape
    blocks = values.reshape(p // _GROUP_PARTITIONS, _GROUP_PARTITIONS, f // _GROUP_ELEMENTS, _GROUP_ELEMENTS)
    amax = np.abs(blocks).max(axis=(1, 3))
    with np.errstate(divide="ignore"):
        exponents = np.where(
            amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - _EMAX[_dname(element)] + 1, -_SCALE_BIAS
        ).astype(np.int32)
    exponents = np.clip(exponents, -_SCALE_BIAS, _SCALE_BIAS)
    scale = np.ldexp(np.float32(1), exponents)[:, None, :, None]
    limit = float(_ml_dtypes.finfo(element).max)
    scaled = np.clip(blocks / scale, -limit, limit).reshape(p, f)
    return pack_x4(scaled, packed), exponents


# --- nc_matmul_mx ------------------------------------------------------------------------------


def nc_matmul_mx(
    dst: Any, stationary: Any, moving: Any, stationary_scale: Any, moving_scale: Any, **kwargs: Any
) -> Any:
    """``dst = dequant(stationary).T @ dequant(moving)`` of MX tiles on the Tensor Engine
    (NeuronCore-v4+); accumulates into ``dst`` when ``accumulate=True``."""
    ctx = _current()
    line = ctx.line()
    api = "nisa.nc_matmul_mx"
    _require_generation(api, _NEURONCORE_V4, line)
    s = _sbuf_view(ctx, stationary, api, "stationary", line)
    m = _sbuf_view(ctx, moving, api, "moving", line)
    ss = _sbuf_view(ctx, stationary_scale, api, "stationary_scale", line)
    ms = _sbuf_view(ctx, moving_scale, api, "moving_scale", line)
    _element_type(ctx, s, api, "stationary", line)
    _element_type(ctx, m, api, "moving", line)
    k, cols_m = _pf(s.shape)
    k2, cols_n = _pf(m.shape)
    if k != k2 or k % 32 or k > 128:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"{api}: stationary and moving need the same partitions, a multiple of 32 up to 128 (got {k} and {k2})",
            line,
        )
    if cols_m > 128 or cols_n > 512:
        raise ctx.error(
            "err_size_of_dimension_exceed_arch_limit",
            f"{api}: stationary free size {cols_m} (at most 128), moving free size {cols_n} (at most 512)",
            line,
        )
    values = None
    if ctx.numerics:
        groups = k // _GROUP_PARTITIONS
        a = _dequantize(unpack_x4(s._read(False).reshape(k, cols_m)), _scale_exponents(ctx, ss, groups, api, "stationary_scale", line))
        b = _dequantize(unpack_x4(m._read(False).reshape(k, cols_n)), _scale_exponents(ctx, ms, groups, api, "moving_scale", line))
        values = a.T @ b
    out = _result_tile(ctx, (cols_m, cols_n), _dt.float32, _PSUM, line, "matmul", values, None)
    contraction = k * _GROUP_ELEMENTS
    out._producer = ctx.emit(
        _Engine.TENSOR,
        "nc_matmul_mx",
        k,
        cols_n,
        _dname(s._tensor.dtype),
        "float32",
        (s._region(), m._region(), ss._region(), ms._region()),
        (out._full_region(),),
        _Memory.SBUF,
        _Memory.PSUM,
        line,
        bytes=k * cols_n * m._tensor.dtype.itemsize,
        flops=2 * contraction * cols_m * cols_n,
        matmul_kmn=(contraction, cols_m, cols_n),
        extra={"api": api, "strict": True, "mx": True},
    )
    target = dst._full_view() if isinstance(dst, _Tensor) else dst
    _assign(target, out, accumulate=bool(kwargs.get("accumulate")))
    return dst


def _dequantize(elements: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """[K, 4F] element values (row k, column 4j+i) with [K/8, F] exponents -> logical [4K, F]."""
    k, width = elements.shape
    cols = width // _GROUP_ELEMENTS
    grouped = elements.reshape(k, cols, _GROUP_ELEMENTS)
    scale = np.ldexp(np.float32(1), np.repeat(exponents, _GROUP_PARTITIONS, axis=0))[:, :, None]
    # logical contraction row 4k + i is element i of partition k
    return (grouped * scale).transpose(0, 2, 1).reshape(k * _GROUP_ELEMENTS, cols).astype(np.float32)


# --- activate2 ---------------------------------------------------------------------------------


def activate2(
    dst: Any,
    op: Any,
    data: Any,
    op0: Any = None,
    imm0: Any = None,
    op1: Any = None,
    imm1: Any = None,
    reverse0: bool = False,
    reverse1: bool = False,
    reduce_op: Any = None,
    reduce_res: Any = None,
    dtype: Any = None,
    **_: Any,
) -> Any:
    """``dst = op((data op0 imm0) op1 imm1)`` on the Scalar Engine (NeuronCore-v4+), with the
    immediates scalars or [P, 1] tiles; with `reduce_res`, the free-axis `reduce_op` reduction of
    the result is written too. (Release notes of NKI 0.4.0, NKI API reference ``activate2``.)"""
    ctx = _current()
    line = ctx.line()
    api = "nisa.activate2"
    _require_generation(api, _NEURONCORE_V4, line)
    spec = _ops.resolve(op)
    stages = [(_ops.resolve(o), imm, rev) for o, imm, rev in ((op0, imm0, reverse0), (op1, imm1, reverse1)) if o is not None]
    operands: list[Any] = [data]
    for _stage_op, imm, _rev in stages:
        operands.append(imm if isinstance(imm, _TileOps) else _scalar_of(0.0 if imm is None else imm))

    def compute(x: np.ndarray, *imms: Any) -> np.ndarray:
        y = x
        for (stage, _, reverse), value in zip(stages, imms):
            y = stage.fn(value, y) if reverse else stage.fn(y, value)
        return spec.fn(np.asarray(y, dtype=np.float32))

    out = _scalar_activation(
        ctx,
        line,
        api,
        operands,
        compute,
        dtype=dtype,
        ops_per_element=len(stages) + (0 if spec.trivial else 1),
        extra={"op": spec.name, "num_ops": len(stages), "api": api, **_stage_params(stages)},
        reduce_op=reduce_op,
        reduce_res=reduce_res,
    )
    target = dst._full_view() if isinstance(dst, _Tensor) else dst
    _assign(target, out)
    return dst


def _stage_params(stages: list[tuple[_ops.OpSpec, Any, bool]]) -> dict[str, Any]:
    """What a replay needs to recompute activate2: each stage's op, immediate and reversal (a
    tile immediate is the record's read region, named "tile" here)."""
    params: dict[str, Any] = {}
    for i, (stage, imm, reverse) in enumerate(stages):
        params[f"op{i}"] = stage.name
        params[f"imm{i}"] = "tile" if isinstance(imm, _TileOps) else float(_scalar_of(0.0 if imm is None else imm))
        params[f"reverse{i}"] = bool(reverse)
    return params


# --- abs_max / abs_min ---------------------------------------------------------------------------

_ops._add(_ops.OpSpec("abs_max", 2, lambda a, b: np.maximum(np.abs(a), np.abs(b))))
_ops._add(_ops.OpSpec("abs_min", 2, lambda a, b: np.minimum(np.abs(a), np.abs(b))))


def _make_abs(name: str) -> Any:
    spec = _ops.spec(name)

    def fn(x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> _Tensor:
        from accelopt.nki.language import _binary  # language registers these names

        ctx = _current()
        line = ctx.line()
        _require_generation(f"nl.{name}", _NEURONCORE_V4, line)
        return _binary(ctx, line, spec, x, y, dtype, mask)

    fn.__name__ = fn.__qualname__ = name
    kind = "maximum" if name == "abs_max" else "minimum"
    fn.__doc__ = f"Elementwise {kind} of the absolute values of two tiles (NeuronCore-v4+, Vector Engine)."
    _ops.register(fn, name)
    return fn


abs_max = _make_abs("abs_max")
abs_min = _make_abs("abs_min")
