"""NKIBench swiglu baseline (hand-written).

Per block of 128 tokens: transpose the block to K-major pieces once; for each 512-wide slice of
the hidden dimension accumulate the gate and up projections in two PSUM tiles, combine them
(silu(gate) * up) and transpose the result to hidden-major pieces; finally accumulate the down
projection over the hidden dimension. All three weight matrices are streamed from HBM again for
every token block."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

P = 128  # partitions / transpose size
F = 512  # moving free size (one PSUM bank of fp32)


# accelopt: reference reference.py
@nki.jit
def swiglu_kernel(x, w_gate, w_up, w_down):
    m, k = x.shape
    n = w_gate.shape[1]
    out = nl.ndarray((m, k), dtype=nl.float32, buffer=nl.shared_hbm)

    for mi in nl.affine_range(m // P):
        rows = slice(mi * P, (mi + 1) * P)
        x_rows = nl.load(x[rows, 0:k])
        x_t = nl.ndarray((k // P, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for ki in nl.affine_range(k // P):
            x_t[ki] = nl.copy(nisa.nc_transpose(x_rows[:, ki * P : (ki + 1) * P]))

        hidden_t = nl.ndarray((n // P, nl.par_dim(P), P), dtype=nl.float32, buffer=nl.sbuf)
        for ni in nl.affine_range(n // F):
            cols = slice(ni * F, (ni + 1) * F)
            gate = nl.zeros((P, F), dtype=nl.float32, buffer=nl.psum)
            up = nl.zeros((P, F), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // P):
                gate += nisa.nc_matmul(x_t[ki], nl.load(w_gate[ki * P : (ki + 1) * P, cols]))
                up += nisa.nc_matmul(x_t[ki], nl.load(w_up[ki * P : (ki + 1) * P, cols]))
            hidden = nl.multiply(nl.silu(gate), up)
            for j in nl.affine_range(F // P):
                hidden_t[ni * (F // P) + j] = nl.copy(nisa.nc_transpose(hidden[:, j * P : (j + 1) * P]))

        for ko in nl.affine_range(k // F):
            out_cols = slice(ko * F, (ko + 1) * F)
            acc = nl.zeros((P, F), dtype=nl.float32, buffer=nl.psum)
            for nj in nl.affine_range(n // P):
                acc += nisa.nc_matmul(hidden_t[nj], nl.load(w_down[nj * P : (nj + 1) * P, out_cols]))
            nl.store(out[rows, out_cols], value=nl.copy(acc, dtype=nl.float32))
    return out
