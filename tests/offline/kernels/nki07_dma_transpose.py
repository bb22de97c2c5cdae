"""NKI 0.7 (nki.*), destination passing: out = a @ b for a [M, 128]; each row block of a is
loaded transposed by nisa.dma_transpose."""

import nki.isa as nisa
import nki.language as nl

import nki


# accelopt: inputs a=float32[512,128] b=float32[128,512]
@nki.jit
def dma_transpose_07_kernel(a, b):
    M, _ = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    w = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=b[0:128, 0:N])
    for m in range(M // 128):
        at = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=at, src=a[m * 128 : (m + 1) * 128, 0:128])
        p = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=at, moving=w)
        y = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=p)
        nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, 0:N], src=y)
    return out
