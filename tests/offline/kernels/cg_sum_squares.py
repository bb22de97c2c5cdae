import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def sum_squares_cg_kernel(v1):
    # compiler-generated style: v2 = v1 ** 2 and v3 = its row sums, v1 [256, 512]
    v2 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((256, 1), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v5 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v6 = nl.ndarray((2, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
            op=nl.square, data=v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v6[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]] = nisa.tensor_reduce(
            np.add, data=v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]], axis=(1,), keepdims=True
        )
        nl.store(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        nl.store(
            v3[128 * i0 + nl.arange(128)[:, None], nl.arange(1)[None, :]],
            value=v6[i0, nl.arange(128)[:, None], nl.arange(1)[None, :]],
        )
        """ end loop i0 """
    return v2, v3
