"""Row softmax streamed in column chunks, in the nki.* language (NKI 0.7).

Three passes per block of 128 rows, as in ../softmax.py: the running row maximum (started at
`nl.fp32.min`), the sum of exp(x - max) read from the Scalar Engine's reduction registers
(`reduce_cmd=reset_reduce`), then the normalised values.
"""

import nki.isa as nisa
import nki.language as nl

import nki

ROWS = 128  # rows per block, one per partition
CHUNK = 512  # columns per chunk


# accelopt: reference ../softmax_ref.py
@nki.jit
def softmax_kernel(x):
    n_rows, n_cols = x.shape
    out = nl.ndarray((n_rows, n_cols), dtype=nl.float32, buffer=nl.shared_hbm)
    n_chunks = n_cols // CHUNK

    for r in range(n_rows // ROWS):
        rows = slice(r * ROWS, (r + 1) * ROWS)

        row_max = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=row_max, value=nl.fp32.min)
        for c in range(n_chunks):
            tile = nl.ndarray((ROWS, CHUNK), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[rows, c * CHUNK : (c + 1) * CHUNK])
            chunk_max = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=chunk_max, op=nl.maximum, data=tile, axis=1, keepdims=True)
            nisa.tensor_tensor(dst=row_max, data1=row_max, data2=chunk_max, op=nl.maximum)
        neg_max = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_max, data=row_max, op0=nl.multiply, operand0=-1.0)

        row_sum = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=row_sum, value=0.0)
        for c in range(n_chunks):
            tile = nl.ndarray((ROWS, CHUNK), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[rows, c * CHUNK : (c + 1) * CHUNK])
            shifted_exp = nl.ndarray((ROWS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            chunk_sum = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(
                dst=shifted_exp,
                op=nl.exp,
                data=tile,
                bias=neg_max,
                reduce_op=nl.add,
                reduce_res=chunk_sum,
                reduce_cmd=nisa.reduce_cmd.reset_reduce,
            )
            nisa.tensor_tensor(dst=row_sum, data1=row_sum, data2=chunk_sum, op=nl.add)
        inv_sum = nl.ndarray((ROWS, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_sum, data=row_sum)

        for c in range(n_chunks):
            tile = nl.ndarray((ROWS, CHUNK), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[rows, c * CHUNK : (c + 1) * CHUNK])
            shifted_exp = nl.ndarray((ROWS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=shifted_exp, op=nl.exp, data=tile, bias=neg_max)
            probs = nl.ndarray((ROWS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=probs, data=shifted_exp, op0=nl.multiply, operand0=inv_sum)
            nisa.dma_copy(dst=out[rows, c * CHUNK : (c + 1) * CHUNK], src=probs)

    return out
