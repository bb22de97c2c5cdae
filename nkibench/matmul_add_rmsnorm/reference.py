"""NKIBench matmul_add_rmsnorm: rmsnorm(x @ w + residual) * gamma, fp32.

x [M, K]; w [K, N]; residual [M, N]; gamma [N]; out [M, N]. The kernel receives x transposed
([K, M]) and gamma as a [1, N] row."""

import numpy as np

EPS = 1e-6
SHAPES = {"full": {"M": 4096, "N": 2048, "K": 2048}, "small": {"M": 256, "N": 1024, "K": 256}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    x = np.random.randn(s["M"], s["K"]).astype(np.float32)
    w = np.random.randn(s["K"], s["N"]).astype(np.float32)
    residual = np.random.randn(s["M"], s["N"]).astype(np.float32)
    gamma = np.random.uniform(0.5, 1.5, size=(s["N"],)).astype(np.float32)
    return [x, w, residual, gamma]


def forward(x, w, residual, gamma) -> np.ndarray:
    h = x.astype(np.float64) @ w.astype(np.float64) + residual.astype(np.float64)
    return (h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS) * gamma.astype(np.float64)).astype(
        np.float32
    )


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, w, residual, gamma = inputs
    return [np.ascontiguousarray(x.T), w, residual, gamma.reshape(1, -1)]


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x, w, residual, gamma) -> dict:
    m, k = x.shape
    n = w.shape[1]
    return {
        "matmul_flops": 2.0 * m * n * k,
        "vector_flops": 6.0 * m * n,
        "hbm_bytes": 4.0 * (m * k + n * k + 2 * m * n + n),
    }
