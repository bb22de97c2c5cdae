"""RMSNorm followed by a matmul, out = (x / rms(x) * gamma) @ w, in the compiler-generated style.

This is how kernels look when a compiler lowers a graph to NKI: every buffer declared up front
with block dimensions, all indexing through `nl.arange` grids with affine offsets, numpy
ufuncs and numpy scalars as operands, engine left to the compiler, PSUM accumulators with
`lazy_initialization`, imports and loop-end markers inside the body.

Per block of 128 rows: the mean of squares along K (Scalar square + Vector reduction), its
reciprocal square root, the normalised rows transposed on the Tensor Engine (K onto partitions)
and scaled by gamma on the way out of PSUM, then K-accumulated matmuls against w.
"""

import neuronxcc.nki as nki


# accelopt: reference rmsnorm_matmul_ref.py
@nki.jit
def rmsnorm_matmul_kernel(x, gamma, w):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    m_size, k_size = x.shape
    n_size = w.shape[1]
    k_blocks = k_size // 128
    out = nl.ndarray((m_size, n_size), dtype=np.float32, buffer=nl.shared_hbm)

    gamma_col = nl.ndarray((k_blocks, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    for i1 in nl.affine_range(k_blocks):
        gamma_col[i1, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nl.load(
            gamma[128 * i1 + nl.arange(128)[:, None], nl.arange(1)[None, :]]
        )
    """ end loop i1 """

    x_row = nl.ndarray((m_size // 128, nl.par_dim(128), k_size), dtype=np.float32, buffer=nl.sbuf)
    x_sq = nl.ndarray((m_size // 128, nl.par_dim(128), k_size), dtype=np.float32, buffer=nl.sbuf)
    sum_sq = nl.ndarray((m_size // 128, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    inv_rms = nl.ndarray((m_size // 128, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    x_norm = nl.ndarray((m_size // 128, nl.par_dim(128), k_size), dtype=np.float32, buffer=nl.sbuf)
    x_norm_t = nl.ndarray((m_size // 128, k_blocks, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    w_tile = nl.ndarray(
        (m_size // 128, n_size // 512, k_blocks, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )
    result = nl.ndarray(
        (m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )

    for i0 in nl.affine_range(m_size // 128):
        x_row[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]] = nl.load(
            x[128 * i0 + nl.arange(128)[:, None], nl.arange(k_size)[None, :]]
        )
        x_sq[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]] = nisa.activation(
            op=nl.square, data=x_row[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]]
        )
        sum_sq[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.tensor_reduce(
            np.add,
            data=x_sq[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]],
            axis=(1,),
            keepdims=True,
        )
        inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.tensor_scalar(
            data=sum_sq[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]],
            op0=np.multiply,
            operand0=np.dtype(np.float32).type(1.0 / k_size),
            op1=np.add,
            operand1=np.dtype(np.float32).type(1e-6),
            engine=nki.isa.unknown_engine,
        )
        inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.activation(
            op=nl.rsqrt, data=inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]]
        )
        x_norm[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]] = nisa.tensor_scalar(
            data=x_row[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]],
            op0=np.multiply,
            operand0=inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]],
            engine=nki.isa.unknown_engine,
        )
        for i1 in nl.affine_range(k_blocks):
            transposed = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
            transposed[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_transpose(
                x_norm[i0, nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]]
            )
            x_norm_t[i0, i1, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.tensor_scalar(
                data=transposed[nl.arange(128)[:, None], nl.arange(128)[None, :]],
                op0=np.multiply,
                operand0=gamma_col[i1, nl.arange(128)[:, None], nl.arange(1)[None, :]],
                engine=nki.isa.unknown_engine,
            )
        """ end loop i1 """
        for i2 in nl.affine_range(n_size // 512):
            acc = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i1 in nl.affine_range(k_blocks):
                w_tile[i0, i2, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    w[128 * i1 + nl.arange(128)[:, None], 512 * i2 + nl.arange(512)[None, :]]
                )
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
                    x_norm_t[i0, i1, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    w_tile[i0, i2, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                )
            """ end loop i1 """
            result[i0, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.copy(
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], 512 * i2 + nl.arange(512)[None, :]],
                value=result[i0, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
        """ end loop i2 """
    """ end loop i0 """
    return out
