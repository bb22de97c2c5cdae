import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rowsum_kernel(x):
    """out[r] = sum_c (3 * x[r, c] + 1); the running sum makes the column loop sequential."""
    M, N = x.shape
    out = nl.ndarray((M, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // 128):
        acc = nl.zeros((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(N // 256):
            t = nl.load(x[i * 128 : (i + 1) * 128, j * 256 : (j + 1) * 256])
            u = nl.add(nl.multiply(t, 3.0), 1.0)
            acc[...] = nl.add(acc, nl.sum(u, axis=1, keepdims=True))
        nl.store(out[i * 128 : (i + 1) * 128, 0:1], value=acc)
    return out
