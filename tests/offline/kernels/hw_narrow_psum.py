import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


# accelopt: inputs lhsT=float32[256,256] rhs=float32[256,1024]
@nki.jit
def narrow_psum_kernel(lhsT, rhs):
    """out = lhsT.T @ rhs with 128-column PSUM accumulators (a quarter of a bank)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 128):
            acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                b = nl.load(rhs[k * 128 : (k + 1) * 128, n * 128 : (n + 1) * 128])
                acc += nisa.nc_matmul(a, b)
            y = nl.copy(acc)
            nl.store(out[m * 128 : (m + 1) * 128, n * 128 : (n + 1) * 128], value=y)
    return out
