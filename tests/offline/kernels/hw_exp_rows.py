import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: inputs x=float32[512,2048]
@nki.jit
def exp_rows_kernel(x):
    """out = exp(x) row block by row block; the input tile is declared once, before the loop."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.sequential_range(rows // 128):
        tile[:, :] = nl.load(x[i * 128 : (i + 1) * 128, :])
        y = nl.exp(tile)
        nl.store(out[i * 128 : (i + 1) * 128, :], value=y)
    return out
