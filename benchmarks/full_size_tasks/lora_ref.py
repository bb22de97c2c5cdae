"""LoRA x @ w + (x @ a) @ b at M=4096, N=12288, K=5120, rank 128, in the published NKIBench
task form. The suite's kernel (nkibench/lora/kernel.py) takes x transposed."""

import numpy as np

M, N, K, RANK = 4096, 12288, 5120, 128


def get_inputs():
    x = np.random.normal(0.0, 1.0, size=(M, K)).astype(np.float32)
    w = (np.random.normal(0.0, 1.0, size=(K, N)) / np.sqrt(K)).astype(np.float32)
    a = (np.random.normal(0.0, 1.0, size=(K, RANK)) / np.sqrt(K)).astype(np.float32)
    b = (np.random.normal(0.0, 1.0, size=(RANK, N)) / np.sqrt(RANK)).astype(np.float32)
    return [x, w, a, b]


def forward(x, w, a, b):
    x, w, a, b = (t.astype(np.float64) for t in (x, w, a, b))
    return (x @ w + (x @ a) @ b).astype(np.float32)


def transform_to_nki_inputs(inputs):
    x, w, a, b = inputs
    return [np.ascontiguousarray(x.T), w, a, b]


def transform_nki_outputs(k_res, ref):
    outputs = k_res if isinstance(k_res, tuple) else (k_res,)
    return [np.reshape(out, ref.shape) for out in outputs]
