import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def two_outputs_kernel(x, y):
    """p = exp(x) and q = 3 * y, two independent pieces of work in one loop."""
    M, N = x.shape
    p = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    q = nl.ndarray((M, N), dtype=y.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        a = nl.load(x[i * 128 : (i + 1) * 128, :])
        e = nl.exp(a)
        nl.store(p[i * 128 : (i + 1) * 128, :], value=e)
        b = nl.load(y[i * 128 : (i + 1) * 128, :])
        e = nl.multiply(b, 3.0)
        nl.store(q[i * 128 : (i + 1) * 128, :], value=e)
    return p, q
