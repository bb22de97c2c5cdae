"""NKIBench bmm baseline (hand-written): per batch, per 128-row block of the output, one
64-deep matmul per 512-wide column tile. The B tiles are reloaded for every row block."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE_M = 128
TILE_N = 512


# accelopt: reference reference.py
@nki.jit
def bmm_kernel(a_t, b):
    batch, k, m = a_t.shape
    n = b.shape[2]
    out = nl.ndarray((batch, m, n), dtype=nl.float32, buffer=nl.shared_hbm)

    for bi in nl.affine_range(batch):
        for mi in nl.affine_range(m // TILE_M):
            lhs = nl.load(a_t[bi, 0:k, mi * TILE_M : (mi + 1) * TILE_M])  # [K, 128]
            for ni in nl.affine_range(n // TILE_N):
                rhs = nl.load(b[bi, 0:k, ni * TILE_N : (ni + 1) * TILE_N])  # [K, 512]
                product = nisa.nc_matmul(lhs, rhs)  # [128, 512] in PSUM
                result = nl.copy(product, dtype=nl.float32)
                nl.store(
                    out[bi, mi * TILE_M : (mi + 1) * TILE_M, ni * TILE_N : (ni + 1) * TILE_N], value=result
                )
    return out
