"""Test kernels of this folder, their inputs and numpy references, and running them in the
emulator in-process (these are our own trusted test kernels, not candidates)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accelopt.nki.runtime import install_aliases, load_kernel, run_kernel

KERNELS = Path(__file__).parent / "kernels"


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    style: str
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    reference: Callable[..., list[np.ndarray]]

    @property
    def text(self) -> str:
        return (KERNELS / self.file).read_text()


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


CASES = {
    "hw_matmul_bias": Case(
        "hw_matmul_bias.py",
        "matmul_bias_kernel",
        "hand-written",
        lambda r: [_normal(r, 256, 256) * 0.1, _normal(r, 256, 1024) * 0.1, _normal(r, 256, 1) * 0.1],
        lambda a, b, c: [np.exp(0.5 * (a.T @ b) + c)],
    ),
    "hw_silu": Case(
        "hw_silu.py",
        "silu_kernel",
        "hand-written",
        lambda r: [_normal(r, 256, 1024)],
        lambda x: [x * _sigmoid(x)],
    ),
    "hw_rowsum": Case(
        "hw_rowsum.py",
        "rowsum_kernel",
        "hand-written",
        lambda r: [_normal(r, 256, 1024)],
        lambda x: [(3.0 * x + 1.0).sum(axis=1, keepdims=True)],
    ),
    "hw_transpose_matmul": Case(
        "hw_transpose_matmul.py",
        "transpose_matmul_kernel",
        "hand-written",
        lambda r: [_normal(r, 256, 128), _normal(r, 128, 1024), _normal(r, 128, 1024)],
        lambda a, b, c: [a @ b, a @ c],
    ),
    "hw_softplus": Case(
        "hw_softplus.py",
        "softplus_kernel",
        "hand-written",
        lambda r: [_normal(r, 256, 256)],
        lambda x: [np.log(np.exp(x) + 1.0)],
    ),
    "hw_scan": Case(
        "hw_scan.py",
        "running_sum_kernel",
        "hand-written",
        lambda r: [_normal(r, 128, 512)],
        lambda x: [np.cumsum(x, axis=1)],
    ),
    "cg_silu": Case(
        "cg_silu.py",
        "silu_cg_kernel",
        "compiler-generated",
        lambda r: [_normal(r, 200, 1024)],
        lambda x: [x * _sigmoid(x)],
    ),
    "cg_matmul": Case(
        "cg_matmul.py",
        "matmul_cg_kernel",
        "compiler-generated",
        lambda r: [_normal(r, 256, 256) * 0.1, _normal(r, 256, 1024) * 0.1, _normal(r, 256, 1)],
        lambda a, b, c: [np.tanh(2.0 * (a.T @ b) + c)],
    ),
}


def run(text: str, name: str, inputs: list[np.ndarray], *, numerics: bool = True):
    install_aliases()
    fn = load_kernel(text, name, f"<{name}>")
    return run_kernel(fn, [x.copy() for x in inputs], numerics=numerics, kernel_name=name)


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def assert_matches_reference(case: Case, text: str, seed: int = 0) -> None:
    """The kernel text computes the case's numpy reference (relative L2 error < 2e-5)."""
    inputs = case.inputs(np.random.default_rng(seed))
    outputs = run(text, case.name, inputs).outputs
    expected = case.reference(*inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.shape == want.shape
        error = relative_error(got.astype(np.float64), want.astype(np.float64))
        assert error < 2e-5, f"relative error {error:.2e}"


CASES["cg_scale_shift"] = Case(
    "cg_scale_shift.py",
    "scale_shift_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 512)],
    lambda x: [3.0 * x + 1.0],
)
CASES["cg_transpose"] = Case(
    "cg_transpose.py",
    "transpose_twice_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 128, 128)],
    lambda x: [x.T, x.T],
)
CASES["hw_axpy"] = Case(
    "hw_axpy.py",
    "axpy_kernel",
    "hand-written",
    lambda r: [_normal(r, 256, 256), _normal(r, 256, 256)],
    lambda x, y: [2.0 * x + y],
)
CASES["cg_axpy"] = Case(
    "cg_axpy.py",
    "ymx_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 256), _normal(r, 256, 256)],
    lambda x, y: [y - 2.0 * x],
)
CASES["hw_silu_offsets"] = Case(
    "hw_silu_offsets.py",
    "silu_offsets_kernel",
    "hand-written",
    lambda r: [_normal(r, 128, 1024)],
    lambda x: [x * _sigmoid(x)],
)
CASES["hw_column_ramp"] = Case(
    "hw_column_ramp.py",
    "column_ramp_kernel",
    "hand-written",
    lambda r: [_normal(r, 128, 512)],
    lambda x: [x + (np.arange(x.shape[1]) // 256 * 256).astype(np.float32)],
)
CASES["cg_heads"] = Case(
    "cg_heads.py",
    "heads_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 4, 256, 64), _normal(r, 4, 256, 64)],
    lambda x, y: [3.0 * x * y],
)
CASES["hw_heads"] = Case(
    "hw_heads.py",
    "heads_kernel",
    "hand-written",
    lambda r: [_normal(r, 4, 256, 64), _normal(r, 4, 256, 64)],
    lambda x, y: [_sigmoid(x) * y + 1.0],
)


def _softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES["hw_softmax_rows"] = Case(
    "hw_softmax_rows.py",
    "softmax_rows_kernel",
    "hand-written",
    lambda r: [_normal(r, 256, 512)],
    lambda x: [_softmax_rows(x)],
)
CASES["cg_sum_squares"] = Case(
    "cg_sum_squares.py",
    "sum_squares_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 512)],
    lambda x: [x * x, (x * x).sum(axis=1, keepdims=True)],
)
CASES["cg_silu_chain"] = Case(
    "cg_silu_chain.py",
    "silu_chain_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 1024)],
    lambda x: [x * _sigmoid(x)],
)
CASES["hw_silu_div"] = Case(
    "hw_silu_div.py",
    "silu_div_kernel",
    "hand-written",
    lambda r: [_normal(r, 256, 512), _normal(r, 256, 512)],
    lambda x, y: [x * _sigmoid(x) - 0.5 * y],
)
CASES["nki07_swish_gate"] = Case(
    "nki07_swish_gate.py",
    "swish_gate_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 256, 512), _normal(r, 256, 512)],
    lambda x, y: [x * _sigmoid(x) * y],
)
CASES["hw_scale_recip"] = Case(
    "hw_scale_recip.py",
    "scale_recip_kernel",
    "hand-written",
    lambda r: [_normal(r, 256, 512) * 0.1, 2.0 + np.abs(_normal(r, 256, 1))],
    lambda x, c: [1.0 / (3.0 * x + c)],
)
CASES["hw_silu_square"] = Case(
    "hw_silu_square.py",
    "silu_square_kernel",
    "hand-written",  # square tiles: the free width is also the partition width
    lambda r: [_normal(r, 256, 512)],
    lambda x: [x * _sigmoid(x)],
)
CASES["cg_sigmoid_square"] = Case(
    "cg_sigmoid_square.py",
    "sigmoid_square_cg_kernel",
    "compiler-generated",  # square blocks: the free width is also the partition width
    lambda r: [_normal(r, 256, 512)],
    lambda x: [_sigmoid(x)],
)
CASES["hw_exp_rows"] = Case(
    "hw_exp_rows.py",
    "exp_rows_kernel",
    "hand-written",
    lambda r: [_normal(r, 512, 2048)],
    lambda x: [np.exp(x)],
)
CASES["cg_exp_rows"] = Case(
    "cg_exp_rows.py",
    "exp_rows_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 1024, 2048)],
    lambda x: [np.exp(x)],
)
CASES["nki07_exp_rows"] = Case(
    "nki07_exp_rows.py",
    "exp_rows_07_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 512, 1024)],
    lambda x: [np.exp(x)],
)
CASES["hw_psum_sum"] = Case(
    "hw_psum_sum.py",
    "psum_sum_kernel",
    "hand-written",
    lambda r: [_normal(r, 512, 256), _normal(r, 512, 512)],
    lambda a, b: [a.T @ b],
)
CASES["cg_psum_sum"] = Case(
    "cg_psum_sum.py",
    "psum_sum_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 512, 256), _normal(r, 512, 512)],
    lambda a, b: [a.T @ b],
)
CASES["nki07_psum_sum"] = Case(
    "nki07_psum_sum.py",
    "psum_sum_07_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 512, 256), _normal(r, 512, 512)],
    lambda a, b: [a.T @ b],
)
CASES["hw_load_transpose"] = Case(
    "hw_load_transpose.py",
    "load_transpose_kernel",
    "hand-written",
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["cg_load_transpose"] = Case(
    "cg_load_transpose.py",
    "load_transpose_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["nki07_load_transpose"] = Case(
    "nki07_load_transpose.py",
    "load_transpose_07_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["hw_dma_transpose"] = Case(
    "hw_dma_transpose.py",
    "dma_transpose_kernel",
    "hand-written",
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["cg_dma_transpose"] = Case(
    "cg_dma_transpose.py",
    "dma_transpose_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["nki07_dma_transpose"] = Case(
    "nki07_dma_transpose.py",
    "dma_transpose_07_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 512, 128), _normal(r, 128, 512)],
    lambda a, b: [a @ b],
)
CASES["hw_narrow_psum"] = Case(
    "hw_narrow_psum.py",
    "narrow_psum_kernel",
    "hand-written",
    lambda r: [_normal(r, 256, 256), _normal(r, 256, 1024)],
    lambda a, b: [a.T @ b],
)
CASES["cg_narrow_psum"] = Case(
    "cg_narrow_psum.py",
    "narrow_psum_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 256), _normal(r, 256, 1024)],
    lambda a, b: [a.T @ b],
)
CASES["nki07_narrow_psum"] = Case(
    "nki07_narrow_psum.py",
    "narrow_psum_07_kernel",
    "hand-written",  # NKI 0.7 (nki.*), destination passing
    lambda r: [_normal(r, 256, 256), _normal(r, 256, 1024)],
    lambda a, b: [a.T @ b],
)
CASES["hw_two_pass"] = Case(
    "hw_two_pass.py",
    "two_pass_kernel",
    "hand-written",  # two passes through a scratch tensor in HBM (loop fusion)
    lambda r: [_normal(r, 256, 512)],
    lambda x: [2.0 * np.exp(x)],
)
CASES["cg_two_pass"] = Case(
    "cg_two_pass.py",
    "two_pass_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 512)],
    lambda x: [2.0 * np.exp(x)],
)
CASES["hw_two_outputs"] = Case(
    "hw_two_outputs.py",
    "two_outputs_kernel",
    "hand-written",  # two independent pieces of work in one loop (loop fission)
    lambda r: [_normal(r, 256, 512), _normal(r, 256, 512)],
    lambda x, y: [np.exp(x), 3.0 * y],
)
CASES["cg_two_outputs"] = Case(
    "cg_two_outputs.py",
    "two_outputs_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 256, 512), _normal(r, 256, 512)],
    lambda x, y: [np.exp(x), 3.0 * y],
)
CASES["hw_two_rows"] = Case(
    "hw_two_rows.py",
    "two_rows_kernel",
    "hand-written",  # [128, 20480] rows loaded up front: more live tiles than SBUF holds
    lambda r: [_normal(r, 128, 20480), _normal(r, 128, 20480)],
    lambda x, y: [np.exp(x), np.exp(y)],
)
CASES["cg_two_rows"] = Case(
    "cg_two_rows.py",
    "two_rows_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 128, 20480), _normal(r, 128, 20480)],
    lambda x, y: [np.exp(x), np.exp(y)],
)
CASES["hw_direct"] = Case(
    "hw_direct.py",
    "direct_kernel",
    "hand-written",  # direct allocation (ncc.sbuf.mod_alloc): buffer counts
    lambda r: [_normal(r, 1024, 512)],
    lambda a: [np.exp(a)],
)
CASES["cg_direct"] = Case(
    "cg_direct.py",
    "direct_cg_kernel",
    "compiler-generated",
    lambda r: [_normal(r, 1024, 512)],
    lambda a: [np.exp(a)],
)
