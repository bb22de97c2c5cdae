"""NKIBench gqa_full: non-causal grouped-query attention, softmax(q k^T / sqrt(D)) v, fp32.

q [B, QH, N, D]; k, v [B, KH, N, D]; query head h reads key/value head h // (QH / KH);
out [B, QH, N, D]. The kernel receives q and k head-dim-major ([B, H, D, N])."""

import numpy as np

SHAPES = {
    "full": {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128},
    "small": {"B": 1, "N": 1024, "QH": 2, "KH": 1, "D": 128},
}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    q = np.random.randn(s["B"], s["QH"], s["N"], s["D"]).astype(np.float32)
    k = np.random.randn(s["B"], s["KH"], s["N"], s["D"]).astype(np.float32)
    v = np.random.randn(s["B"], s["KH"], s["N"], s["D"]).astype(np.float32)
    return [q, k, v]


def forward(q, k, v) -> np.ndarray:
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return ((e / e.sum(axis=-1, keepdims=True)) @ v).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    q, k, v = inputs
    return [np.ascontiguousarray(q.transpose(0, 1, 3, 2)), np.ascontiguousarray(k.transpose(0, 1, 3, 2)), v]


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(q, k, v) -> dict:
    b, qh, n, d = q.shape
    kh = k.shape[1]
    return {
        "matmul_flops": 4.0 * b * qh * n * n * d,
        "vector_flops": 5.0 * b * qh * n * n,
        "hbm_bytes": 4.0 * (2 * b * qh * n * d + 2 * b * kh * n * d),
    }
