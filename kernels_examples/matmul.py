"""Tiled matrix multiply C = A @ B with Tensor Engine transposes and PSUM accumulation.

The Tensor Engine computes `stationary.T @ moving`, contracting over the partition axis, so the
left operand must arrive with K on partitions. A is stored row-major ([M, K]), so every
128 x 128 block of A is transposed on the Tensor Engine (into PSUM) and copied back to SBUF
before it can be used. Partial products over K accumulate in one PSUM tile per output block.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE_M = 128  # output rows per tile (stationary free size)
TILE_K = 128  # contraction per matmul (partition axis)
TILE_N = 512  # output columns per tile (one 2 KiB PSUM bank of fp32)


# accelopt: reference matmul_ref.py
@nki.jit
def matmul_kernel(a, b):
    m_size, k_size = a.shape
    _, n_size = b.shape
    out = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_size // TILE_M):
        for n in nl.affine_range(n_size // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TILE_K):
                a_tile = nl.load(a[m * TILE_M : (m + 1) * TILE_M, k * TILE_K : (k + 1) * TILE_K])
                a_t_psum = nisa.nc_transpose(a_tile)  # [K, M] in PSUM
                a_t = nl.copy(a_t_psum, dtype=nl.float32)  # back to SBUF for the Tensor Engine
                b_tile = nl.load(b[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N])
                acc += nisa.nc_matmul(a_t, b_tile)
            result = nl.copy(acc, dtype=nl.float32)
            nl.store(out[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], value=result)

    return out
