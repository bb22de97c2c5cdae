"""Tiled matrix multiply C = A @ B in the nki.* language (NKI 0.7).

As in ../matmul.py, every 128 x 128 block of A is transposed on the Tensor Engine (into PSUM)
and copied back to SBUF so that K lies on partitions. `nisa.nc_matmul(dst=acc, ...)` writes the
PSUM accumulator: the first matmul of each output tile overwrites it, the next ones add to it
(the accumulation mode NKI 0.7 infers when `accumulate` is not given).
"""

import nki.isa as nisa
import nki.language as nl

import nki

TILE_M = 128  # output rows per tile (stationary free size)
TILE_K = 128  # contraction per matmul (partition axis)
TILE_N = 512  # output columns per tile (one 2 KiB PSUM bank of fp32)


# accelopt: reference ../matmul_ref.py
@nki.jit
def matmul_kernel(a, b):
    m_size, k_size = a.shape
    _, n_size = b.shape
    out = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)

    for m in range(m_size // TILE_M):
        rows = slice(m * TILE_M, (m + 1) * TILE_M)
        for n in range(n_size // TILE_N):
            cols = slice(n * TILE_N, (n + 1) * TILE_N)
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in range(k_size // TILE_K):
                ks = slice(k * TILE_K, (k + 1) * TILE_K)
                a_tile = nl.ndarray((TILE_M, TILE_K), dtype=a.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_tile, src=a[rows, ks])
                a_t_psum = nl.ndarray((TILE_K, TILE_M), dtype=a.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=a_t_psum, data=a_tile)
                a_t = nl.ndarray((TILE_K, TILE_M), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=a_t, src=a_t_psum)
                b_tile = nl.ndarray((TILE_K, TILE_N), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b_tile, src=b[ks, cols])
                nisa.nc_matmul(dst=acc, stationary=a_t, moving=b_tile)
            result = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result, src=acc)
            nisa.dma_copy(dst=out[rows, cols], src=result)

    return out
