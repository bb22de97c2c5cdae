import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def matmul_cg_kernel(v1, v2, v3):
    # compiler-generated style: out = tanh(2 * v1.T @ v2 + v3) with v1 [256, 256], v2 [256, 1024], v3 [256, 1]
    v4 = nl.ndarray((256, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    v5 = nl.ndarray((2, 2, 2, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        for i1 in nl.affine_range(2):
            v9 = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
            v9[nl.arange(128)[:, None], nl.arange(1)[None, :]] = nl.load(
                v3[128 * i0 + nl.arange(128)[:, None], nl.arange(1)[None, :]]
            )
            v6 = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(2):
                v5[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    v1[128 * i2 + nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
                )
                v7 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
                v7[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    v2[128 * i2 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]]
                )
                v6[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
                    v5[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    v7[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                )
                """ end loop i2 """
            v8 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
            v8[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.copy(
                v6[nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32
            )
            v10 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
            v10[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                v8[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                np.multiply,
                np.dtype(np.float32).type(2),
                engine=nki.isa.unknown_engine,
            )
            v11 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
            v11[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
                op=nl.tanh,
                data=v10[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                bias=v9[nl.arange(128)[:, None], nl.arange(1)[None, :]],
            )
            nl.store(
                v4[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=v11[nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
            """ end loop i1 """
        """ end loop i0 """
    return v4
