"""Row softmax of a 2-D fp32 tensor, streaming each row block through SBUF in column chunks.

Rows sit on partitions; each row block makes three passes over its columns:
  1. the running row maximum, folded across chunks with `nl.loop_reduce`;
  2. the running sum of exp(x - max), folded the same way;
  3. exp(x - max) / sum, stored.
exp is recomputed in pass 3 instead of being kept, which keeps SBUF use to one chunk at a time
(an optimizer may trade that memory back for fewer loads and activations).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

ROWS = 128  # rows per block, one per partition
CHUNK = 512  # columns per chunk


# accelopt: reference softmax_ref.py
@nki.jit
def softmax_kernel(x):
    n_rows, n_cols = x.shape
    out = nl.ndarray((n_rows, n_cols), dtype=nl.float32, buffer=nl.shared_hbm)
    n_chunks = n_cols // CHUNK

    for r in nl.affine_range(n_rows // ROWS):
        r0 = r * ROWS

        # Pass 1: row maximum. The destination starts at the lowest fp32 so that it is right
        # whether the first iteration initialises it or is combined with it.
        row_max = nl.full((ROWS, 1), fill_value=-3.0e38, dtype=nl.float32)
        for c in nl.affine_range(n_chunks):
            tile = nl.load(x[r0 : r0 + ROWS, c * CHUNK : (c + 1) * CHUNK])
            chunk_max = nl.max(tile, axis=1, keepdims=True)
            row_max = nl.loop_reduce(chunk_max, op=np.maximum, loop_indices=[c], dtype=nl.float32)
        neg_max = nisa.tensor_scalar(row_max, np.multiply, -1.0)

        # Pass 2: sum of exp(x - max).
        row_sum = nl.zeros((ROWS, 1), dtype=nl.float32)
        for c in nl.affine_range(n_chunks):
            tile = nl.load(x[r0 : r0 + ROWS, c * CHUNK : (c + 1) * CHUNK])
            shifted_exp = nisa.activation(op=nl.exp, data=tile, bias=neg_max)
            chunk_sum = nl.sum(shifted_exp, axis=1, keepdims=True)
            row_sum = nl.loop_reduce(chunk_sum, op=np.add, loop_indices=[c], dtype=nl.float32)
        inv_sum = nl.reciprocal(row_sum)

        # Pass 3: normalise and store.
        for c in nl.affine_range(n_chunks):
            tile = nl.load(x[r0 : r0 + ROWS, c * CHUNK : (c + 1) * CHUNK])
            shifted_exp = nisa.activation(op=nl.exp, data=tile, bias=neg_max)
            probs = nisa.tensor_scalar(shifted_exp, np.multiply, inv_sum)
            nl.store(out[r0 : r0 + ROWS, c * CHUNK : (c + 1) * CHUNK], value=probs)

    return out
