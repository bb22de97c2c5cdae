import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def sigmoid_square_cg_kernel(v1):
    # compiler-generated style, square 128 x 128 blocks: the width is also the partition width
    v2 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(2):
        for i1 in nl.affine_range(4):
            v3 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
            v3[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                v1[128 * i0 + nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]],
            )
            v4 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
            v4[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.activation(
                op=nl.sigmoid,
                data=v3[nl.arange(128)[:, None], nl.arange(128)[None, :]],
            )
            nl.store(
                v2[128 * i0 + nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]],
                value=v4[nl.arange(128)[:, None], nl.arange(128)[None, :]],
            )
            """ end loop i1 """
        """ end loop i0 """
    return v2
