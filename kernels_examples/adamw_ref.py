"""Reference for adamw.py: one AdamW step, returning the updated parameter (float64 maths)."""

import numpy as np

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10

# (rows, cols): rows need not be a multiple of 128 (the kernel masks the tail), cols a multiple of 256
SHAPES = {"full": (1000, 2048), "small": (200, 1024)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    rows, cols = SHAPES[size]
    param = np.random.randn(rows, cols).astype(np.float32)
    grad = np.random.randn(rows, cols).astype(np.float32)
    exp_avg = (0.1 * np.random.randn(rows, cols)).astype(np.float32)
    exp_avg_sq = np.random.uniform(0.0, 0.1, size=(rows, cols)).astype(np.float32)
    return [param, grad, exp_avg, exp_avg_sq]


def forward(param, grad, exp_avg, exp_avg_sq) -> np.ndarray:
    p, g, m, v = (t.astype(np.float64) for t in (param, grad, exp_avg, exp_avg_sq))
    m_new = BETA1 * m + (1.0 - BETA1) * g
    v_new = BETA2 * v + (1.0 - BETA2) * g * g
    bias1 = 1.0 - BETA1**STEP
    bias2 = 1.0 - BETA2**STEP
    update = m_new / (np.sqrt(v_new / bias2) + EPS)
    return (p * (1.0 - LR * WEIGHT_DECAY) - LR / bias1 * update).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(param, grad, exp_avg, exp_avg_sq) -> dict:
    rows, cols = param.shape
    return {"matmul_flops": 0.0, "vector_flops": 7.0 * rows * cols, "hbm_bytes": 20.0 * rows * cols}
