"""SiLU (x * sigmoid(x)) over a 2-D fp32 tensor: a straightforward first attempt.

Each 128 x 512 tile is loaded, its sigmoid taken on the Scalar Engine, multiplied by the input
on the Vector Engine and stored. Small tiles keep the example easy to read; they also leave
plenty of room for the optimizer (bigger transfers, a fused activation, fewer instructions).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_ROWS = 128  # one row per SBUF partition
TILE_COLS = 512  # elements per partition in each tile


# accelopt: reference silu_ref.py
@nki.jit
def silu_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)

    for i in nl.affine_range(rows // TILE_ROWS):
        for j in nl.affine_range(cols // TILE_COLS):
            r0 = i * TILE_ROWS
            c0 = j * TILE_COLS
            tile = nl.load(x[r0 : r0 + TILE_ROWS, c0 : c0 + TILE_COLS])
            gate = nl.sigmoid(tile)
            result = nl.multiply(tile, gate)
            nl.store(out[r0 : r0 + TILE_ROWS, c0 : c0 + TILE_COLS], value=result)

    return out
