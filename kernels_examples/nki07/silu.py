"""SiLU (x * sigmoid(x)) in the nki.* language (NKI 0.7): the same tiling as ../silu.py, with
every instruction writing a destination tile it is given (destination passing) and DMA through
`nisa.dma_copy`."""

import nki.isa as nisa
import nki.language as nl

import nki

TILE_ROWS = 128  # one row per SBUF partition
TILE_COLS = 512  # elements per partition in each tile


# accelopt: reference ../silu_ref.py
@nki.jit
def silu_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)

    for i in range(rows // TILE_ROWS):
        for j in range(cols // TILE_COLS):
            r = slice(i * TILE_ROWS, (i + 1) * TILE_ROWS)
            c = slice(j * TILE_COLS, (j + 1) * TILE_COLS)
            tile = nl.ndarray((TILE_ROWS, TILE_COLS), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[r, c])
            gate = nl.ndarray((TILE_ROWS, TILE_COLS), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=gate, op=nl.sigmoid, data=tile)
            result = nl.ndarray((TILE_ROWS, TILE_COLS), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=result, data1=tile, data2=gate, op=nl.multiply)
            nisa.dma_copy(dst=out[r, c], src=result)

    return out
