"""One bf16 tile loaded from HBM into SBUF and stored back, the transfers the DMA overview
profiles on a trn2 NeuronCore ("Introduction to Direct Memory Access (DMA) with NKI"): its
first example moves A[4, 4096], its second A[128, 128]."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def dma_single(a):
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.load(a[0:rows, 0:cols])
    nl.store(out[0:rows, 0:cols], value=tile)
    return out
