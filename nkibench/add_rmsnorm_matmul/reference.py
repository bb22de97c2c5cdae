"""NKIBench add_rmsnorm_matmul: rmsnorm(x + residual) * gamma @ w, fp32.

x, residual [M, K]; gamma [K]; w [K, N]; out [M, N]."""

import numpy as np

EPS = 1e-6
SHAPES = {"full": {"M": 4096, "N": 2048, "K": 1024}, "small": {"M": 256, "N": 1024, "K": 256}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    x = np.random.randn(s["M"], s["K"]).astype(np.float32)
    residual = np.random.randn(s["M"], s["K"]).astype(np.float32)
    gamma = np.random.uniform(0.5, 1.5, size=(s["K"],)).astype(np.float32)
    w = np.random.randn(s["K"], s["N"]).astype(np.float32)
    return [x, residual, gamma, w]


def forward(x, residual, gamma, w) -> np.ndarray:
    h = x.astype(np.float64) + residual.astype(np.float64)
    normed = h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS) * gamma.astype(np.float64)
    return (normed @ w.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, residual, gamma, w = inputs
    return [x, residual, gamma.reshape(1, -1), w]  # gamma as a [1, K] row


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x, residual, gamma, w) -> dict:
    m, k = x.shape
    n = w.shape[1]
    return {
        "matmul_flops": 2.0 * m * n * k,
        "vector_flops": 6.0 * m * k,
        "hbm_bytes": 4.0 * (2 * m * k + k * n + k + m * n),
    }
