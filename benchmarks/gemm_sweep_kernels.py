"""bf16 GEMM kernels for trn2 in the nki.* language (NKI 0.7), the way a user writes a GEMM sweep.

out[M, N] = lhs @ rhs with fp32 accumulation in PSUM, in two layouts:

- `_t` kernels take the left operand pre-transposed, `lhs_t[K, M]`, so K already lies on the
  partitions the Tensor Engine contracts over;
- `_n` kernels take it as `lhs[M, K]` and transpose each 128 x 128 tile on the Tensor Engine
  (into PSUM, then copied to SBUF) before using it as the stationary operand.

and three steps of the usual tuning progression (the NKI matrix-multiplication tutorials):

- `tiled`: one [128, 512] output tile at a time, both operand tiles loaded for every k;
- `hoisted`: the lhs column strip of an M tile is loaded once per M tile (given [M, K]: its row
  block in one DMA, then transposed tile by tile), the rhs strip once per output tile;
- `blocked`: 4 x 2 output tiles (all 8 PSUM banks) per block; the lhs operands of a row block of
  4 M tiles are loaded (and, given [M, K], transposed) once per row block, and each k step loads
  one [128, 1024] rhs block (2 KiB per partition) for 8 matmuls. Given [M, K], blocks are 4 x 1
  tiles, so that the transposes have PSUM banks of their own.

Written for this project (benchmarks/gemm_sweep.py runs them); none is a copy of a published
kernel. Every shape must be a multiple of the block sizes used.
"""

import nki.isa as nisa
import nki.language as nl

import nki

P = 128  # partitions; stationary free size and contraction per matmul
TN = 512  # moving free size: one 2 KiB PSUM bank of fp32


def _load_lhs(dst, lhs, k, m, transposed):
    """Fill `dst` [K-tile, M-tile] with the stationary operand. Pre-transposed: one DMA. Given
    [M, K]: load [M-tile, K-tile], transpose it on the Tensor Engine into PSUM, copy to `dst`."""
    if transposed:
        nisa.dma_copy(dst=dst, src=lhs[k * P : (k + 1) * P, m * P : (m + 1) * P])
        return
    rows = nl.ndarray((P, P), dtype=lhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=lhs[m * P : (m + 1) * P, k * P : (k + 1) * P])
    flipped = nl.ndarray((P, P), dtype=lhs.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=rows)
    nisa.tensor_copy(dst=dst, src=flipped)


def _transpose_rows(dst, rows, k):
    """dst [K-tile, M-tile] = the k-th [M-tile, K-tile] slice of `rows`, transposed on the Tensor
    Engine (into PSUM) and copied to SBUF."""
    flipped = nl.ndarray((P, P), dtype=rows.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=rows[:, k * P : (k + 1) * P])
    nisa.tensor_copy(dst=dst, src=flipped)


def _load_rows(lhs, m):
    """The [M-tile, K] row block of an lhs given [M, K], in one DMA."""
    rows = nl.ndarray((P, lhs.shape[1]), dtype=lhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=lhs[m * P : (m + 1) * P, :])
    return rows


def _store(out, acc, m, n):
    res = nl.ndarray((P, TN), dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out[m * P : (m + 1) * P, n * TN : (n + 1) * TN], src=res)


def _tiled(lhs, rhs, transposed):
    K, N = rhs.shape
    M = lhs.shape[1] if transposed else lhs.shape[0]
    out = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // P):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((P, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // P):
                a = nl.ndarray((P, P), dtype=lhs.dtype, buffer=nl.sbuf)
                _load_lhs(a, lhs, k, m, transposed)
                b = nl.ndarray((P, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * P : (k + 1) * P, n * TN : (n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            _store(out, acc, m, n)
    return out


def _hoisted(lhs, rhs, transposed):
    K, N = rhs.shape
    M = lhs.shape[1] if transposed else lhs.shape[0]
    KT = K // P
    out = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // P):
        strip = nl.ndarray((P, KT, P), dtype=lhs.dtype, buffer=nl.sbuf)
        rows = None if transposed else _load_rows(lhs, m)
        for k in nl.affine_range(KT):
            if transposed:
                _load_lhs(strip[:, k, :], lhs, k, m, True)
            else:
                _transpose_rows(strip[:, k, :], rows, k)
        for n in nl.affine_range(N // TN):
            b = nl.ndarray((P, KT, TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                nisa.dma_copy(dst=b[:, k, :], src=rhs[k * P : (k + 1) * P, n * TN : (n + 1) * TN])
            acc = nl.ndarray((P, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                nisa.nc_matmul(dst=acc, stationary=strip[:, k, :], moving=b[:, k, :])
            _store(out, acc, m, n)
    return out


BM = 4  # M tiles per block
# N tiles per block: 4 x 2 accumulators fill the 8 PSUM banks; given [M, K] the transposes need
# PSUM too, so that layout keeps 4 x 1 and leaves 4 banks to them
BN_T, BN_N = 2, 1


def _psum_accumulator(zero):
    """A [128, 512] fp32 PSUM accumulator: left uninitialised (the first matmul overwrites it),
    or zeroed the two ways users write it, `nl.zeros(..., buffer=nl.psum)` or `nisa.memset`."""
    if zero == "zeros":
        return nl.zeros((P, TN), dtype=nl.float32, buffer=nl.psum)
    acc = nl.ndarray((P, TN), dtype=nl.float32, buffer=nl.psum)
    if zero == "memset":
        nisa.memset(dst=acc, value=0.0)
    return acc


def _blocked(lhs, rhs, transposed, zero=None, accumulate=None):
    K, N = rhs.shape
    M = lhs.shape[1] if transposed else lhs.shape[0]
    BN = min(BN_T if transposed else BN_N, N // TN)
    KT = K // P
    out = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (P * BM)):
        # the stationary operands of this row block, [K-tile, k, BM M-tiles], loaded once
        strip = nl.ndarray((P, KT, BM * P), dtype=lhs.dtype, buffer=nl.sbuf)
        if transposed:
            for k in nl.affine_range(KT):
                cols = slice(mb * BM * P, (mb + 1) * BM * P)
                nisa.dma_copy(dst=strip[:, k, :], src=lhs[k * P : (k + 1) * P, cols])
        else:
            for i in range(BM):
                rows = _load_rows(lhs, mb * BM + i)
                for k in nl.affine_range(KT):
                    _transpose_rows(strip[:, k, i * P : (i + 1) * P], rows, k)
        for nb in nl.affine_range(N // (TN * BN)):
            accs = []
            for _ in range(BM * BN):
                accs.append(_psum_accumulator(zero))
            for k in nl.affine_range(KT):
                b = nl.ndarray((P, BN * TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * P : (k + 1) * P, nb * BN * TN : (nb + 1) * BN * TN])
                for i in range(BM):
                    for j in range(BN):
                        nisa.nc_matmul(
                            dst=accs[i * BN + j],
                            stationary=strip[:, k, i * P : (i + 1) * P],
                            moving=b[:, j * TN : (j + 1) * TN],
                            accumulate=accumulate,
                        )
            for i in range(BM):
                for j in range(BN):
                    _store(out, accs[i * BN + j], mb * BM + i, nb * BN + j)
    return out


@nki.jit
def gemm_tiled_t(lhs_t, rhs):
    return _tiled(lhs_t, rhs, True)


@nki.jit
def gemm_tiled_n(lhs, rhs):
    return _tiled(lhs, rhs, False)


@nki.jit
def gemm_hoisted_t(lhs_t, rhs):
    return _hoisted(lhs_t, rhs, True)


@nki.jit
def gemm_hoisted_n(lhs, rhs):
    return _hoisted(lhs, rhs, False)


@nki.jit
def gemm_blocked_t(lhs_t, rhs):
    return _blocked(lhs_t, rhs, True)


@nki.jit
def gemm_blocked_n(lhs, rhs):
    return _blocked(lhs, rhs, False)


# The same blocked kernel with its PSUM accumulators zeroed first (the pattern of many published
# kernels: zero, then matmuls with accumulate=True), or zeroed and left to the default mode.
@nki.jit
def gemm_blocked_t_zeros(lhs_t, rhs):
    return _blocked(lhs_t, rhs, True, "zeros", True)


@nki.jit
def gemm_blocked_t_memset(lhs_t, rhs):
    return _blocked(lhs_t, rhs, True, "memset", True)


@nki.jit
def gemm_blocked_t_zeros_default(lhs_t, rhs):
    return _blocked(lhs_t, rhs, True, "zeros", None)


@nki.jit
def gemm_blocked_t_memset_default(lhs_t, rhs):
    return _blocked(lhs_t, rhs, True, "memset", None)
