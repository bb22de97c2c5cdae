"""bf16 matmul out[M, N] = lhsT.T @ rhs with lhsT [K, M] and rhs [K, N], four versions of
increasing data reuse (NKI_NOTES §7)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    """v1: every [128, 128] x [128, 512] step loads both operand tiles."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                b = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                acc += nisa.nc_matmul(a, b)
            res = nl.copy(acc, dtype=lhsT.dtype)
            nl.store(out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=res)
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """v2: the lhsT column strip is loaded once per m, the rhs strip once per (m, n)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // 128
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        a_strip = nl.ndarray((KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            a_strip[k] = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
        for n in nl.affine_range(N // 512):
            b_strip = nl.ndarray((KT, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                b_strip[k] = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                acc += nisa.nc_matmul(a_strip[k], b_strip[k])
            res = nl.copy(acc, dtype=lhsT.dtype)
            nl.store(out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=res)
    return out


@nki.jit
def matmul_block2x2(lhsT, rhs):
    """v3: 2 x 2 output tiles per block share each loaded operand tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // 256):
        for nb in nl.affine_range(N // 1024):
            acc = nl.zeros((2, 2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.ndarray((2, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((2, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
                for i in nl.affine_range(2):
                    a[i] = nl.load(lhsT[k * 128 : (k + 1) * 128, (2 * mb + i) * 128 : (2 * mb + i + 1) * 128])
                for j in nl.affine_range(2):
                    b[j] = nl.load(rhs[k * 128 : (k + 1) * 128, (2 * nb + j) * 512 : (2 * nb + j + 1) * 512])
                for i in nl.affine_range(2):
                    for j in nl.affine_range(2):
                        acc[i, j] += nisa.nc_matmul(a[i], b[j])
            for i in nl.affine_range(2):
                for j in nl.affine_range(2):
                    res = nl.copy(acc[i, j], dtype=lhsT.dtype)
                    row = (2 * mb + i) * 128
                    col = (2 * nb + j) * 512
                    nl.store(out[row : row + 128, col : col + 512], value=res)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs):
    """v4: blocks of 16 M-tiles x 2 N-tiles x 8 K-tiles; K blocks in a sequential_range with the
    partial sums accumulated in SBUF."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN, BK = 16, 2, 8  # tiles per block
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (128 * BM)):
        for nb in nl.affine_range(N // (512 * BN)):
            result = nl.zeros((BM, BN, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(K // (128 * BK)):
                a = nl.ndarray((BK, nl.par_dim(128), 128 * BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((BK, nl.par_dim(128), 512 * BN), dtype=rhs.dtype, buffer=nl.sbuf)
                for kt in nl.affine_range(BK):
                    k0 = (kb * BK + kt) * 128
                    a[kt] = nl.load(lhsT[k0 : k0 + 128, mb * 128 * BM : (mb + 1) * 128 * BM])
                    b[kt] = nl.load(rhs[k0 : k0 + 128, nb * 512 * BN : (nb + 1) * 512 * BN])
                for mt in nl.affine_range(BM):
                    for nt in nl.affine_range(BN):
                        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(BK):
                            acc += nisa.nc_matmul(
                                a[kt, :, mt * 128 : (mt + 1) * 128], b[kt, :, nt * 512 : (nt + 1) * 512]
                            )
                        result[mt, nt] = nl.add(result[mt, nt], acc)
            for mt in nl.affine_range(BM):
                for nt in nl.affine_range(BN):
                    res = nl.copy(result[mt, nt], dtype=lhsT.dtype)
                    row = (mb * BM + mt) * 128
                    col = (nb * BN + nt) * 512
                    nl.store(out[row : row + 128, col : col + 512], value=res)
    return out
