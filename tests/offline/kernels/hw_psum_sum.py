import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


# accelopt: inputs lhsT=float32[512,256] rhs=float32[512,512]
@nki.jit
def psum_sum_kernel(lhsT, rhs):
    """out = lhsT.T @ rhs; each partial product is added to an SBUF sum on the Vector Engine."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype, buffer=nl.sbuf)
    w = nl.ndarray((K // 128, nl.par_dim(128), N), dtype=rhs.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(K // 128):
        x[k, :, :] = nl.load(lhsT[k * 128 : (k + 1) * 128, 0:M])
        w[k, :, :] = nl.load(rhs[k * 128 : (k + 1) * 128, 0:N])
    for m in nl.affine_range(M // 128):
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.sequential_range(K // 128):
            p = nisa.nc_matmul(x[k, :, m * 128 : (m + 1) * 128], w[k, :, :])
            acc[:, :] = nl.add(acc, p)
        nl.store(out[m * 128 : (m + 1) * 128, 0:N], value=acc)
    return out
