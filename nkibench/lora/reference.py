"""NKIBench lora: x @ w + (x @ a) @ b, fp32.

x [M, K]; w [K, N]; a [K, R]; b [R, N]; out [M, N]; rank R = 128. The kernel receives x
transposed ([K, M])."""

import numpy as np

SHAPES = {
    "full": {"M": 4096, "N": 12288, "K": 5120, "R": 128},
    "small": {"M": 256, "N": 1024, "K": 256, "R": 128},
}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    m, n, k, r = s["M"], s["N"], s["K"], s["R"]
    x = np.random.randn(m, k).astype(np.float32)
    w = (np.random.randn(k, n) / np.sqrt(k)).astype(np.float32)
    a = (np.random.randn(k, r) / np.sqrt(k)).astype(np.float32)
    b = (np.random.randn(r, n) / np.sqrt(r)).astype(np.float32)
    return [x, w, a, b]


def forward(x, w, a, b) -> np.ndarray:
    x, w, a, b = (t.astype(np.float64) for t in (x, w, a, b))
    return (x @ w + (x @ a) @ b).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, w, a, b = inputs
    return [np.ascontiguousarray(x.T), w, a, b]


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x, w, a, b) -> dict:
    m, k = x.shape
    n = w.shape[1]
    r = a.shape[1]
    return {
        "matmul_flops": 2.0 * m * n * k + 2.0 * m * k * r + 2.0 * m * n * r,
        "vector_flops": 1.0 * m * n,
        "hbm_bytes": 4.0 * (m * k + k * n + k * r + r * n + m * n),
    }
