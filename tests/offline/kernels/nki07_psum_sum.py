"""NKI 0.7 (nki.*), destination passing: out = lhsT.T @ rhs, each partial product added to an
SBUF sum with tensor_tensor."""

import nki.isa as nisa
import nki.language as nl

import nki


# accelopt: inputs lhsT=float32[512,256] rhs=float32[512,512]
@nki.jit
def psum_sum_07_kernel(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // 128):
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for k in range(K // 128):
            a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
            b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=b, src=rhs[k * 128 : (k + 1) * 128, 0:N])
            p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=a, moving=b)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=p, op=nl.add)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, 0:N], src=acc)
    return out
