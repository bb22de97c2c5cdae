"""Fused Mamba selective scan, fp32: delta, u [C, L]; A [C, S]; B, C [S, L]; out [C, L] with
out[c, t] = sum_s C[s, t] * h_s[c, t] and h_s[c, t] = exp(delta[c, t] A[c, s]) h_s[c, t-1]
+ delta[c, t] u[c, t] B[s, t]. Three versions (NKI_NOTES §7)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

P = 128


@nki.jit
def mamba_v1(delta, u, A, B, C):
    """v1: for each channel tile and each state, everything (delta and u included) is loaded
    and recomputed: exp(delta*A) as a multiply then an exp, delta*u, *B, scan, *C, accumulate."""
    channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ct in nl.affine_range(channels // P):
        c0 = ct * P
        acc = nl.zeros((P, seq), dtype=nl.float32)
        for s in nl.affine_range(states):
            d = nl.load(delta[c0 : c0 + P, 0:seq])
            x = nl.load(u[c0 : c0 + P, 0:seq])
            a = nl.load(A[c0 : c0 + P, s : s + 1])
            decay = nl.exp(nisa.tensor_scalar(d, np.multiply, a))
            du = nisa.tensor_tensor(d, x, op=nl.multiply)
            b_row = nl.load(B[s : s + 1, 0:seq])
            drive = nisa.tensor_tensor(du, b_row.broadcast_to((P, seq)), op=nl.multiply)
            h = nisa.tensor_tensor_scan(decay, drive, initial=0.0, op0=np.multiply, op1=np.add)
            c_row = nl.load(C[s : s + 1, 0:seq])
            y = nisa.tensor_tensor(h, c_row.broadcast_to((P, seq)), op=nl.multiply)
            acc += y
        nl.store(out[c0 : c0 + P, 0:seq], value=acc)
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C):
    """v2: loops reordered so delta, u (and delta*u) are loaded/computed once per channel tile;
    exp(delta*A) fused into one activation with A as its per-partition scale."""
    channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ct in nl.affine_range(channels // P):
        c0 = ct * P
        d = nl.load(delta[c0 : c0 + P, 0:seq])
        x = nl.load(u[c0 : c0 + P, 0:seq])
        a_all = nl.load(A[c0 : c0 + P, 0:states])
        du = nisa.tensor_tensor(d, x, op=nl.multiply)
        acc = nl.zeros((P, seq), dtype=nl.float32)
        for s in nl.affine_range(states):
            decay = nisa.activation(op=nl.exp, data=d, scale=a_all[:, s : s + 1])
            b_row = nl.load(B[s : s + 1, 0:seq])
            drive = nisa.tensor_tensor(du, b_row.broadcast_to((P, seq)), op=nl.multiply)
            h = nisa.tensor_tensor_scan(decay, drive, initial=0.0, op0=np.multiply, op1=np.add)
            c_row = nl.load(C[s : s + 1, 0:seq])
            y = nisa.tensor_tensor(h, c_row.broadcast_to((P, seq)), op=nl.multiply)
            acc += y
        nl.store(out[c0 : c0 + P, 0:seq], value=acc)
    return out


@nki.jit
def mamba_v2_du_per_state(delta, u, A, B, C):
    """v2 as the tutorial's own source writes it (nki-samples, fused_mamba/mamba_nki_kernels.py):
    delta*u is recomputed in every state iteration, so u stays live across the whole state loop
    (one [128, seq] tile more than `mamba_v2`, and one more tensor_tensor per state). Whether the
    compiler hoists that loop-invariant multiply is not public, and the published figures
    disagree: the 1.61 ms at seq_len 512 (Vector 99.63%: about 7 N Vector cycles per state)
    fits `mamba_v2` (this one: +34%); the spill onset (7168, not 6144) fits both (`mamba_v2`
    since the next state's first tile is held a step ahead, ModelOptions.overlap_iterations).
    benchmarks/spill_study.py prints both."""
    channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ct in nl.affine_range(channels // P):
        c0 = ct * P
        acc = nl.zeros((P, seq), dtype=nl.float32)
        d = nl.load(delta[c0 : c0 + P, 0:seq])
        x = nl.load(u[c0 : c0 + P, 0:seq])
        for s in nl.affine_range(states):
            a = nl.load(A[c0 : c0 + P, s : s + 1])
            decay = nisa.activation(op=nl.exp, data=d, scale=a)
            b_row = nl.load(B[s : s + 1, 0:seq])
            du = nisa.tensor_tensor(d, x, op=nl.multiply)
            drive = nisa.tensor_tensor(du, b_row.broadcast_to((P, seq)), op=nl.multiply)
            h = nisa.tensor_tensor_scan(decay, drive, initial=0.0, op0=np.multiply, op1=np.add)
            c_row = nl.load(C[s : s + 1, 0:seq])
            y = nisa.tensor_tensor(h, c_row.broadcast_to((P, seq)), op=nl.multiply)
            acc += y
        nl.store(out[c0 : c0 + P, 0:seq], value=acc)
    return out


@nki.jit
def mamba_v3(delta, u, A, B, C):
    """v3: v2 with the sequence tiled by 512 (a sequential loop carrying each state's last h),
    so the working set stays small."""
    channels, seq = delta.shape
    states = A.shape[1]
    T = 512
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ct in nl.affine_range(channels // P):
        c0 = ct * P
        a_all = nl.load(A[c0 : c0 + P, 0:states])
        carry = nl.zeros((P, states), dtype=nl.float32)
        for t in nl.sequential_range(seq // T):
            t0 = t * T
            d = nl.load(delta[c0 : c0 + P, t0 : t0 + T])
            x = nl.load(u[c0 : c0 + P, t0 : t0 + T])
            du = nisa.tensor_tensor(d, x, op=nl.multiply)
            acc = nl.zeros((P, T), dtype=nl.float32)
            for s in nl.affine_range(states):
                decay = nisa.activation(op=nl.exp, data=d, scale=a_all[:, s : s + 1])
                b_row = nl.load(B[s : s + 1, t0 : t0 + T])
                drive = nisa.tensor_tensor(du, b_row.broadcast_to((P, T)), op=nl.multiply)
                h = nisa.tensor_tensor_scan(
                    decay, drive, initial=carry[:, s : s + 1], op0=np.multiply, op1=np.add
                )
                carry[:, s : s + 1] = nl.copy(h[:, T - 1 : T])
                c_row = nl.load(C[s : s + 1, t0 : t0 + T])
                y = nisa.tensor_tensor(h, c_row.broadcast_to((P, T)), op=nl.multiply)
                acc += y
            nl.store(out[c0 : c0 + P, t0 : t0 + T], value=acc)
    return out
