"""NKIBench adamw baseline (compiler-generated style): one AdamW step, fp32.

    m' = b1*m + (1-b1)*g          v' = b2*v + (1-b2)*g^2
    p' = p*(1 - lr*wd) - lr/bc1 * m' / (sqrt(v'/bc2) + eps)

The row count need not be a multiple of 128: the last row block is masked, exactly as a
compiler emits it (`-128*i0 - p + (rows-1) >= 0`). Every instruction of a block carries the
mask; the engine is left to the compiler where two engines could do the work.
"""

import neuronxcc.nki as nki

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10  # the step being taken; fixes the bias corrections


# accelopt: reference reference.py
@nki.jit
def adamw_kernel(param, grad, exp_avg, exp_avg_sq):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    rows, cols = param.shape
    row_blocks = (rows + 127) // 128
    col_blocks = cols // 512
    bias1 = 1.0 - BETA1**STEP
    bias2 = 1.0 - BETA2**STEP
    out = nl.ndarray((rows, cols), dtype=np.float32, buffer=nl.shared_hbm)

    blk = (row_blocks, col_blocks, nl.par_dim(128), 512)
    p_t = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    g_t = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    m_t = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    v_t = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    m_scaled = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    g_scaled = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    m_new = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    g_sq = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    v_scaled = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    v_new = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    denom = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    inv_denom = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    update = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    p_decayed = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)
    p_new = nl.ndarray(blk, dtype=np.float32, buffer=nl.sbuf)

    for i0 in nl.affine_range(row_blocks):
        for i1 in nl.affine_range(col_blocks):
            p_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                param[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            g_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                grad[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            m_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                exp_avg[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            v_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(
                exp_avg_sq[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            m_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                data=m_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(BETA1),
                engine=nki.isa.unknown_engine,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            g_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                data=g_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(1.0 - BETA1),
                engine=nki.isa.unknown_engine,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            m_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=m_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=g_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.add,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            g_sq[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=g_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=g_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.multiply,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            v_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                data=v_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(BETA2),
                engine=nki.isa.unknown_engine,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            """ v' = (1 - b2) * g^2 + b2 * v """
            v_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=nisa.tensor_scalar(
                    data=g_sq[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                    op0=np.multiply,
                    operand0=np.dtype(np.float32).type(1.0 - BETA2),
                    engine=nki.isa.unknown_engine,
                    mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
                ),
                data2=v_scaled[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.add,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            denom[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.activation(
                op=nl.sqrt,
                data=v_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                scale=np.dtype(np.float32).type(1.0 / bias2),
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            inv_denom[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.reciprocal(
                nisa.tensor_scalar(
                    data=denom[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                    op0=np.add,
                    operand0=np.dtype(np.float32).type(EPS),
                    engine=nki.isa.unknown_engine,
                    mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
                ),
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            update[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=m_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=inv_denom[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op=np.multiply,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            p_decayed[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
                data=p_t[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                op0=np.multiply,
                operand0=np.dtype(np.float32).type(1.0 - LR * WEIGHT_DECAY),
                engine=nki.isa.unknown_engine,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            """ p' = p * (1 - lr*wd) - (lr / bc1) * update """
            p_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_tensor(
                data1=p_decayed[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                data2=nisa.tensor_scalar(
                    data=update[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                    op0=np.multiply,
                    operand0=np.dtype(np.float32).type(LR / bias1),
                    engine=nki.isa.unknown_engine,
                    mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
                ),
                op=np.subtract,
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], 512 * i1 + nl.arange(512)[None, :]],
                value=p_new[i0, i1, nl.arange(128)[:, None], nl.arange(512)[None, :]],
                mask=(-128 * i0 - nl.arange(128)[:, None] + (rows - 1) >= 0),
            )
        """ end loop i1 """
    """ end loop i0 """
    return out
