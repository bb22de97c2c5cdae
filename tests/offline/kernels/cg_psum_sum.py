import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


# accelopt: inputs v1=float32[512,256] v2=float32[512,512]
@nki.jit
def psum_sum_cg_kernel(v1, v2):
    # compiler-generated style: out = v1.T @ v2 for v1 [512, 256], v2 [512, 512]; sum kept in SBUF
    v3 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((4, nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
    v5 = nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        v4[i0, nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(256)[None, :]]
        )
        v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        """ end loop i0 """
    for i1 in nl.affine_range(2):
        v6 = nl.zeros((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        for i2 in nl.sequential_range(4):
            v7 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
            v7[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.nc_matmul(
                v4[i2, nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]],
                v5[i2, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            )
            v6[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                v6[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                v7[nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.add,
            )
            """ end loop i2 """
        nl.store(
            v3[128 * i1 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v6[nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        """ end loop i1 """
    return v3
