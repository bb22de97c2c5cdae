"""Moving arrays between the trusted parent and the sandboxed worker: plain `.npy`/`.npz` data,
never pickles.

numpy's file format has no spelling for the `ml_dtypes` types (bfloat16, float8), so such arrays
travel as float32 (which holds every value exactly) beside the name of their real dtype.

A trace-only run reads no input values (the emulator traces shapes and regions only), so its
inputs travel as their shape and dtype alone (`ShapeOnly`): a full-size timing run then neither
writes nor reads the gigabytes of numbers its check run already judged at the small size.
"""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np

_STANDARD_KINDS = frozenset("biuf")


class ShapeOnly(np.ndarray):
    """An array that stands for one whose values nobody reads: the right shape and dtype, a
    single zero broadcast over it (no memory), read-only. Made by `shape_only`."""


def shape_only(shape: tuple[int, ...] | list[int], dtype: np.dtype | str) -> ShapeOnly:
    dtype = resolve_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    zero = np.zeros((), dtype=dtype).view(ShapeOnly)
    placeholder = np.broadcast_to(zero, tuple(shape), subok=True)
    assert isinstance(placeholder, ShapeOnly)
    return placeholder


def dtype_name(array: np.ndarray) -> str:
    return str(array.dtype)


def is_standard(dtype: np.dtype) -> bool:
    """Whether `.npy` stores and loads the dtype as it is. Not the `ml_dtypes` types, even the
    one whose kind says float (float8_e5m2, kind 'f', descriptor '<f1' that np.load refuses)."""
    return dtype.kind in _STANDARD_KINDS and not hasattr(ml_dtypes, dtype.name)


def to_transport(array: np.ndarray) -> np.ndarray:
    """The array as a plain numpy array that `.npy` can store without pickling. A 0-d array (a
    scalar input such as an epsilon) stays 0-d: `np.ascontiguousarray` would make it shape (1,)."""
    if is_standard(array.dtype):
        return np.asarray(array, order="C")
    if hasattr(ml_dtypes, array.dtype.name):
        return np.asarray(array.astype(np.float32), order="C")
    raise TypeError(f"arrays of dtype {array.dtype} cannot be exchanged with the sandbox")


def from_transport(array: np.ndarray, name: str) -> np.ndarray:
    """Undo `to_transport`: restore the recorded dtype."""
    if str(array.dtype) == name:
        return array
    return array.astype(resolve_dtype(name))


def resolve_dtype(name: str) -> np.dtype:
    """A dtype from its name, including the `ml_dtypes` names (bfloat16, float8_e4m3fn, ...)."""
    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    dtype = np.dtype(name)
    if dtype.kind not in _STANDARD_KINDS:
        raise ValueError(f"unsupported dtype {name!r}")
    return dtype


def fingerprint(array: np.ndarray) -> str:
    """Content hash (dtype, shape and bytes) used to check that a kernel left its inputs alone."""
    digest = hashlib.sha256()
    digest.update(f"{array.dtype}|{array.shape}|".encode())
    if isinstance(array, ShapeOnly):  # no values to hash (and none to edit: it is read-only)
        digest.update(b"shape only")
        return digest.hexdigest()
    digest.update(np.asarray(array, order="C").tobytes())
    return digest.hexdigest()
