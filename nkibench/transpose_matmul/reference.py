"""NKIBench transpose_matmul: C = A @ B with A given row-major [M, K], so the kernel itself must
bring K onto the partition axis (Tensor Engine transposes); B [K, N]; fp32.

N = 10944 is not a multiple of 512: the baseline masks the last column block.
"""

import numpy as np

SHAPES = {"full": {"M": 4096, "K": 2048, "N": 10944}, "small": {"M": 256, "K": 256, "N": 1000}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    a = np.random.randn(s["M"], s["K"]).astype(np.float32)
    b = np.random.randn(s["K"], s["N"]).astype(np.float32)
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
