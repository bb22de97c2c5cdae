import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def axpy_kernel(x, y):
    """out = 2 * x + y, one row block at a time."""
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        xt = nl.load(x[i * 128 : (i + 1) * 128, 0:N])
        yt = nl.load(y[i * 128 : (i + 1) * 128, 0:N])
        scaled = nl.multiply(xt, 2.0)
        nl.store(out[i * 128 : (i + 1) * 128, 0:N], value=nl.add(scaled, yt))
    return out
