import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


# accelopt: inputs a=float32[512,128] b=float32[128,512]
@nki.jit
def dma_transpose_kernel(a, b):
    """out = a @ b for a [M, 128]: each row block of a arrives transposed by a transposing load."""
    M, _ = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    w = nl.load(b[0:128, 0:N])
    for m in nl.affine_range(M // 128):
        at = nl.load_transpose2d(a[m * 128 : (m + 1) * 128, 0:128])
        p = nisa.nc_matmul(at, w)
        nl.store(out[m * 128 : (m + 1) * 128, 0:N], value=p)
    return out
