"""Non-causal grouped-query attention over 4096 tokens (16 query heads, 8 key/value heads, head
size 128), in the published NKIBench task form. The suite's kernel (nkibench/gqa_full/kernel.py)
takes q and k head-dim-major."""

import numpy as np

BATCH, TOKENS, Q_HEADS, KV_HEADS, HEAD = 1, 4096, 16, 8, 128


def get_inputs():
    q = np.random.normal(0.0, 1.0, size=(BATCH, Q_HEADS, TOKENS, HEAD)).astype(np.float32)
    k = np.random.normal(0.0, 1.0, size=(BATCH, KV_HEADS, TOKENS, HEAD)).astype(np.float32)
    v = np.random.normal(0.0, 1.0, size=(BATCH, KV_HEADS, TOKENS, HEAD)).astype(np.float32)
    return [q, k, v]


def forward(q, k, v):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    k = np.repeat(k, Q_HEADS // KV_HEADS, axis=1)
    v = np.repeat(v, Q_HEADS // KV_HEADS, axis=1)
    scores = q @ np.swapaxes(k, 2, 3) / np.sqrt(HEAD)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True) @ v).astype(np.float32)


def transform_to_nki_inputs(inputs):
    q, k, v = inputs
    return [np.ascontiguousarray(np.swapaxes(q, 2, 3)), np.ascontiguousarray(np.swapaxes(k, 2, 3)), v]


def transform_nki_outputs(k_res, ref):
    outputs = k_res if isinstance(k_res, tuple) else (k_res,)
    return [np.reshape(out, ref.shape) for out in outputs]
