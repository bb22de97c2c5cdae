"""NKI 0.7 (nki.*), destination passing: out = lhsT.T @ rhs with 128-column PSUM accumulators."""

import nki.isa as nisa
import nki.language as nl

import nki


# accelopt: inputs lhsT=float32[256,256] rhs=float32[256,1024]
@nki.jit
def narrow_psum_07_kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // 128):
        for n in range(N // 128):
            acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // 128):
                a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                b = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * 128 : (k + 1) * 128, n * 128 : (n + 1) * 128])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            y = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y, src=acc)
            nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, n * 128 : (n + 1) * 128], src=y)
    return out
