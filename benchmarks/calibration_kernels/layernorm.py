"""LayerNorm over the last axis, fp32: x [R, D], gamma and beta [1, D]. Two versions
(NKI_NOTES §7): with the `nl` API, and with the Vector Engine's bn_stats/bn_aggr."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

P = 128
EPS = 1e-5


@nki.jit
def layernorm_nl(x, gamma, beta):
    """Mean, centre, variance, rsqrt, scale and shift, each an `nl` call on a [128, D] tile."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma[0:1, 0:cols]).broadcast_to((P, cols))
    b = nl.load(beta[0:1, 0:cols]).broadcast_to((P, cols))
    for i in nl.affine_range(rows // P):
        t = nl.load(x[i * P : (i + 1) * P, 0:cols])
        mean = nl.mean(t, axis=1)
        centred = nl.subtract(t, mean)
        var = nl.mean(nl.square(centred), axis=1)
        rstd = nl.rsqrt(nl.add(var, EPS))
        y = nl.multiply(centred, rstd)
        y = nl.add(nl.multiply(y, g), b)
        nl.store(out[i * P : (i + 1) * P, 0:cols], value=y)
    return out


@nki.jit
def layernorm_bn(x, gamma, beta):
    """Statistics with bn_stats over 512-column chunks and bn_aggr; one two-op tensor_scalar
    normalises, then scale and shift."""
    rows, cols = x.shape
    chunks = cols // 512
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma[0:1, 0:cols]).broadcast_to((P, cols))
    b = nl.load(beta[0:1, 0:cols]).broadcast_to((P, cols))
    for i in nl.affine_range(rows // P):
        t = nl.load(x[i * P : (i + 1) * P, 0:cols])
        stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32)
        for c in nl.affine_range(chunks):
            stats[:, 6 * c : 6 * c + 6] = nisa.bn_stats(t[:, 512 * c : 512 * (c + 1)])
        mv = nisa.bn_aggr(stats)
        rstd = nl.rsqrt(nl.add(mv[:, 1:2], EPS))
        y = nisa.tensor_scalar(t, np.subtract, mv[:, 0:1], op1=np.multiply, operand1=rstd)
        y = nisa.tensor_tensor(y, g, op=nl.multiply)
        y = nisa.tensor_tensor(y, b, op=nl.add)
        nl.store(out[i * P : (i + 1) * P, 0:cols], value=y)
    return out
