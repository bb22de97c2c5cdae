"""One AdamW step for a parameter tensor, in the compiler-generated style, fp32.

    m' = b1*m + (1-b1)*g          v' = b2*v + (1-b2)*g^2
    p' = p*(1 - lr*wd) - lr/bc1 * m' / (sqrt(v'/bc2) + eps)

A 2-D loop over 128 x 256 tiles; each tile is loaded, updated with fused two-op instructions
(scalar_tensor_tensor for the moving averages and the final step, one tensor_scalar for
`1 / (d + eps)`) and stored. The row count need not be a multiple of 128: the last row block is
masked, as a compiler emits it (`-128*i0 - p + (rows-1) >= 0`).
"""

import neuronxcc.nki as nki

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10  # the step being taken; fixes the bias corrections


# accelopt: reference adamw_ref.py
@nki.jit
def adamw_kernel(param, grad, exp_avg, exp_avg_sq):
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np

    rows, cols = param.shape
    bias1 = 1.0 - BETA1**STEP
    bias2 = 1.0 - BETA2**STEP
    out = nl.ndarray((rows, cols), dtype=np.float32, buffer=nl.shared_hbm)

    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(256)[None, :]
    for i0 in nl.affine_range((rows + 127) // 128):
        for i1 in nl.affine_range(cols // 256):
            live = -128 * i0 - i_p + (rows - 1) >= 0
            p = nl.load(param[128 * i0 + i_p, 256 * i1 + i_f], mask=live)
            g = nl.load(grad[128 * i0 + i_p, 256 * i1 + i_f], mask=live)
            m = nl.load(exp_avg[128 * i0 + i_p, 256 * i1 + i_f], mask=live)
            v = nl.load(exp_avg_sq[128 * i0 + i_p, 256 * i1 + i_f], mask=live)

            """ m' = (g * (1-b1)) + b1*m """
            m_decayed = nisa.tensor_scalar(data=m, op0=np.multiply, operand0=BETA1, mask=live)
            m_new = nisa.scalar_tensor_tensor(
                data=g, op0=np.multiply, operand0=1.0 - BETA1, op1=np.add, operand1=m_decayed, mask=live
            )
            """ v' = (g^2 * (1-b2)) + b2*v; the square on the scalar engine, off the vector engine """
            g_sq = nisa.activation(op=nl.square, data=g, mask=live)
            v_decayed = nisa.tensor_scalar(
                data=v, op0=np.multiply, operand0=BETA2, engine=nisa.gpsimd_engine, mask=live
            )
            v_new = nisa.scalar_tensor_tensor(
                data=g_sq, op0=np.multiply, operand0=1.0 - BETA2, op1=np.add, operand1=v_decayed, mask=live
            )
            """ 1 / (sqrt(v'/bc2) + eps) """
            root = nisa.activation(op=nl.sqrt, data=v_new, scale=1.0 / bias2, mask=live)
            inv_denom = nisa.tensor_scalar(
                data=root, op0=np.add, operand0=EPS, op1=np.divide, operand1=1.0, reverse1=True, mask=live
            )
            direction = nisa.tensor_tensor(data1=m_new, data2=inv_denom, op=np.multiply, mask=live)
            """ p' = (direction * -lr/bc1) + p*(1 - lr*wd) """
            p_decayed = nisa.tensor_scalar(
                data=p,
                op0=np.multiply,
                operand0=1.0 - LR * WEIGHT_DECAY,
                engine=nisa.gpsimd_engine,
                mask=live,
            )
            p_new = nisa.scalar_tensor_tensor(
                data=direction,
                op0=np.multiply,
                operand0=-LR / bias1,
                op1=np.add,
                operand1=p_decayed,
                mask=live,
            )
            nl.store(out[128 * i0 + i_p, 256 * i1 + i_f], value=p_new, mask=live)
        """ end loop i1 """
    """ end loop i0 """
    return out
