"""NKIBench matmul baseline (compiler-generated style): C = lhsT.T @ rhs.

The plain tiling a compiler emits first: for every 128 x 512 output tile, K-accumulate in one
PSUM bank, loading both operand tiles for every step (nothing kept between output tiles).
"""

import neuronxcc.nki as nki


# accelopt: reference reference.py
@nki.jit
def matmul_kernel(lhsT, rhs):
    import neuronxcc.nki.language as nl
    import numpy as np

    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    out = nl.ndarray((m_size, n_size), dtype=np.float32, buffer=nl.shared_hbm)

    lhs_tile = nl.ndarray(
        (m_size // 128, n_size // 512, k_size // 128, nl.par_dim(128), 128), dtype=np.float32
    )
    rhs_tile = nl.ndarray(
        (m_size // 128, n_size // 512, k_size // 128, nl.par_dim(128), 512), dtype=np.float32
    )
    res_tile = nl.ndarray((m_size // 128, n_size // 512, nl.par_dim(128), 512), dtype=np.float32)

    for i0 in nl.affine_range(m_size // 128):
        for i1 in nl.affine_range(n_size // 512):
            acc = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(k_size // 128):
                lhs_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    lhsT[128 * i2 + nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
                )
                rhs_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    rhs[128 * i2 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]]
                )
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nl.matmul(
                    lhs_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    rhs_tile[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                    transpose_x=True,
                )
            """ end loop i2 """
            res_tile[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.copy(
                acc[nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=res_tile[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
        """ end loop i1 """
    """ end loop i0 """
    return out
