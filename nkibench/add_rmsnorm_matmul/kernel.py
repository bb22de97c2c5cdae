"""NKIBench add_rmsnorm_matmul baseline (hand-written).

gamma is broadcast across the 128 partitions once. Per block of 128 rows: add the residual,
normalise, scale by gamma, transpose the block into K-major 128 x 128 pieces (Tensor Engine,
then back to SBUF), and accumulate the matmul over K for each 512-wide output tile. Weight
tiles are reloaded for every row block."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

EPS = 1e-6
TILE_M = 128
TILE_K = 128
TILE_N = 512


# accelopt: reference reference.py
@nki.jit
def add_rmsnorm_matmul_kernel(x, residual, gamma, w):
    m, k = x.shape
    n = w.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)

    gamma_row = nl.load(gamma[0:1, 0:k])
    gamma_all = gamma_row.broadcast_to((TILE_M, k))

    for mi in nl.affine_range(m // TILE_M):
        rows = slice(mi * TILE_M, (mi + 1) * TILE_M)
        h = nl.add(nl.load(x[rows, 0:k]), nl.load(residual[rows, 0:k]))
        sum_sq = nl.sum(nl.square(h), axis=1, keepdims=True)
        inv_rms = nl.rsqrt(nl.add(nl.multiply(sum_sq, 1.0 / k), EPS))
        h_norm = nl.multiply(nl.multiply(h, inv_rms), gamma_all)

        h_t = nl.ndarray((k // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=nl.float32, buffer=nl.sbuf)
        for ki in nl.affine_range(k // TILE_K):
            h_t[ki] = nl.copy(nisa.nc_transpose(h_norm[:, ki * TILE_K : (ki + 1) * TILE_K]))

        for ni in nl.affine_range(n // TILE_N):
            cols = slice(ni * TILE_N, (ni + 1) * TILE_N)
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // TILE_K):
                w_tile = nl.load(w[ki * TILE_K : (ki + 1) * TILE_K, cols])
                acc += nisa.nc_matmul(h_t[ki], w_tile)
            nl.store(out[rows, cols], value=nl.copy(acc, dtype=nl.float32))
    return out
