import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


# accelopt: inputs v1=float32[512,128] v2=float32[128,512]
@nki.jit
def load_transpose_cg_kernel(v1, v2):
    # compiler-generated style: out = v1 @ v2 for v1 [512, 128], v2 [128, 512]; v1 blocks transposed on the Tensor Engine
    v3 = nl.ndarray((512, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v4[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v2[nl.arange(128)[:, None], nl.arange(512)[None, :]])
    for i0 in nl.affine_range(4):
        v5 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
        v5[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(128)[None, :]]
        )
        v6 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
        v6[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_transpose(
            v5[nl.arange(128)[:, None], nl.arange(128)[None, :]]
        )
        v7 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
        v7[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(
            v6[nl.arange(128)[:, None], nl.arange(128)[None, :]], dtype=np.float32
        )
        v8 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
        v8[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.nc_matmul(
            v7[nl.arange(128)[:, None], nl.arange(128)[None, :]],
            v4[nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        nl.store(
            v3[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v8[nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        """ end loop i0 """
    return v3
