"""NKIBench matmul_add_rmsnorm baseline (compiler-generated style).

Per block of 128 rows: each 512-wide tile of x @ w is K-accumulated in PSUM and the residual
added on the way out; the sum of squares of the whole row is folded across tiles with
`nl.loop_reduce`; then every tile is scaled by 1/rms and gamma and stored. Both matmul operands
are reloaded for every output tile."""

import neuronxcc.nki as nki


# accelopt: reference reference.py
@nki.jit
def matmul_add_rmsnorm_kernel(x_t, w, residual, gamma):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    k_size, m_size = x_t.shape
    n_size = w.shape[1]
    out = nl.ndarray((m_size, n_size), dtype=np.float32, buffer=nl.shared_hbm)

    gamma_row = nl.ndarray((nl.par_dim(1), n_size), dtype=np.float32, buffer=nl.sbuf)
    gamma_all = nl.ndarray((nl.par_dim(128), n_size), dtype=np.float32, buffer=nl.sbuf)
    x_tile = nl.ndarray(
        (m_size // 128, n_size // 512, k_size // 128, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf
    )
    w_tile = nl.ndarray(
        (m_size // 128, n_size // 512, k_size // 128, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )
    res_tile = nl.ndarray(
        (m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )
    h = nl.ndarray((m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    h_sq = nl.ndarray((m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    part_sq = nl.ndarray((m_size // 128, n_size // 512, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    inv_rms = nl.ndarray((m_size // 128, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    scaled = nl.ndarray(
        (m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )
    result = nl.ndarray(
        (m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )

    gamma_row[nl.arange(1)[:, None], nl.arange(n_size)[None, :]] = nl.load(
        gamma[nl.arange(1)[:, None], nl.arange(n_size)[None, :]]
    )
    gamma_all[nl.arange(128)[:, None], nl.arange(n_size)[None, :]] = gamma_row[
        nl.arange(1)[:, None], nl.arange(n_size)[None, :]
    ].broadcast_to((128, n_size))

    for i0 in nl.affine_range(m_size // 128):
        sum_sq = nl.zeros((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        for i1 in nl.affine_range(n_size // 512):
            acc = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(k_size // 128):
                x_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    x_t[128 * i2 + nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
                )
                w_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    w[128 * i2 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]]
                )
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
                    x_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    w_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                )
            """ end loop i2 """
            res_tile[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                residual[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]]
            )
            h[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=acc[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=res_tile[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.add,
            )
            h_sq[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
                op=nl.square, data=h[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]]
            )
            part_sq[i0, i1, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.tensor_reduce(
                np.add,
                data=h_sq[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                axis=(1,),
                keepdims=True,
            )
            sum_sq = nl.loop_reduce(
                part_sq[i0, i1, nl.arange(128)[:, None], nl.arange(1)[None, :]],
                op=np.add,
                loop_indices=[i1],
                dtype=np.float32,
            )
        """ end loop i1 """
        inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.activation(
            op=nl.rsqrt,
            data=nisa.tensor_scalar(
                data=sum_sq[nl.arange(128)[:, None], nl.arange(1)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(1.0 / n_size),
                op1=np.add,
                operand1=np.dtype(np.float32).type(1e-6),
                engine=nki.isa.unknown_engine,
            ),
        )
        for i1 in nl.affine_range(n_size // 512):
            scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                data=h[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op0=np.multiply,
                operand0=inv_rms[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]],
                engine=nki.isa.unknown_engine,
            )
            result[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=gamma_all[nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                op=np.multiply,
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=result[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
        """ end loop i1 """
    """ end loop i0 """
    return out
