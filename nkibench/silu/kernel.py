"""NKIBench silu baseline (hand-written): one 128 x 1024 tile at a time, sigmoid on the Scalar
Engine, the product with the input on the Vector Engine."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_P = 128
TILE_F = 1024


# accelopt: reference reference.py
@nki.jit
def silu_kernel(x):
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // TILE_P):
        for j in nl.affine_range(n // TILE_F):
            rows = slice(i * TILE_P, (i + 1) * TILE_P)
            cols = slice(j * TILE_F, (j + 1) * TILE_F)
            x_tile = nl.load(x[rows, cols])
            y_tile = nl.multiply(x_tile, nl.sigmoid(x_tile))
            nl.store(out[rows, cols], value=y_tile)
    return out
