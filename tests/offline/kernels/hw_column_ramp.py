import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_COLS = 256  # columns per tile


@nki.jit
def column_ramp_kernel(x):
    """out = x + the first column index of each tile: the offset name is also a value."""
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        for j in nl.affine_range(N // TILE_COLS):
            r0 = i * 128
            c0 = j * TILE_COLS
            t = nl.load(x[r0 : r0 + 128, c0 : c0 + TILE_COLS])
            y = nl.add(t, c0 * 1.0)
            nl.store(out[r0 : r0 + 128, c0 : c0 + TILE_COLS], value=y)
    return out
