"""RMSNorm then matmul in the nki.* language (NKI 0.7), rewritten from the compiler-generated
../rmsnorm_matmul.py: its block dimensions become Python lists of tiles (block dimensions were
removed from the nki.* language), and the normalised, transposed blocks of a row block are made
in one loop and used in the next (fine since NKI 0.3: tiles live as long as Python holds them).
"""

import nki.isa as nisa
import nki.language as nl

import nki

P = 128  # partitions
N_TILE = 512  # output columns per matmul (one PSUM bank of fp32)
EPS = 1e-6


# accelopt: reference ../rmsnorm_matmul_ref.py
@nki.jit
def rmsnorm_matmul_kernel(x, gamma, w):
    m_size, k_size = x.shape
    n_size = w.shape[1]
    k_blocks = k_size // P
    out = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)

    gamma_cols = []
    for kb in range(k_blocks):
        col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=gamma[kb * P : (kb + 1) * P, 0:1])
        gamma_cols.append(col)

    for mb in range(m_size // P):
        rows = slice(mb * P, (mb + 1) * P)
        x_row = nl.ndarray((P, k_size), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_row, src=x[rows, :])
        x_sq = nl.ndarray((P, k_size), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=x_sq,
            op=nl.square,
            data=x_row,
            reduce_op=nl.add,
            reduce_res=sum_sq,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        inv_rms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=inv_rms, data=sum_sq, op0=nl.multiply, operand0=1.0 / k_size, op1=nl.add, operand1=EPS
        )
        nisa.activation(dst=inv_rms, op=nl.rsqrt, data=inv_rms)
        x_norm = nl.ndarray((P, k_size), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=x_norm, data=x_row, op0=nl.multiply, operand0=inv_rms)

        x_norm_t = []
        for kb in range(k_blocks):
            transposed = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=transposed, data=x_norm[:, kb * P : (kb + 1) * P])
            scaled = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=scaled, data=transposed, op0=nl.multiply, operand0=gamma_cols[kb])
            x_norm_t.append(scaled)

        for nb in range(n_size // N_TILE):
            cols = slice(nb * N_TILE, (nb + 1) * N_TILE)
            acc = nl.ndarray((P, N_TILE), dtype=nl.float32, buffer=nl.psum)
            for kb in range(k_blocks):
                w_tile = nl.ndarray((P, N_TILE), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=w_tile, src=w[kb * P : (kb + 1) * P, cols])
                nisa.nc_matmul(dst=acc, stationary=x_norm_t[kb], moving=w_tile)
            result = nl.ndarray((P, N_TILE), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result, src=acc)
            nisa.dma_copy(dst=out[rows, cols], src=result)

    return out
