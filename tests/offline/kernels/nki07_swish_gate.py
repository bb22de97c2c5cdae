"""NKI 0.7 (nki.*), destination passing: out = silu(x) * y with SiLU spelled as
exp(-x) -> + 1 -> reciprocal -> * x."""

import nki.isa as nisa
import nki.language as nl

import nki


@nki.jit
def swish_gate_kernel(x, y):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(rows // 128):
        r = slice(i * 128, (i + 1) * 128)
        a = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[r, :])
        b = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=y[r, :])
        e = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=a, scale=-1.0)
        d = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=d, data=e, op0=nl.add, operand0=1.0)
        g = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=g, data=d)
        s = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s, data1=a, data2=g, op=nl.multiply)
        z = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=s, data2=b, op=nl.multiply)
        nisa.dma_copy(dst=out[r, :], src=z)
    return out
