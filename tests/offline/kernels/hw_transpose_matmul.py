import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def transpose_matmul_kernel(a, b, c):
    """out1 = a @ b and out2 = a @ c for a [M, 128]; a is transposed on the Tensor Engine."""
    M, _ = a.shape
    _, N = b.shape
    out1 = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        at = nl.load(a[m * 128 : (m + 1) * 128, 0:128])
        for n in nl.affine_range(N // 512):
            t1 = nisa.nc_transpose(at)
            s1 = nl.copy(t1)
            rb = nl.load(b[0:128, n * 512 : (n + 1) * 512])
            p1 = nisa.nc_matmul(s1, rb)
            y1 = nl.copy(p1)
            nl.store(out1[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=y1)
            t2 = nisa.nc_transpose(at)
            s2 = nl.copy(t2)
            rc = nl.load(c[0:128, n * 512 : (n + 1) * 512])
            p2 = nisa.nc_matmul(s2, rc)
            y2 = nl.copy(p2)
            nl.store(out2[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=y2)
    return out1, out2
