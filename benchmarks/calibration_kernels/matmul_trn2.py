"""The loop orders of the last two versions of the trn2 kernel-optimization tutorial
("Introduction to NKI Kernel Optimization"), out[M, N] = lhsT.T @ rhs, in our own words. Its
first two versions have the structures of `matmul.py`'s matmul_tiled and matmul_hoisted.

- v3: 2 x 2 blocks of output tiles; the lhsT column strips of an M block are loaded once per M
  block, the rhs strips of an N block once per (M block, N block);
- v4: N blocks outermost with the partial sums of the whole M range in SBUF; K blocks in a
  sequential_range, the rhs block loaded once per K block and the lhsT block once per
  (K block, M block) inside it, so one M block's loads overlap the other's matmuls.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_strips_2x2(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // 128
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // 256):
        a = nl.ndarray((2, KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(2):
            for k in nl.affine_range(KT):
                a[i, k] = nl.load(lhsT[k * 128 : (k + 1) * 128, (2 * mb + i) * 128 : (2 * mb + i + 1) * 128])
        for nb in nl.affine_range(N // 1024):
            b = nl.ndarray((2, KT, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(2):
                for k in nl.affine_range(KT):
                    b[j, k] = nl.load(rhs[k * 128 : (k + 1) * 128, (2 * nb + j) * 512 : (2 * nb + j + 1) * 512])
            for i in nl.affine_range(2):
                for j in nl.affine_range(2):
                    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(KT):
                        acc += nisa.nc_matmul(a[i, k], b[j, k])
                    res = nl.copy(acc, dtype=lhsT.dtype)
                    row = (2 * mb + i) * 128
                    col = (2 * nb + j) * 512
                    nl.store(out[row : row + 128, col : col + 512], value=res)
    return out


@nki.jit
def matmul_blocked_kmn(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN, BK = 16, 2, 8  # tiles per block
    MB = M // (128 * BM)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // (512 * BN)):
        result = nl.zeros((MB, BM, BN, nl.par_dim(128), 512), dtype=lhsT.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(K // (128 * BK)):
            b = nl.ndarray((BK, nl.par_dim(128), 512 * BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(BK):
                k0 = (kb * BK + kt) * 128
                b[kt] = nl.load(rhs[k0 : k0 + 128, nb * 512 * BN : (nb + 1) * 512 * BN])
            for mb in nl.affine_range(MB):
                a = nl.ndarray((BK, nl.par_dim(128), 128 * BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for kt in nl.affine_range(BK):
                    k0 = (kb * BK + kt) * 128
                    a[kt] = nl.load(lhsT[k0 : k0 + 128, mb * 128 * BM : (mb + 1) * 128 * BM])
                for nt in nl.affine_range(BN):
                    for mt in nl.affine_range(BM):
                        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(BK):
                            acc += nisa.nc_matmul(
                                a[kt, :, mt * 128 : (mt + 1) * 128], b[kt, :, nt * 512 : (nt + 1) * 512]
                            )
                        result[mb, mt, nt] = nl.add(result[mb, mt, nt], acc)
        for mb in nl.affine_range(MB):
            for mt in nl.affine_range(BM):
                packed = nl.ndarray((nl.par_dim(128), 512 * BN), dtype=nl.float32, buffer=nl.sbuf)
                for nt in nl.affine_range(BN):
                    packed[:, nt * 512 : (nt + 1) * 512] = nl.copy(result[mb, mt, nt])
                row = (mb * BM + mt) * 128
                nl.store(out[row : row + 128, nb * 512 * BN : (nb + 1) * 512 * BN], value=packed)
    return out
