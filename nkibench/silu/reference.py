"""NKIBench silu: y = x * sigmoid(x) over [M, N], fp32."""

import numpy as np

SHAPES = {"full": {"M": 4096, "N": 7168}, "small": {"M": 256, "N": 2048}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    return [np.random.randn(s["M"], s["N"]).astype(np.float32)]


def forward(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-x64))).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x: np.ndarray) -> dict:
    m, n = x.shape
    return {"matmul_flops": 0.0, "vector_flops": 3.0 * m * n, "hbm_bytes": 8.0 * m * n}
