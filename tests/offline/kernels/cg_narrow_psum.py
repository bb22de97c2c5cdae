import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


# accelopt: inputs v1=float32[256,256] v2=float32[256,1024]
@nki.jit
def narrow_psum_cg_kernel(v1, v2):
    # compiler-generated style: out = v1.T @ v2 with v1 [256, 256], v2 [256, 1024]; 256-column PSUM tiles
    v3 = nl.ndarray((256, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(2):
        for i1 in nl.affine_range(4):
            v4 = nl.zeros((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for i2 in nl.affine_range(2):
                v5 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
                v5[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    v1[128 * i2 + nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
                )
                v6 = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
                v6[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(
                    v2[128 * i2 + nl.arange(128)[:, None], 256 * i1 + nl.arange(256)[None, :]]
                )
                v4[nl.arange(128)[:, None], nl.arange(256)[None, :]] += nisa.nc_matmul(
                    v5[nl.arange(128)[:, None], nl.arange(128)[None, :]],
                    v6[nl.arange(128)[:, None], nl.arange(256)[None, :]],
                )
                """ end loop i2 """
            v7 = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
            v7[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.copy(
                v4[nl.arange(128)[:, None], nl.arange(256)[None, :]], dtype=np.float32
            )
            nl.store(
                v3[128 * i0 + nl.arange(128)[:, None], 256 * i1 + nl.arange(256)[None, :]],
                value=v7[nl.arange(128)[:, None], nl.arange(256)[None, :]],
            )
            """ end loop i1 """
        """ end loop i0 """
    return v3
