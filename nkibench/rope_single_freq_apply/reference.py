"""NKIBench rope_single_freq_apply: apply rotary embeddings (rotate-half form) with one
precomputed cos/sin table per (batch, head), fp32.

x [B, H, N, D]; cos, sin [B, H, N, D/2]; out [B, H, N, D]:
    out[..., :D/2] = x[..., :D/2] * cos - x[..., D/2:] * sin
    out[..., D/2:] = x[..., D/2:] * cos + x[..., :D/2] * sin"""

import numpy as np

SHAPES = {
    "full": {"B": 1, "H": 64, "N": 4096, "D": 128},
    "small": {"B": 1, "H": 2, "N": 256, "D": 128},
}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    b, h, n, d = s["B"], s["H"], s["N"], s["D"]
    x = np.random.randn(b, h, n, d).astype(np.float32)
    start = np.random.randint(0, 8192, size=(b, h, 1, 1))  # each sequence starts somewhere else
    inv_freq = 10000.0 ** (-np.arange(0, d, 2) / d)  # [D/2]
    angles = (start + np.arange(n)[None, None, :, None]) * inv_freq[None, None, None, :]
    return [x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]


def forward(x, cos, sin) -> np.ndarray:
    half = x.shape[-1] // 2
    lo, hi = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1).astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x, cos, sin) -> dict:
    b, h, n, d = x.shape
    return {"matmul_flops": 0.0, "vector_flops": 3.0 * b * h * n * d, "hbm_bytes": 12.0 * b * h * n * d}
