"""NKIBench matmul: C = A @ B with A [M, K], B [K, N], fp32.

The kernel receives A already transposed ([K, M], contraction on the partition axis), the
layout the Tensor Engine's stationary operand wants; `transform_to_nki_inputs` makes it.
"""

import numpy as np

SHAPES = {"full": {"M": 4096, "N": 12288, "K": 5120}, "small": {"M": 256, "N": 1024, "K": 256}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    a = np.random.randn(s["M"], s["K"]).astype(np.float32)
    b = np.random.randn(s["K"], s["N"]).astype(np.float32)
    return [a, b]


def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    a, b = inputs
    return [np.ascontiguousarray(a.T), b]


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(a: np.ndarray, b: np.ndarray) -> dict:
    m, k = a.shape
    n = b.shape[1]
    return {"matmul_flops": 2.0 * m * n * k, "vector_flops": 0.0, "hbm_bytes": 4.0 * (m * k + k * n + m * n)}
