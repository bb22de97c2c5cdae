"""NKIBench rmsnorm_matmul: (x / sqrt(mean(x^2, axis=1) + eps)) @ w, x [M, K], w [K, N], fp32."""

import numpy as np

EPS = 1e-6
SHAPES = {"full": {"M": 4096, "N": 2048, "K": 1024}, "small": {"M": 256, "N": 1024, "K": 256}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    x = np.random.randn(s["M"], s["K"]).astype(np.float32)
    w = np.random.randn(s["K"], s["N"]).astype(np.float32)
    return [x, w]


def forward(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + EPS)
    return (normed @ w.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x: np.ndarray, w: np.ndarray) -> dict:
    m, k = x.shape
    n = w.shape[1]
    return {
        "matmul_flops": 2.0 * m * n * k,
        "vector_flops": 4.0 * m * k,
        "hbm_bytes": 4.0 * (m * k + k * n + m * n),
    }
