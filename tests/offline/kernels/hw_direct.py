import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim


@nki.jit
def direct_kernel(a):
    """out = exp(a), hand-written with direct allocation: the loaded tiles share one buffer, and
    another tensor sits 8 KiB above them (room for four 2 KiB tiles, not eight)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((8, par_dim(128), 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    s = nl.ndarray((8, par_dim(128), 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    for i in nl.affine_range(8):
        t[i] = nl.load(a[i * 128 : (i + 1) * 128, :])
        s[i] = nl.exp(t[i])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=s[i])
    return out
