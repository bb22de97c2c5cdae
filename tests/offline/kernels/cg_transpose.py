import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def transpose_twice_cg_kernel(v1):
    # compiler-generated style: both outputs are v1.T, each transposed on the Tensor Engine
    v2 = nl.ndarray((128, 128), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((128, 128), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    v4[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
        v1[nl.arange(128)[:, None], nl.arange(128)[None, :]]
    )
    v5 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
    v5[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_transpose(
        v4[nl.arange(128)[:, None], nl.arange(128)[None, :]]
    )
    v6 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    v6[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(
        v5[nl.arange(128)[:, None], nl.arange(128)[None, :]], dtype=np.float32
    )
    nl.store(
        v2[nl.arange(128)[:, None], nl.arange(128)[None, :]],
        value=v6[nl.arange(128)[:, None], nl.arange(128)[None, :]],
    )
    v7 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
    v7[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nisa.nc_transpose(
        v4[nl.arange(128)[:, None], nl.arange(128)[None, :]]
    )
    v8 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    v8[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.copy(
        v7[nl.arange(128)[:, None], nl.arange(128)[None, :]], dtype=np.float32
    )
    nl.store(
        v3[nl.arange(128)[:, None], nl.arange(128)[None, :]],
        value=v8[nl.arange(128)[:, None], nl.arange(128)[None, :]],
    )
    return v2, v3
