"""NKIBench bmm_softmax: softmax(A[b] @ B[b], axis=-1), A [B, M, K], B [B, K, N], K = 64, fp32.

The kernel receives A transposed per batch ([B, K, M])."""

import numpy as np

SHAPES = {"full": {"B": 16, "K": 64, "M": 4096, "N": 4096}, "small": {"B": 2, "K": 64, "M": 256, "N": 1024}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    a = np.random.randn(s["B"], s["M"], s["K"]).astype(np.float32)
    b = np.random.randn(s["B"], s["K"], s["N"]).astype(np.float32)
    return [a, b]


def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    scores = np.matmul(a.astype(np.float64), b.astype(np.float64))
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    a, b = inputs
    return [np.ascontiguousarray(a.transpose(0, 2, 1)), b]


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(a: np.ndarray, b: np.ndarray) -> dict:
    batch, m, k = a.shape
    n = b.shape[2]
    return {
        "matmul_flops": 2.0 * batch * m * n * k,
        "vector_flops": 5.0 * batch * m * n,
        "hbm_bytes": 4.0 * batch * (m * n + n * k + m * k),
    }
