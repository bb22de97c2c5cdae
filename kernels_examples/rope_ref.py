"""Reference for rope.py: rotate-half RoPE on a [heads, head_dim, seq] tensor, fp32."""

import numpy as np

HEAD_DIM = 128
# (heads, seq): seq a multiple of 512
SHAPES = {"full": (8, 2048), "small": (2, 1024)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    heads, seq_len = SHAPES[size]
    x = np.random.randn(heads, HEAD_DIM, seq_len).astype(np.float32)
    start = np.random.randint(0, 4096)  # position of the first token
    inv_freq = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)  # [64]
    angles = inv_freq[:, None] * (start + np.arange(seq_len))[None, :]  # [64, seq]
    return [x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]


def forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = HEAD_DIM // 2
    lo, hi = x[:, :half, :].astype(np.float64), x[:, half:, :].astype(np.float64)
    out = np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=1)
    return out.astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> dict:
    heads, head_dim, seq_len = x.shape
    elements = heads * head_dim * seq_len
    return {
        "matmul_flops": 0.0,
        "vector_flops": 3.0 * elements,
        "hbm_bytes": 4.0 * (2 * elements + cos.size + sin.size),
    }
