"""Reference for silu.py: y = x * sigmoid(x), fp32."""

import numpy as np

# rows, cols; both multiples of the kernel's 128 x 512 tile
SHAPES = {"full": (512, 2048), "small": (256, 1024)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    rows, cols = SHAPES[size]
    return [np.random.randn(rows, cols).astype(np.float32)]


def forward(x: np.ndarray) -> np.ndarray:
    return (x / (1.0 + np.exp(-x))).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x: np.ndarray) -> dict:
    rows, cols = x.shape
    return {"matmul_flops": 0.0, "vector_flops": 3.0 * rows * cols, "hbm_bytes": 8.0 * rows * cols}
