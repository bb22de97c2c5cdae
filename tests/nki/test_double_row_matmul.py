"""`nisa.nc_matmul(..., perf_mode=double_row)`: FP8 operands laid out [K, 2, F] contract over both
rows of every partition (2K deep) on NeuronCore-v3 and newer; refused on trn1 and for other
dtypes. Also the named fields of a rank-3 `nl.mgrid` (`.p`, `.x`, `.y`). Our own kernels,
checked against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError

PATH = "/virtual/double_row.py"

KERNELS = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def paired_rows(a, b):
    """c = sum over (k, r) of a[k, r, :]^T b[k, r, :], the stationary staged through a grid."""
    K, R, M = a.shape
    _, _, N = b.shape
    c = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((K, R, M), dtype=a.dtype, buffer=nl.sbuf)
    g = nl.mgrid[0:K, 0:R, 0:M]
    s[g.p, g.x, g.y] = nl.load(a)
    mv = nl.ndarray((K, R, N), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=b)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, s, mv, perf_mode=nisa.matmul_perf_mode.double_row)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=c, src=res)
    return c
'''


def fp8(shape: tuple[int, ...], seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).uniform(-2, 2, shape)
    return values.astype(ml_dtypes.float8_e4m3)


def run(inputs: list[np.ndarray], target: str) -> runtime.KernelRun:
    fn = runtime.load_kernel(KERNELS, "paired_rows", PATH)
    return runtime.run_kernel(fn, inputs, source_path=PATH, target=target)


def test_double_row_contracts_both_rows_of_every_partition():
    a, b = fp8((128, 2, 64), 1), fp8((128, 2, 256), 2)
    run_ = run([a, b], "trn2")
    expected = np.einsum("krm,krn->mn", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(run_.outputs[0], expected, rtol=1e-5, atol=1e-4)
    matmul = next(r for r in run_.trace.records if r.opcode == "nc_matmul")
    assert matmul.matmul_kmn == (256, 64, 256)  # the logical contraction: 2 rows x 128 partitions


def test_double_row_is_refused_on_trn1_and_for_non_fp8_operands():
    a, b = fp8((128, 2, 64), 1), fp8((128, 2, 256), 2)
    with pytest.raises(NkiError, match="NeuronCore-v3 or newer"):
        run([a, b], "trn1")
    with pytest.raises(NkiError, match="takes FP8 operands"):
        run([a.astype(np.float32), b.astype(np.float32)], "trn2")
