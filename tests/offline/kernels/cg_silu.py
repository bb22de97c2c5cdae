import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def silu_cg_kernel(v1):
    # compiler-generated style: block dims, arange grids, a row mask (200 rows)
    v2 = nl.ndarray((200, 1024), dtype=np.float32, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(2):
        for i1 in nl.affine_range(4):
            v3 = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
            v3[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(
                v1[128 * i0 + nl.arange(128)[:, None], 256 * i1 + nl.arange(256)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + 199 >= 0),
            )
            v4 = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
            v4[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nisa.activation(
                op=nl.sigmoid,
                data=v3[nl.arange(128)[:, None], nl.arange(256)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + 199 >= 0),
            )
            v5 = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
            v5[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nisa.tensor_tensor(
                v3[nl.arange(128)[:, None], nl.arange(256)[None, :]],
                v4[nl.arange(128)[:, None], nl.arange(256)[None, :]],
                op=np.multiply,
                mask=(-128 * i0 - nl.arange(128)[:, None] + 199 >= 0),
            )
            nl.store(
                v2[128 * i0 + nl.arange(128)[:, None], 256 * i1 + nl.arange(256)[None, :]],
                value=v5[nl.arange(128)[:, None], nl.arange(256)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + 199 >= 0),
            )
            """ end loop i1 """
        """ end loop i0 """
    return v2
