"""NKIBench swiglu: (silu(x @ w_gate) * (x @ w_up)) @ w_down, fp32.

x [M, K]; w_gate, w_up [K, N]; w_down [N, K]; out [M, K]. Weights are scaled by 1/sqrt(fan-in)
so activations stay O(1), as in a real MLP block."""

import numpy as np

SHAPES = {"full": {"M": 4096, "N": 3072, "K": 1024}, "small": {"M": 256, "N": 1024, "K": 1024}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    m, n, k = s["M"], s["N"], s["K"]
    x = np.random.randn(m, k).astype(np.float32)
    w_gate = (np.random.randn(k, n) / np.sqrt(k)).astype(np.float32)
    w_up = (np.random.randn(k, n) / np.sqrt(k)).astype(np.float32)
    w_down = (np.random.randn(n, k) / np.sqrt(n)).astype(np.float32)
    return [x, w_gate, w_up, w_down]


def forward(x, w_gate, w_up, w_down) -> np.ndarray:
    x, w_gate, w_up, w_down = (t.astype(np.float64) for t in (x, w_gate, w_up, w_down))
    gate = x @ w_gate
    hidden = gate / (1.0 + np.exp(-gate)) * (x @ w_up)
    return (hidden @ w_down).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x, w_gate, w_up, w_down) -> dict:
    m, k = x.shape
    n = w_gate.shape[1]
    return {
        "matmul_flops": 6.0 * m * k * n,
        "vector_flops": 5.0 * m * n,
        "hbm_bytes": 4.0 * (2 * m * k + 3 * k * n),
    }
