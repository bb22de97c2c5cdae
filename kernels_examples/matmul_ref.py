"""Reference for matmul.py: C = A @ B, fp32 inputs, fp32 accumulation."""

import numpy as np

# (M, K, N): M and K multiples of 128, N a multiple of 512
SHAPES = {"full": (512, 512, 1024), "small": (256, 256, 1024)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    m, k, n = SHAPES[size]
    a = np.random.randn(m, k).astype(np.float32)
    b = np.random.randn(k, n).astype(np.float32)
    return [a, b]


def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(a: np.ndarray, b: np.ndarray) -> dict:
    m, k = a.shape
    n = b.shape[1]
    return {"matmul_flops": 2.0 * m * n * k, "vector_flops": 0.0, "hbm_bytes": 4.0 * (m * k + k * n + m * n)}
