"""Plain HBM -> SBUF -> HBM streams in [128, F] fp32 tiles: every load and store moves F * 4
bytes per partition, for the DMA bandwidth guide's payload curve.

`dma_stream` tiles a [rows, F] tensor by row blocks, so the 128 rows of a tile lie back to back
in HBM (each DMA engine's 8 partitions form one contiguous packet, the DMA overview's A[128, 128]
example); `dma_stream_columns` takes tile j of a [128, tiles, F] tensor as x[:, j, :], so each partition's
F bytes are a chunk of their own, apart from the next partition's (the guide's "bytes per
partition")."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def dma_stream(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        tile = nl.load(x[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=tile)
    return out


@nki.jit
def dma_stream_columns(x):
    parts, tiles, width = x.shape
    out = nl.ndarray((parts, tiles, width), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(tiles):
        tile = nl.load(x[0:128, j, 0:width])
        nl.store(out[0:128, j, 0:width], value=tile)
    return out
