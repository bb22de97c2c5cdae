"""NKIBench rope_single_freq_apply baseline (compiler-generated style).

Tokens on partitions, the head dimension on the free axis: per (batch, head, 128 tokens) load x,
cos and sin, compute the two rotated halves with four multiplies, a subtract and an add on the
Vector Engine (halves addressed by arange offsets), and store the assembled tile."""

import neuronxcc.nki as nki


# accelopt: reference reference.py
@nki.jit
def rope_single_freq_apply_kernel(x, cos, sin):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    b_size, h_size, n_size, d_size = x.shape
    half = d_size // 2
    out = nl.ndarray((b_size, h_size, n_size, d_size), dtype=np.float32, buffer=nl.shared_hbm)

    x_t = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), d_size), dtype=np.float32, buffer=nl.sbuf
    )
    cos_t = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    sin_t = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    lo_cos = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    hi_sin = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    hi_cos = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    lo_sin = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), half), dtype=np.float32, buffer=nl.sbuf
    )
    o_t = nl.ndarray(
        (b_size, h_size, n_size // 128, nl.par_dim(128), d_size), dtype=np.float32, buffer=nl.sbuf
    )

    for i0 in nl.affine_range(b_size):
        for i1 in nl.affine_range(h_size):
            for i2 in nl.affine_range(n_size // 128):
                x_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(d_size)[None, :]] = nl.load(
                    x[i0, i1, 128 * i2 + nl.arange(128)[:, None], nl.arange(d_size)[None, :]]
                )
                cos_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nl.load(
                    cos[i0, i1, 128 * i2 + nl.arange(128)[:, None], nl.arange(half)[None, :]]
                )
                sin_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nl.load(
                    sin[i0, i1, 128 * i2 + nl.arange(128)[:, None], nl.arange(half)[None, :]]
                )
                lo_cos[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nisa.tensor_tensor(
                    data1=x_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    data2=cos_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    op=np.multiply,
                )
                hi_sin[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nisa.tensor_tensor(
                    data1=x_t[i0, i1, i2, nl.arange(128)[:, None], half + nl.arange(half)[None, :]],
                    data2=sin_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    op=np.multiply,
                )
                o_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nisa.tensor_tensor(
                    data1=lo_cos[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    data2=hi_sin[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    op=np.subtract,
                )
                hi_cos[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nisa.tensor_tensor(
                    data1=x_t[i0, i1, i2, nl.arange(128)[:, None], half + nl.arange(half)[None, :]],
                    data2=cos_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    op=np.multiply,
                )
                lo_sin[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]] = nisa.tensor_tensor(
                    data1=x_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    data2=sin_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                    op=np.multiply,
                )
                o_t[i0, i1, i2, nl.arange(128)[:, None], half + nl.arange(half)[None, :]] = (
                    nisa.tensor_tensor(
                        data1=hi_cos[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                        data2=lo_sin[i0, i1, i2, nl.arange(128)[:, None], nl.arange(half)[None, :]],
                        op=np.add,
                    )
                )
                nl.store(
                    out[i0, i1, 128 * i2 + nl.arange(128)[:, None], nl.arange(d_size)[None, :]],
                    value=o_t[i0, i1, i2, nl.arange(128)[:, None], nl.arange(d_size)[None, :]],
                )
            """ end loop i2 """
        """ end loop i1 """
    """ end loop i0 """
    return out
