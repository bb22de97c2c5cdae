import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def scale_shift_cg_kernel(v1):
    # compiler-generated style: out = 3 * v1 + 1, row blocks in a sequential loop that need not be
    v2 = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v4 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v5 = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.sequential_range(2):
        v3[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]]
        )
        v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
            data=v3[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            op0=np.multiply,
            operand0=np.dtype(np.float32).type(3),
            engine=nki.isa.unknown_engine,
        )
        v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
            data=v4[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]],
            op0=np.add,
            operand0=np.dtype(np.float32).type(1),
            engine=nki.isa.unknown_engine,
        )
        nl.store(
            v2[128 * i0 + nl.arange(128)[:, None], nl.arange(512)[None, :]],
            value=v5[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]],
        )
        """ end loop i0 """
    return v2
