"""NKI 0.7 (nki.*): out = exp(x); the input tile is declared once and refilled by dma_copy."""

import nki.isa as nisa
import nki.language as nl

import nki


# accelopt: inputs x=float32[512,1024]
@nki.jit
def exp_rows_07_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
    for i in range(rows // 128):
        r = slice(i * 128, (i + 1) * 128)
        nisa.dma_copy(dst=a, src=x[r, :])
        e = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=a)
        nisa.dma_copy(dst=out[r, :], src=e)
    return out
