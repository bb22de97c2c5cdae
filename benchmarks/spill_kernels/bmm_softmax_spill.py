"""Study kernel (ours): per batch, every score block of [M, N] is built first, then the softmax
runs over the blocks in a second loop. The blocks of one batch (M/128 x 16 KiB per partition)
exceed SBUF, so the compiler must spill."""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

TM = 128
TN = 512


@nki.jit
def bmm_softmax_spill(a_t, b):
    batch, k, m = a_t.shape
    n = b.shape[2]
    out = nl.ndarray((batch, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for bi in nl.affine_range(batch):
        scores = nl.ndarray((m // TM, nl.par_dim(TM), n), dtype=nl.float32, buffer=nl.sbuf)
        for mi in nl.affine_range(m // TM):
            lhs = nl.load(a_t[bi, 0:k, mi * TM:(mi + 1) * TM])
            for ni in nl.affine_range(n // TN):
                rhs = nl.load(b[bi, 0:k, ni * TN:(ni + 1) * TN])
                scores[mi, :, ni * TN:(ni + 1) * TN] = nl.copy(nisa.nc_matmul(lhs, rhs))
        for mi in nl.affine_range(m // TM):
            row_max = nisa.tensor_reduce(np.max, scores[mi], axis=(1,), keepdims=True)
            neg_max = nl.multiply(row_max, -1.0)
            probs = nisa.activation(op=nl.exp, data=scores[mi], bias=neg_max)
            row_sum = nl.sum(probs, axis=1, keepdims=True)
            inv_sum = nl.reciprocal(row_sum)
            result = nl.multiply(probs, inv_sum)
            nl.store(out[bi, mi * TM:(mi + 1) * TM, :], value=result)
    return out
