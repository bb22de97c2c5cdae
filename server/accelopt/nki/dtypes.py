"""NKI data types as numpy dtypes (bf16 and fp8 come from ``ml_dtypes``, which rounds correctly)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
# Trainium's fp8 formats: e4m3 (IEEE-like, with inf) and e5m2.
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
# tf32 is an fp32 container for the Tensor Engine; numerically we keep fp32.
tfloat32 = float32
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)
# OCP microscaling (MX) types of NeuronCore-v4 (accelopt.nki.mx): the E8M0 block scale, FP4, and
# the 4-packed element types. A 4-packed type holds four FP8 (32 bits) or four FP4 (16 bits)
# values of consecutive free-axis elements; we keep the packed bits in a one-field record so
# that each packed type is a dtype of its own (numpy arithmetic never touches them).
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)
float8_e5m2_x4 = np.dtype([("float8_e5m2_x4", "<u4")])
float8_e4m3fn_x4 = np.dtype([("float8_e4m3fn_x4", "<u4")])
float4_e2m1fn_x4 = np.dtype([("float4_e2m1fn_x4", "<u2")])
PACKED_X4 = {float8_e5m2_x4: float8_e5m2, float8_e4m3fn_x4: float8_e4m3fn, float4_e2m1fn_x4: float4_e2m1fn}


def _packed_name(dtype: np.dtype) -> str:
    """A packed MX dtype is a one-field structured dtype named after the format."""
    assert dtype.names is not None
    return str(dtype.names[0])


_BY_NAME = {_packed_name(d): d for d in PACKED_X4} | {
    "float8_e8m0fnu": float8_e8m0fnu,
    "float4_e2m1fn": float4_e2m1fn,
}

_FLOAT_KINDS = ("f", "V")  # ml_dtypes types report kind "V"


def as_dtype(value: Any) -> np.dtype:
    """Any dtype spelling a kernel may use (np.float32, nl.bfloat16, 'float32', np.dtype) → np.dtype."""
    if isinstance(value, np.dtype):
        return value
    if isinstance(value, str) and value in ("bfloat16", "bf16"):
        return bfloat16
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    return np.dtype(value)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind in _FLOAT_KINDS and dtype.names is None  # packed MX types are bit records


def itemsize(dtype: np.dtype) -> int:
    return dtype.itemsize


def promote(dtypes: list[np.dtype]) -> np.dtype:
    """Result type of an elementwise op over tiles: fp32 wins; equal types stay; else fp32."""
    if not dtypes:
        return float32
    first = dtypes[0]
    if all(d == first for d in dtypes):
        return first
    if any(d == float32 for d in dtypes):
        return float32
    if all(is_float(d) for d in dtypes):
        return float32
    try:
        return np.result_type(*dtypes)
    except TypeError:
        return float32


def nan_fill(dtype: np.dtype) -> Any:
    """What uninitialised memory reads as: NaN for floats (so an unwritten output is visible)."""
    return np.nan if is_float(dtype) else 0


_NAMES: dict[np.dtype, str] = {d: _packed_name(d) for d in PACKED_X4}


def dname(dtype: np.dtype) -> str:
    """The dtype's name (cached: numpy computes `dtype.name` in Python, slowly)."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.name
    return name


class fp32:
    """``nl.fp32``: FP32 constants. ``min`` is the bit pattern 0xff7fffff, the most negative
    finite fp32 value (nki.language.fp32, NKI API reference)."""

    min = float(np.frombuffer(np.uint32(0xFF7FFFFF).tobytes(), dtype=np.float32)[0])


class finfo:
    """``nl.finfo(dtype)``: machine limits of a floating-point NKI dtype (numpy's ``finfo``
    fields; bf16 and fp8 from ``ml_dtypes``)."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "smallest_normal", "tiny")

    def __init__(self, dtype: Any) -> None:
        resolved = as_dtype(dtype)
        info = ml_dtypes.finfo(resolved)
        self.dtype = resolved
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = float(info.tiny)
        self.smallest_normal = float(info.smallest_normal)

    def __repr__(self) -> str:
        return f"finfo(dtype={dname(self.dtype)}, min={self.min}, max={self.max}, eps={self.eps})"


def sizeinbytes(dtype: Any) -> int:
    """``nki.language.constants.sizeinbytes(dtype)``: bytes per element."""
    return as_dtype(dtype).itemsize
