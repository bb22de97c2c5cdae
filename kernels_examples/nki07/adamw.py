"""One AdamW step in the nki.* language (NKI 0.7), after ../adamw.py.

The nki.* language has no masks: the ragged last block of rows is a smaller tile, its slice
bounded with `min` (NKI migration guide, "Deprecation of masking"). The fused two-operator
instructions are the same.
"""

import nki.isa as nisa
import nki.language as nl

import nki

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10  # the step being taken; fixes the bias corrections

P = 128
F = 256


# accelopt: reference ../adamw_ref.py
@nki.jit
def adamw_kernel(param, grad, exp_avg, exp_avg_sq):
    rows, cols = param.shape
    bias1 = 1.0 - BETA1**STEP
    bias2 = 1.0 - BETA2**STEP
    out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)

    for i in range((rows + P - 1) // P):
        r0 = i * P
        n = min(P, rows - r0)  # rows in this block: the last one may be short
        rs = slice(r0, r0 + n)
        for j in range(cols // F):
            cs = slice(j * F, (j + 1) * F)

            def tile(rows=n):
                return nl.ndarray((rows, F), dtype=nl.float32, buffer=nl.sbuf)

            p, g, m, v = tile(), tile(), tile(), tile()
            nisa.dma_copy(dst=p, src=param[rs, cs])
            nisa.dma_copy(dst=g, src=grad[rs, cs])
            nisa.dma_copy(dst=m, src=exp_avg[rs, cs])
            nisa.dma_copy(dst=v, src=exp_avg_sq[rs, cs])

            # m' = g * (1 - b1) + b1 * m
            m_decayed = tile()
            nisa.tensor_scalar(dst=m_decayed, data=m, op0=nl.multiply, operand0=BETA1)
            m_new = tile()
            nisa.scalar_tensor_tensor(
                dst=m_new, data=g, op0=nl.multiply, operand0=1.0 - BETA1, op1=nl.add, operand1=m_decayed
            )
            # v' = g^2 * (1 - b2) + b2 * v; the square on the Scalar Engine
            g_sq = tile()
            nisa.activation(dst=g_sq, op=nl.square, data=g)
            v_decayed = tile()
            nisa.tensor_scalar(
                dst=v_decayed, data=v, op0=nl.multiply, operand0=BETA2, engine=nisa.gpsimd_engine
            )
            v_new = tile()
            nisa.scalar_tensor_tensor(
                dst=v_new, data=g_sq, op0=nl.multiply, operand0=1.0 - BETA2, op1=nl.add, operand1=v_decayed
            )
            # 1 / (sqrt(v' / bc2) + eps)
            root = tile()
            nisa.activation(dst=root, op=nl.sqrt, data=v_new, scale=1.0 / bias2)
            inv_denom = tile()
            nisa.tensor_scalar(
                dst=inv_denom,
                data=root,
                op0=nl.add,
                operand0=EPS,
                op1=nl.divide,
                operand1=1.0,
                reverse1=True,
            )
            direction = tile()
            nisa.tensor_tensor(dst=direction, data1=m_new, data2=inv_denom, op=nl.multiply)
            # p' = direction * (-lr / bc1) + p * (1 - lr * wd)
            p_decayed = tile()
            nisa.tensor_scalar(
                dst=p_decayed,
                data=p,
                op0=nl.multiply,
                operand0=1.0 - LR * WEIGHT_DECAY,
                engine=nisa.gpsimd_engine,
            )
            p_new = tile()
            nisa.scalar_tensor_tensor(
                dst=p_new, data=direction, op0=nl.multiply, operand0=-LR / bias1, op1=nl.add, operand1=p_decayed
            )
            nisa.dma_copy(dst=out[rs, cs], src=p_new)

    return out
