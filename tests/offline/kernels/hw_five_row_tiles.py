import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def five_row_tiles_kernel(lhsT, rhs):
    """out = lhsT.T @ rhs for lhsT [128, 640]: five row tiles accumulate in five PSUM banks."""
    _, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // 512):
        acc = nl.zeros((5, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        r = nl.load(rhs[0:128, n * 512 : (n + 1) * 512])
        for j in nl.affine_range(5):
            a = nl.load(lhsT[0:128, j * 128 : (j + 1) * 128])
            acc[j] += nisa.nc_matmul(a, r)
        for j in nl.affine_range(5):
            nl.store(out[j * 128 : (j + 1) * 128, n * 512 : (n + 1) * 512], value=nl.copy(acc[j]))
    return out
