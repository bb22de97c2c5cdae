"""Batched matmul + softmax, softmax(A[b] @ B[b]) with A [16, 4096, 64], B [16, 64, 4096] (a
1 GiB fp32 output), in the published NKIBench task form. The suite's kernel
(nkibench/bmm_softmax/kernel.py) takes A transposed per batch."""

import numpy as np

BATCH, M, K, N = 16, 4096, 64, 4096


def get_inputs():
    a = np.random.normal(0.0, 1.0, size=(BATCH, M, K)).astype(np.float32)
    b = np.random.normal(0.0, 1.0, size=(BATCH, K, N)).astype(np.float32)
    return [a, b]


def forward(a, b):
    scores = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores.astype(np.float32)


def transform_to_nki_inputs(inputs):
    a, b = inputs
    return [np.ascontiguousarray(np.swapaxes(a, 1, 2)), b]


def transform_nki_outputs(k_res, ref):
    outputs = k_res if isinstance(k_res, tuple) else (k_res,)
    return [np.reshape(out, ref.shape) for out in outputs]
