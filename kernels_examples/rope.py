"""Rotary position embedding on 64-partition tiles, fp32.

q/k are kept head-dim-major ([heads, head_dim, seq], the layout attention kernels feed the
Tensor Engine), so each half of the 128-wide head dimension is a 64-partition tile:
    out[:64]  = x[:64] * cos - x[64:] * sin
    out[64:]  = x[64:] * cos + x[:64] * sin
cos/sin ([64, seq]) are shared by every head; this first version reloads them per head.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

HALF = 64  # half the head dimension: partitions per tile
CHUNK = 512  # sequence positions per tile


# accelopt: reference rope_ref.py
@nki.jit
def rope_kernel(x, cos, sin):
    n_heads, head_dim, seq_len = x.shape
    out = nl.ndarray((n_heads, head_dim, seq_len), dtype=nl.float32, buffer=nl.shared_hbm)

    for h in nl.affine_range(n_heads):
        for t in nl.affine_range(seq_len // CHUNK):
            t0 = t * CHUNK
            x_lo = nl.load(x[h, 0:HALF, t0 : t0 + CHUNK])
            x_hi = nl.load(x[h, HALF : 2 * HALF, t0 : t0 + CHUNK])
            cos_t = nl.load(cos[0:HALF, t0 : t0 + CHUNK])
            sin_t = nl.load(sin[0:HALF, t0 : t0 + CHUNK])

            out_lo = nl.subtract(nl.multiply(x_lo, cos_t), nl.multiply(x_hi, sin_t))
            out_hi = nl.add(nl.multiply(x_hi, cos_t), nl.multiply(x_lo, sin_t))

            nl.store(out[h, 0:HALF, t0 : t0 + CHUNK], value=out_lo)
            nl.store(out[h, HALF : 2 * HALF, t0 : t0 + CHUNK], value=out_hi)

    return out
