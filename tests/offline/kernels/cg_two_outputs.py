import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def two_outputs_cg_kernel(v1, v2):
    # compiler-generated style: v3 = exp(v1), v4 = 3 * v2 with v1, v2 [256, 512]
    v3 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(2):
        v5 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        v5[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v6 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        v6[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
            op=nl.exp, data=v5[nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        nl.store(
            v3[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v6[nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        v7 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        v7[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v8 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        v8[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
            v7[nl.arange(128)[:, None], nl.arange(512)[None, :]], np.multiply, np.dtype(np.float32).type(3)
        )
        nl.store(
            v4[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v8[nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        """ end loop i0 """
    return v3, v4
