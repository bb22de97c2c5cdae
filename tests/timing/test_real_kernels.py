"""The timing model on traces of real kernels run by the emulator (trace-only, small shapes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from accelopt.hardware.work import Work
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.nki.trace import Trace
from accelopt.profiling.lowering import is_dma, is_tensor_engine
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.timeline import ModelOptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "kernels_examples"
CALIBRATION = ROOT / "benchmarks" / "calibration_kernels"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.endswith("_ref"))


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"timing_ref_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel_name(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("@nki.jit"):
            return lines[i + 1].split("def ", 1)[1].split("(", 1)[0]
    raise AssertionError("no @nki.jit kernel")


def _trace_example(name: str) -> tuple[Trace, Work | None, str]:
    path = EXAMPLES / f"{name}.py"
    text = path.read_text()
    ref = _module(EXAMPLES / f"{name}_ref.py")
    np.random.seed(0)
    inputs = ref.get_inputs("small")
    fn = load_kernel(text, _kernel_name(text), str(path))
    run = run_kernel(fn, ref.transform_to_nki_inputs(inputs), numerics=False, source_path=str(path))
    work = Work(**ref.work(*inputs), source="task") if hasattr(ref, "work") else None
    return run.trace, work, text


@pytest.fixture(scope="module", params=EXAMPLE_NAMES)
def example(request):
    return _trace_example(request.param)


@pytest.mark.parametrize("hardware", ["trn1", "trn2"])
def test_example_kernels_respect_the_roofline_and_the_trace(example, hardware: str) -> None:
    trace, work, text = example
    for roof in (work, None):  # the task's work formula, and the work derived from the trace
        profile, timeline = profile_trace(trace, hardware, work=roof, source_text=text)
        assert profile.latency_ms >= profile.peak_latency_ms > 0
        executed = {op.record for op in timeline.ops if op.record >= 0}
        te = [trace.records[i] for i in executed if is_tensor_engine(trace.records[i])]
        assert profile.hardware_flops == sum(r.flops for r in te)
        assert profile.transpose_flops == sum(r.flops for r in te if r.is_transpose)
        dma = [trace.records[i] for i in executed if is_dma(trace.records[i])]
        loads = sum(r.bytes for r in dma if r.src_memory is not None and r.src_memory.value == "hbm")
        stores = sum(r.bytes for r in dma if r.dst_memory is not None and r.dst_memory.value == "hbm")
        assert profile.hbm_read_bytes == loads + profile.spill_reload_bytes
        assert profile.hbm_write_bytes == stores + profile.spill_save_bytes
        assert profile.lines and profile.lines[0].text  # the hottest line, with its source text
        for op in timeline.ops:
            assert 0 <= op.start <= op.end <= timeline.total_time + 1e-15


def test_hoisting_never_slows_a_real_kernel(example) -> None:
    trace, _, _ = example
    on = profile_trace(trace)[0]
    off = profile_trace(trace, options=ModelOptions(hoist_invariant_loads=False, hoist_transposes=False))[0]
    assert on.hbm_read_bytes <= off.hbm_read_bytes
    assert on.latency_ms <= off.latency_ms * 1.001


def _calibration_trace(file: str, kernel: str, inputs: list[np.ndarray]) -> tuple[Trace, str]:
    path = CALIBRATION / file
    text = path.read_text()
    run = run_kernel(load_kernel(text, kernel, str(path)), inputs, numerics=False, source_path=str(path))
    return run.trace, text


def _mamba_inputs(channels: int, seq: int, states: int = 16) -> list[np.ndarray]:
    f = np.float32
    return [np.zeros((channels, seq), f), np.zeros((channels, seq), f), np.zeros((channels, states), f)] + [
        np.zeros((states, seq), f)
    ] * 2


def test_mamba_v1_at_the_published_small_size_is_vector_bound_near_the_measurement() -> None:
    """NKI_NOTES §7: C=256, L=512, S=16 measured 172.93 µs with the Vector Engine 99% busy. A
    deterministic figure pinned within the calibration target (35%): a drift means the model
    changed and benchmarks/calibration.py must be re-run."""
    trace, text = _calibration_trace("mamba.py", "mamba_v1", _mamba_inputs(256, 512))
    profile = profile_trace(trace, source_text=text)[0]
    assert profile.latency_ms == pytest.approx(0.17293, rel=0.35)
    assert profile.vector_engine_active_time_percent > 0.9
    assert profile.bound == "vector"


def test_matmul_versions_keep_their_published_order_at_a_reduced_size() -> None:
    """The four matmul structures of §7 at [2048 x 2048] . [2048 x 1024] (one v4 block in M):
    every version with more reuse is faster, and the last one is Tensor Engine bound."""
    lhsT = np.zeros((2048, 2048), ml_dtypes.bfloat16)
    rhs = np.zeros((2048, 1024), ml_dtypes.bfloat16)
    latencies = []
    for kernel in ("matmul_tiled", "matmul_hoisted", "matmul_block2x2", "matmul_blocked"):
        trace, _ = _calibration_trace("matmul.py", kernel, [lhsT, rhs])
        latencies.append(profile_trace(trace)[0])
    assert [p.latency_ms for p in latencies] == sorted((p.latency_ms for p in latencies), reverse=True)
    assert latencies[-1].tensor_engine_active_time_percent > 0.7 and latencies[-1].bound == "tensor"
    assert latencies[0].dma_active_time_percent > 0.9 and latencies[0].bound == "hbm"


def test_sequence_tiling_removes_the_spills_of_the_long_mamba() -> None:
    """§7: v2 over a whole 8192-long sequence spills; v3 (sequence tiled by 512) does not."""
    inputs = _mamba_inputs(128, 8192)
    v2, _ = _calibration_trace("mamba.py", "mamba_v2", inputs)
    v3, _ = _calibration_trace("mamba.py", "mamba_v3", inputs)
    p2 = profile_trace(v2)[0]
    p3 = profile_trace(v3)[0]
    assert p2.spill_save_bytes > 0 and p3.spill_save_bytes == 0
    assert p2.latency_ms > p3.latency_ms


def test_layernorm_versions_at_the_published_size() -> None:
    """§7: LayerNorm 4096 x 8192 fp32, `nl` version 2.31 ms, bn_stats/bn_aggr version 1.97 ms.
    Deterministic figures pinned within the calibration targets (35% absolute, ordering)."""
    inputs = [
        np.zeros((4096, 8192), np.float32),
        np.zeros((1, 8192), np.float32),
        np.zeros((1, 8192), np.float32),
    ]
    nl_trace, _ = _calibration_trace("layernorm.py", "layernorm_nl", inputs)
    bn_trace, _ = _calibration_trace("layernorm.py", "layernorm_bn", inputs)
    nl_ms = profile_trace(nl_trace)[0].latency_ms
    bn_ms = profile_trace(bn_trace)[0].latency_ms
    assert nl_ms == pytest.approx(2.31, rel=0.35)
    assert bn_ms == pytest.approx(1.97, rel=0.35)
    assert nl_ms > bn_ms


def test_mamba_fusion_and_loop_order_gain_matches_the_published_ratio() -> None:
    """§7 at C=4096, L=512: v1 2.34 ms, v2 1.61 ms (x1.45). The per-channel-tile work is the
    same at C=512, so the ratio must hold there within the 25% calibration target."""
    inputs = _mamba_inputs(512, 512)
    v1 = profile_trace(_calibration_trace("mamba.py", "mamba_v1", inputs)[0])[0].latency_ms
    v2 = profile_trace(_calibration_trace("mamba.py", "mamba_v2", inputs)[0])[0].latency_ms
    assert v1 / v2 == pytest.approx(2.34 / 1.61, rel=0.25)
