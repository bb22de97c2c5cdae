import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE_M = 128
TILE_N = 512


@nki.jit
def bmm_kernel(a_t, b):
    """out[i] = a_t[i].T @ b[i]; hand-written: the a_t tile stays put across the column tiles."""
    batch, k, m = a_t.shape
    n = b.shape[2]
    out = nl.ndarray((batch, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for bi in nl.affine_range(batch):
        for mi in nl.affine_range(m // TILE_M):
            lhs = nl.load(a_t[bi, 0:k, mi * TILE_M : (mi + 1) * TILE_M])
            for ni in nl.affine_range(n // TILE_N):
                cols = slice(ni * TILE_N, (ni + 1) * TILE_N)
                rhs = nl.load(b[bi, 0:k, cols])
                product = nisa.nc_matmul(lhs, rhs)
                result = nl.copy(product, dtype=nl.float32)
                nl.store(out[bi, mi * TILE_M : (mi + 1) * TILE_M, cols], value=result)
    return out
