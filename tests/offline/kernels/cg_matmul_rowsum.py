import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def matmul_rowsum_cg_kernel(v1, v2):
    # compiler-generated style: v3 = v1.T @ v2 and v4 = its row sums, reduced over the i1 tiles
    v3 = nl.ndarray((256, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((256, 1), dtype=np.float32, buffer=nl.shared_hbm)
    v5 = nl.ndarray((2, 2, 2, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    v6 = nl.ndarray((2, 2, 2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v7 = nl.ndarray((2, 2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v8 = nl.ndarray((2, 2, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        v9 = nl.zeros((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        for i1 in nl.affine_range(2):
            v10 = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(2):
                v5[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    v1[128 * i2 + nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
                )
                v6[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                    v2[128 * i2 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]]
                )
                v10[nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
                    v5[i0, i1, i2, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    v6[i0, i1, i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                )
            """ end loop i2 """
            v7[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.copy(
                v10[nl.arange(128)[:, None], nl.arange(512)[None, :]], dtype=np.float32
            )
            v8[i0, i1, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.tensor_reduce(
                np.add,
                data=v7[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                axis=(1,),
                keepdims=True,
            )
            v9 = nl.loop_reduce(
                v8[i0, i1, nl.arange(128)[:, None], nl.arange(1)[None, :]],
                op=np.add,
                loop_indices=[i1],
                dtype=np.float32,
            )
            nl.store(
                v3[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=v7[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
            """ end loop i1 """
        nl.store(
            v4[128 * i0 + nl.arange(128)[:, None], nl.arange(1)[None, :]],
            value=v9[nl.arange(128)[:, None], nl.arange(1)[None, :]],
        )
        """ end loop i0 """
    return v3, v4
