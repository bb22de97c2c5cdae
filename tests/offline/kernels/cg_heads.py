import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def heads_cg_kernel(x, y):
    # compiler-generated style: out = 3 * x * y per head, x and y [4 heads, 256 tokens, 64]
    out = nl.ndarray((4, 256, 64), dtype=np.float32, buffer=nl.shared_hbm)
    x_t = nl.ndarray((4, 2, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    y_t = nl.ndarray((4, 2, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    prod = nl.ndarray((4, 2, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    res = nl.ndarray((4, 2, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        for i1 in nl.affine_range(2):
            x_t[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(
                x[i0, 128 * i1 + nl.arange(128)[:, None], nl.arange(64)[None, :]]
            )
            y_t[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.load(
                y[i0, 128 * i1 + nl.arange(128)[:, None], nl.arange(64)[None, :]]
            )
            prod[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nisa.tensor_tensor(
                data1=x_t[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]],
                data2=y_t[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]],
                op=np.multiply,
            )
            res[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nisa.tensor_scalar(
                data=prod[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(3),
                engine=nki.isa.unknown_engine,
            )
            nl.store(
                out[i0, 128 * i1 + nl.arange(128)[:, None], nl.arange(64)[None, :]],
                value=res[i0, i1, nl.arange(128)[:, None], nl.arange(64)[None, :]],
            )
            """ end loop i1 """
        """ end loop i0 """
    return out
