"""NKIBench mamba: the selective-scan recurrence of a Mamba block, fp32.

delta, u [C, M] (channels x sequence); a [C, S]; b, c [S, M]; out [C, M]:
    h_s[:, t] = exp(delta[:, t] * a[:, s]) * h_s[:, t-1] + delta[:, t] * u[:, t] * b[s, t]
    out[:, t] = sum_s c[s, t] * h_s[:, t]"""

import numpy as np

SHAPES = {"full": {"M": 7168, "C": 256, "S": 16}, "small": {"M": 1024, "C": 256, "S": 2}}


def get_inputs(size: str = "full") -> list[np.ndarray]:
    s = SHAPES[size]
    m, ch, st = s["M"], s["C"], s["S"]
    delta = np.random.uniform(0.01, 0.2, size=(ch, m)).astype(np.float32)
    u = np.random.randn(ch, m).astype(np.float32)
    a = -np.random.uniform(0.5, 2.0, size=(ch, st)).astype(np.float32)
    b = np.random.randn(st, m).astype(np.float32)
    c = np.random.randn(st, m).astype(np.float32)
    return [delta, u, a, b, c]


def forward(delta, u, a, b, c) -> np.ndarray:
    delta, u, a, b, c = (t.astype(np.float64) for t in (delta, u, a, b, c))
    decay = np.exp(delta[:, None, :] * a[:, :, None])  # [C, S, M]
    drive = (delta * u)[:, None, :] * b[None, :, :]
    h = np.zeros(a.shape)
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
    ch, m = delta.shape
    st = a.shape[1]
    return {
        "matmul_flops": 0.0,
        "vector_flops": 8.0 * m * ch * st,
        "hbm_bytes": 4.0 * (3 * ch * m + ch * st + 2 * st * m),
    }
