import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def direct_cg_kernel(v1):
    # compiler-generated style with direct allocation: v2 = exp(v1) with v1 [1024, 512]; the
    # loaded tiles rotate through one physical tile, the results through two
    v2 = nl.ndarray((1024, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray(
        (8, nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(1,))
    )
    v4 = nl.ndarray(
        (8, nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=65536, num_free_tiles=(2,))
    )
    for i0 in nl.affine_range(8):
        v3[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.exp(
            v3[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        nl.store(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        """ end loop i0 """
    return v2
