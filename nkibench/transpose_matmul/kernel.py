"""NKIBench transpose_matmul baseline (compiler-generated style): C = A @ B, A row-major.

Per block of 128 rows of A: the block is loaded once and transposed on the Tensor Engine into
K-major 128 x 128 pieces; then every 512-wide column block of C is K-accumulated in PSUM,
reloading the B tiles for each row block. The ragged last column block is masked.
"""

import neuronxcc.nki as nki


# accelopt: reference reference.py
@nki.jit
def transpose_matmul_kernel(a, b):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    m_size, k_size = a.shape
    n_size = b.shape[1]
    n_blocks = (n_size + 511) // 512
    out = nl.ndarray((m_size, n_size), dtype=np.float32, buffer=nl.shared_hbm)

    a_rows = nl.ndarray((m_size // 128, nl.par_dim(128), k_size), dtype=np.float32, buffer=nl.sbuf)
    a_t = nl.ndarray((m_size // 128, k_size // 128, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    b_tile = nl.ndarray(
        (m_size // 128, n_blocks, k_size // 128, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf
    )
    res = nl.ndarray((m_size // 128, n_blocks, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)

    for i0 in nl.affine_range(m_size // 128):
        a_rows[i0, nl.arange(128)[:, None], nl.arange(k_size)[None, :]] = nl.load(
            a[128 * i0 + nl.arange(128)[:, None], nl.arange(k_size)[None, :]]
        )
        for i2 in nl.affine_range(k_size // 128):
            a_t_psum = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
            a_t_psum[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_transpose(
                a_rows[i0, nl.arange(128)[:, None], 128 * i2 + nl.arange(128)[None, :]],
                engine=nisa.tensor_engine,
            )
            a_t[i0, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.tensor_copy(
                a_t_psum[nl.arange(128)[:, None], nl.arange(128)[None, :]], engine=nki.isa.unknown_engine
            )
        """ end loop i2 """
        for i1 in nl.affine_range(n_blocks):
            acc = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(k_size // 128):
                b_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    b[128 * i2 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                    mask=(-512 * i1 - nl.arange(512)[None, :] + (n_size - 1) >= 0),
                )
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
                    a_t[i0, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    b_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                    mask=(-512 * i1 - nl.arange(512)[None, :] + (n_size - 1) >= 0),
                )
            """ end loop i2 """
            res[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.copy(
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                dtype=np.float32,
                mask=(-512 * i1 - nl.arange(512)[None, :] + (n_size - 1) >= 0),
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=res[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                mask=(-512 * i1 - nl.arange(512)[None, :] + (n_size - 1) >= 0),
            )
        """ end loop i1 """
    """ end loop i0 """
    return out
