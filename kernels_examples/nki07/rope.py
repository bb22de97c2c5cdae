"""Rotary position embedding in the nki.* language (NKI 0.7), on 64-partition tiles of the
head-dim-major layout of ../rope.py: out_lo = x_lo cos - x_hi sin, out_hi = x_hi cos + x_lo sin."""

import nki.isa as nisa
import nki.language as nl

import nki

HALF = 64  # half the head dimension: partitions per tile
CHUNK = 512  # sequence positions per tile


def _load(src, dtype):
    tile = nl.ndarray((HALF, CHUNK), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=src)
    return tile


def _combine(a, b, c, d, op):
    """op(a * b, c * d) into a new tile."""
    left = nl.ndarray((HALF, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=left, data1=a, data2=b, op=nl.multiply)
    right = nl.ndarray((HALF, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=right, data1=c, data2=d, op=nl.multiply)
    result = nl.ndarray((HALF, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=result, data1=left, data2=right, op=op)
    return result


# accelopt: reference ../rope_ref.py
@nki.jit
def rope_kernel(x, cos, sin):
    n_heads, head_dim, seq_len = x.shape
    out = nl.ndarray((n_heads, head_dim, seq_len), dtype=nl.float32, buffer=nl.shared_hbm)

    for h in range(n_heads):
        for t in range(seq_len // CHUNK):
            ts = slice(t * CHUNK, (t + 1) * CHUNK)
            x_lo = _load(x[h, 0:HALF, ts], x.dtype)
            x_hi = _load(x[h, HALF : 2 * HALF, ts], x.dtype)
            cos_t = _load(cos[0:HALF, ts], cos.dtype)
            sin_t = _load(sin[0:HALF, ts], sin.dtype)

            out_lo = _combine(x_lo, cos_t, x_hi, sin_t, nl.subtract)
            out_hi = _combine(x_hi, cos_t, x_lo, sin_t, nl.add)

            nisa.dma_copy(dst=out[h, 0:HALF, ts], src=out_lo)
            nisa.dma_copy(dst=out[h, HALF : 2 * HALF, ts], src=out_hi)

    return out
