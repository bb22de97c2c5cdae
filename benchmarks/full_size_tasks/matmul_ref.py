"""fp32 matmul C = A @ B at 4096x5120 @ 5120x12288, in the published NKIBench task form:
shapes fixed here, `get_inputs()` without a size, `transform_nki_outputs` returning the kernel's
outputs only. The suite's kernel (nkibench/matmul/kernel.py) takes A transposed."""

import numpy as np

M, K, N = 4096, 5120, 12288


def get_inputs():
    a = np.random.normal(0.0, 1.0, size=(M, K)).astype(np.float32)
    b = np.random.normal(0.0, 1.0, size=(K, N)).astype(np.float32)
    return [a, b]


def forward(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs):
    a, b = inputs
    return [np.ascontiguousarray(a.T), b]


def transform_nki_outputs(k_res, ref):
    outputs = k_res if isinstance(k_res, tuple) else (k_res,)
    return [np.reshape(out, ref.shape) for out in outputs]
