"""NKIBench adamw: one AdamW step on [M, N] fp32 parameters; returns the updated parameter.

Inputs are the parameter, its gradient and the two moment estimates; the moments are updated
inside the step (their new values feed the parameter update).
"""

import numpy as np

LR = 1e-3
BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10

# M = 10944 is not a multiple of 128: the baseline masks its last row block.
SHAPES = {"full": {"M": 10944, "N": 2048}, "small": {"M": 200, "N": 1024}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    shape = (s["M"], s["N"])
    param = np.random.randn(*shape).astype(np.float32)
    grad = np.random.randn(*shape).astype(np.float32)
    exp_avg = (0.1 * np.random.randn(*shape)).astype(np.float32)
    exp_avg_sq = np.random.uniform(0.0, 0.1, size=shape).astype(np.float32)
    return [param, grad, exp_avg, exp_avg_sq]


def forward(param, grad, exp_avg, exp_avg_sq) -> np.ndarray:
    p, g, m, v = (t.astype(np.float64) for t in (param, grad, exp_avg, exp_avg_sq))
    m_new = BETA1 * m + (1.0 - BETA1) * g
    v_new = BETA2 * v + (1.0 - BETA2) * g * g
    update = m_new / (np.sqrt(v_new / (1.0 - BETA2**STEP)) + EPS)
    return (p * (1.0 - LR * WEIGHT_DECAY) - LR / (1.0 - BETA1**STEP) * update).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(param, grad, exp_avg, exp_avg_sq) -> dict:
    m, n = param.shape
    return {"matmul_flops": 0.0, "vector_flops": 7.0 * m * n, "hbm_bytes": 20.0 * m * n}
