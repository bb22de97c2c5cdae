import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def two_rows_cg_kernel(v1, v2):
    # compiler-generated style: v3 = exp(v1), v4 = exp(v2) with v1, v2 [128, 20480]
    v3 = nl.ndarray((128, 20480), dtype=np.float32, buffer=nl.shared_hbm)
    v4 = nl.ndarray((128, 20480), dtype=np.float32, buffer=nl.shared_hbm)
    v5 = nl.ndarray((nl.par_dim(128), 20480), dtype=np.float32, buffer=nl.sbuf)
    v5[nl.arange(128)[:, None], nl.arange(20480)[None, :]] = nl.load(
        v1[nl.arange(128)[:, None], nl.arange(20480)[None, :]]
    )
    v6 = nl.ndarray((nl.par_dim(128), 20480), dtype=np.float32, buffer=nl.sbuf)
    v6[nl.arange(128)[:, None], nl.arange(20480)[None, :]] = nl.load(
        v2[nl.arange(128)[:, None], nl.arange(20480)[None, :]]
    )
    v7 = nl.ndarray((nl.par_dim(128), 20480), dtype=np.float32, buffer=nl.sbuf)
    v7[nl.arange(128)[:, None], nl.arange(20480)[None, :]] = nisa.activation(
        op=nl.exp, data=v5[nl.arange(128)[:, None], nl.arange(20480)[None, :]]
    )
    nl.store(
        v3[nl.arange(128)[:, None], nl.arange(20480)[None, :]],
        value=v7[nl.arange(128)[:, None], nl.arange(20480)[None, :]],
    )
    v8 = nl.ndarray((nl.par_dim(128), 20480), dtype=np.float32, buffer=nl.sbuf)
    v8[nl.arange(128)[:, None], nl.arange(20480)[None, :]] = nisa.activation(
        op=nl.exp, data=v6[nl.arange(128)[:, None], nl.arange(20480)[None, :]]
    )
    nl.store(
        v4[nl.arange(128)[:, None], nl.arange(20480)[None, :]],
        value=v8[nl.arange(128)[:, None], nl.arange(20480)[None, :]],
    )
    return v3, v4
