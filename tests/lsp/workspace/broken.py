"""A kernel that breaks an NKI rule: a tile spans 256 partitions (the limit is 128)."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[256,64]
@nki.jit
def too_many_partitions(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nl.store(out, value=tile)
    return out
