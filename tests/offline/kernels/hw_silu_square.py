import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def silu_square_kernel(x):
    """out = x * sigmoid(x); square 128 x 128 tiles: the width is also the partition width."""
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(M // 128):
        for j in range(N // 128):
            t = nl.load(x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128])
            y = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
            y[...] = nl.multiply(t, nl.sigmoid(t))
            nl.store(out[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128], value=y)
    return out
