"""NKIBench bmm_softmax baseline (hand-written).

Per batch and 128-row block: the whole score row block [128, N] is built in SBUF from 512-wide
matmuls (N = 4096 fp32 is 16 KiB per partition), then softmax runs over it: row max, exp with
the negated max as the activation bias, row sum, reciprocal, scale, store."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

TILE_M = 128
TILE_N = 512


# accelopt: reference reference.py
@nki.jit
def bmm_softmax_kernel(a_t, b):
    batch, k, m = a_t.shape
    n = b.shape[2]
    out = nl.ndarray((batch, m, n), dtype=nl.float32, buffer=nl.shared_hbm)

    for bi in nl.affine_range(batch):
        for mi in nl.affine_range(m // TILE_M):
            rows = slice(mi * TILE_M, (mi + 1) * TILE_M)
            lhs = nl.load(a_t[bi, 0:k, rows])
            scores = nl.ndarray((TILE_M, n), dtype=nl.float32, buffer=nl.sbuf)
            for ni in nl.affine_range(n // TILE_N):
                rhs = nl.load(b[bi, 0:k, ni * TILE_N : (ni + 1) * TILE_N])
                scores[:, ni * TILE_N : (ni + 1) * TILE_N] = nl.copy(nisa.nc_matmul(lhs, rhs))

            row_max = nisa.tensor_reduce(np.max, scores, axis=(1,), keepdims=True)
            neg_max = nl.multiply(row_max, -1.0)
            probs = nisa.activation(op=nl.exp, data=scores, bias=neg_max)
            row_sum = nl.sum(probs, axis=1, keepdims=True)
            inv_sum = nl.reciprocal(row_sum)
            result = nl.multiply(probs, inv_sum)
            nl.store(out[bi, rows, :], value=result)
    return out
