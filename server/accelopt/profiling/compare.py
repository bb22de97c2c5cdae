"""Judging a kernel's outputs against the reference's: the trusted side of correctness.

Relative L2 error ``||k - r|| / max(||r||, tiny)`` per output, computed in float64 over the
whole array. A kernel output with any NaN or infinity fails outright (the emulator fills unwritten
memory with NaN, so this is also the "output left unwritten" check), as do a different number
of outputs, a different shape, or a floating-point dtype less precise than the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

_TINY = np.finfo(np.float64).tiny


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_error: float | None
    message: str = ""
    output: int | None = None


# Elements per step of the chunked comparison: full-size outputs (1 GiB of fp32) are compared
# without a float64 copy of the whole array (which would be 2 GiB per side).
_CHUNK = 1 << 22


@dataclass(frozen=True)
class _Sums:
    """One pass over an output pair: what the comparison needs, accumulated chunk by chunk."""

    nonfinite: int
    nan: int
    reference_nonfinite: int
    diff_squares: float
    reference_squares: float

    @property
    def error(self) -> float:
        return float(np.sqrt(self.diff_squares) / max(float(np.sqrt(self.reference_squares)), _TINY))


def _sums(kernel: np.ndarray, reference: np.ndarray) -> _Sums:
    k_flat = np.asarray(kernel).reshape(-1)
    r_flat = np.asarray(reference).reshape(-1)
    nonfinite = nan = reference_nonfinite = 0
    diff_squares = reference_squares = 0.0
    for start in range(0, max(k_flat.size, 1), _CHUNK):
        k = np.asarray(k_flat[start : start + _CHUNK], dtype=np.float64)
        r = np.asarray(r_flat[start : start + _CHUNK], dtype=np.float64)
        finite = np.isfinite(k)
        if not finite.all():
            nonfinite += int(np.count_nonzero(~finite))
            nan += int(np.count_nonzero(np.isnan(k)))
        reference_nonfinite += int(np.count_nonzero(~np.isfinite(r)))
        diff = k - r
        diff_squares += float(np.dot(diff, diff))
        reference_squares += float(np.dot(r, r))
    return _Sums(nonfinite, nan, reference_nonfinite, diff_squares, reference_squares)


def relative_l2(kernel: np.ndarray, reference: np.ndarray) -> float:
    return _sums(kernel, reference).error


def _precision(dtype: np.dtype) -> float | None:
    """Machine epsilon of a floating dtype (including ml_dtypes' bfloat16/float8), else None."""
    try:
        if np.issubdtype(dtype, np.floating):
            return float(np.finfo(dtype).eps)
        return float(ml_dtypes.finfo(dtype).eps)
    except (TypeError, ValueError):
        return None


def compare_outputs(
    kernel_outputs: list[np.ndarray],
    reference_outputs: list[np.ndarray],
    tolerance: float,
    *,
    seed: int | None = None,
) -> Comparison:
    """Compare every output in full; the first failure explains itself."""
    on_seed = f" (seed {seed})" if seed is not None else ""
    if len(kernel_outputs) != len(reference_outputs):
        return Comparison(
            False,
            None,
            f"the kernel returned {len(kernel_outputs)} output(s), the reference has {len(reference_outputs)}",
        )
    worst = 0.0
    for i, (k, r) in enumerate(zip(kernel_outputs, reference_outputs)):
        if k.shape != r.shape:
            return Comparison(False, None, f"output {i} has shape {k.shape}, expected {r.shape}", i)
        k_eps, r_eps = _precision(k.dtype), _precision(r.dtype)
        if k_eps is not None and r_eps is not None and k_eps > r_eps and r.dtype.itemsize <= 4:
            return Comparison(
                False, None, f"output {i} has dtype {k.dtype}, less precise than the reference's {r.dtype}", i
            )
        sums = _sums(k, r)
        if sums.nonfinite:
            bad = sums.nonfinite
            what = "NaN (unwritten or invalid)" if sums.nan == bad else "NaN or infinite"
            return Comparison(False, None, f"output {i} has {bad} of {k.size} values {what}{on_seed}", i)
        error = sums.error
        if sums.reference_nonfinite or not np.isfinite(error):
            return Comparison(False, None, f"output {i}: the reference itself is not finite{on_seed}", i)
        worst = max(worst, error)
        if error > tolerance:
            return Comparison(
                False,
                error,
                f"output {i} relative L2 error {error:.3g} exceeds tolerance {tolerance:.3g}{on_seed}",
                i,
            )
    return Comparison(True, worst)
