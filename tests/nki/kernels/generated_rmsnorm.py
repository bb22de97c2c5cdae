"""RMSNorm in the compiler-generated style: block-dimensioned tensors declared up front,
arange grids with affine offsets, a masked tail block, engine=unknown_engine, numpy ufuncs and
scalar types, bare string statements and imports inside the body. v1: [300, 256], v2: [256]."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc.nki import trace


@trace
def gen_rmsnorm(v1, v2):
    out = nl.ndarray((300, 256), dtype=np.float32, buffer=nl.shared_hbm)
    x_sb = nl.ndarray((3, nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
    sq = nl.ndarray((3, nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
    w = nl.ndarray((1, 256), dtype=np.float32, buffer=nl.sbuf)
    w[0, nl.arange(256)[None, :]] = nl.load(v2[nl.arange(256)[None, :]])
    for i0 in nl.affine_range(3):
        " load rows "
        x_sb[i0, nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(
            v1[128 * i0 + nl.arange(128)[:, None], nl.arange(256)[None, :]],
            mask=(-128 * i0 - nl.arange(128)[:, None] + 299 >= 0),
        )
        junk = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=nl.sbuf)
        junk[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nisa.activation_reduce(
            op=np.square,
            data=x_sb[i0, nl.arange(128)[:, None], nl.arange(256)[None, :]],
            reduce_op=np.add,
            reduce_res=sq[i0, nl.arange(128)[:, None], 0],
            mask=(-128 * i0 - nl.arange(128)[:, None] + 299 >= 0),
        )
        r = nisa.tensor_scalar(
            data=sq[i0],
            op0=np.multiply,
            operand0=np.dtype(np.float32).type(1 / 256),
            op1=np.add,
            operand1=1e-6,
            engine=nki.isa.unknown_engine,
        )
        rs = nl.rsqrt(r)
        y = nl.multiply(x_sb[i0], rs)
        wb = w.broadcast_to((128, 256))
        z = nisa.tensor_tensor(y, wb, op=np.multiply)
        nl.store(
            out[128 * i0 + nl.arange(128)[:, None], nl.arange(256)[None, :]],
            value=z,
            mask=(-128 * i0 - nl.arange(128)[:, None] + 299 >= 0),
        )
        " end loop i0 "
    return out
