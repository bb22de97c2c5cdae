"""Reference for rmsnorm_matmul.py: (x / sqrt(mean(x^2, axis=1) + eps) * gamma) @ w, fp32."""

import numpy as np

EPS = 1e-6
# (M, K, N): M, K multiples of 128, N a multiple of 512
SHAPES = {"full": (512, 512, 1024), "small": (256, 256, 1024)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    m, k, n = SHAPES[size]
    x = np.random.randn(m, k).astype(np.float32)
    gamma = np.random.uniform(0.5, 1.5, size=(k,)).astype(np.float32)
    w = np.random.randn(k, n).astype(np.float32)
    return [x, gamma, w]


def forward(x: np.ndarray, gamma: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + EPS) * gamma.astype(np.float64)
    return (normed @ w.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, gamma, w = inputs
    return [x, gamma.reshape(-1, 1), w]  # gamma as a [K, 1] column: K goes onto partitions


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x: np.ndarray, gamma: np.ndarray, w: np.ndarray) -> dict:
    m, k = x.shape
    n = w.shape[1]
    return {
        "matmul_flops": 2.0 * m * n * k,
        "vector_flops": 4.0 * m * k,
        "hbm_bytes": 4.0 * (m * k + k + k * n + m * n),
    }
