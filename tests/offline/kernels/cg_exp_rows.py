import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import numpy as np


# accelopt: inputs v1=float32[1024,2048]
@nki.jit
def exp_rows_cg_kernel(v1):
    # compiler-generated style: out = exp(v1) for v1 [1024, 2048]; v3 declared up front, refilled per block
    v2 = nl.ndarray((1024, 2048), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((nl.par_dim(128), 2048), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.sequential_range(8):
        v3[nl.arange(128)[:, None], nl.arange(2048)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(2048)[None, :]]
        )
        v4 = nl.ndarray((nl.par_dim(128), 2048), dtype=np.float32, buffer=nl.sbuf)
        v4[nl.arange(128)[:, None], nl.arange(2048)[None, :]] = nl.exp(
            v3[nl.arange(128)[:, None], nl.arange(2048)[None, :]]
        )
        nl.store(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(2048)[None, :]],
            value=v4[nl.arange(128)[:, None], nl.arange(2048)[None, :]],
        )
        """ end loop i0 """
    return v2
