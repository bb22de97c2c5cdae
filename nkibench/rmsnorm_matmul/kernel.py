"""NKIBench rmsnorm_matmul baseline (hand-written).

Per block of 128 rows: normalise the rows in SBUF, then for every 512-wide output tile
accumulate `nl.matmul` over K. `nl.matmul` takes the normalised rows as they are ([M, K]) and
transposes each 128 x 128 piece on the Tensor Engine itself, so those transposes are redone
for every output tile, and the weight tiles are reloaded for every row block."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

EPS = 1e-6
TILE_M = 128
TILE_K = 128
TILE_N = 512


# accelopt: reference reference.py
@nki.jit
def rmsnorm_matmul_kernel(x, w):
    m, k = x.shape
    n = w.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)

    for mi in nl.affine_range(m // TILE_M):
        rows = slice(mi * TILE_M, (mi + 1) * TILE_M)
        x_tile = nl.load(x[rows, 0:k])
        sum_sq = nl.sum(nl.square(x_tile), axis=1, keepdims=True)
        inv_rms = nl.rsqrt(nl.add(nl.multiply(sum_sq, 1.0 / k), EPS))
        x_norm = nl.multiply(x_tile, inv_rms)

        for ni in nl.affine_range(n // TILE_N):
            cols = slice(ni * TILE_N, (ni + 1) * TILE_N)
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // TILE_K):
                w_tile = nl.load(w[ki * TILE_K : (ki + 1) * TILE_K, cols])
                acc += nl.matmul(x_norm[:, ki * TILE_K : (ki + 1) * TILE_K], w_tile, transpose_x=False)
            nl.store(out[rows, cols], value=nl.copy(acc, dtype=nl.float32))
    return out
