"""Reference for mamba.py: the selective-scan recurrence, computed in float64."""

import numpy as np

# (channels, sequence length, states): channels a multiple of 128, length a multiple of 512
SHAPES = {"full": (256, 2048, 16), "small": (256, 1024, 2)}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    channels, seq_len, states = SHAPES[size]
    delta = np.random.uniform(0.01, 0.2, size=(channels, seq_len)).astype(np.float32)
    u = np.random.randn(channels, seq_len).astype(np.float32)
    a = -np.random.uniform(0.5, 2.0, size=(channels, states)).astype(np.float32)
    b = np.random.randn(states, seq_len).astype(np.float32)
    c = np.random.randn(states, seq_len).astype(np.float32)
    return [delta, u, a, b, c]


def forward(delta, u, a, b, c) -> np.ndarray:
    delta, u, a, b, c = (t.astype(np.float64) for t in (delta, u, a, b, c))
    decay = np.exp(delta[:, None, :] * a[:, :, None])  # [C, S, L]
    drive = (delta * u)[:, None, :] * b[None, :, :]  # [C, S, L]
    h = np.zeros(a.shape)  # [C, S]
    y = np.empty(delta.shape)
    for t in range(delta.shape[1]):
        h = decay[:, :, t] * h + drive[:, :, t]
        y[:, t] = h @ c[:, t]
    return y.astype(np.float32)


def transform_to_nki_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(inputs)


def transform_nki_outputs(kernel_out, ref_out) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.asarray(kernel_out)], [np.asarray(ref_out)]


def work(delta, u, a, b, c) -> dict:
    channels, seq_len = delta.shape
    states = a.shape[1]
    return {
        "matmul_flops": 0.0,
        "vector_flops": 8.0 * seq_len * channels * states,
        "hbm_bytes": 4.0 * (3 * channels * seq_len + channels * states + 2 * states * seq_len),
    }
