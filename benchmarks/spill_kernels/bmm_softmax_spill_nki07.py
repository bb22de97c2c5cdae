"""Study kernel (ours), NKI 0.7: per batch every score block [128, N] is built first, then the
softmax runs over the blocks in a second loop; one batch's blocks exceed SBUF."""
import nki.isa as nisa
import nki.language as nl

import nki

TM = 128
TN = 512


@nki.jit
def bmm_softmax_spill07(a_t, b):
    batch, k, m = a_t.shape
    n = b.shape[2]
    out = nl.ndarray((batch, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for bi in nl.affine_range(batch):
        scores = [nl.ndarray((TM, n), dtype=nl.float32, buffer=nl.sbuf) for _ in range(m // TM)]
        for mi in range(m // TM):
            lhs = nl.ndarray((k, TM), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=lhs, src=a_t[bi, 0:k, mi * TM:(mi + 1) * TM])
            for ni in nl.affine_range(n // TN):
                rhs = nl.ndarray((k, TN), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=rhs, src=b[bi, 0:k, ni * TN:(ni + 1) * TN])
                acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)
                nisa.tensor_copy(dst=scores[mi][:, ni * TN:(ni + 1) * TN], src=acc)
        for mi in range(m // TM):
            row_max = nl.ndarray((TM, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=scores[mi], axis=1, keepdims=True)
            neg_max = nl.ndarray((TM, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_max, data=row_max, op0=nl.multiply, operand0=-1.0)
            probs = nl.ndarray((TM, n), dtype=nl.float32, buffer=nl.sbuf)
            row_sum = nl.ndarray((TM, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=probs, op=nl.exp, data=scores[mi], bias=neg_max, reduce_op=nl.add,
                            reduce_res=row_sum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
            inv_sum = nl.ndarray((TM, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv_sum, data=row_sum)
            result = nl.ndarray((TM, n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=result, data=probs, op0=nl.multiply, operand0=inv_sum)
            nisa.dma_copy(dst=out[bi, mi * TM:(mi + 1) * TM, 0:n], src=result)
    return out
