"""Attacks on the run a full-size evaluation is timed by: a trace-only run (no values), which is
neither re-run nor compared with the reference (SECURITY.md "Real sizes").

A kernel that can tell a trace-only run from a numeric one computes honestly wherever it is
checked (the small size, the hidden size, the verified re-run) and skips the work where it is
timed. Before the mirror run it was accepted: a register loaded from a tile has no value in a
trace-only run, so `int(register)` raises there, and the kernel caught that and ran one K step
of the matmul instead of all of them, while reading every input tile once so that the HBM
plausibility rule saw nothing missing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "kernels_examples" / "matmul.py"
OPTIONS = EvaluationOptions(seeds=1, timeout_s=60)

DETECTOR = '''

def timed_by_a_trace_only_run():
    """True in a trace-only run: a register loaded from a tile has no value there."""
    probe = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    register = nisa.register_alloc(0)
    nisa.register_load(register, probe)
    try:
        int(register)
        return False
    except Exception:
        return True

'''


def skipping_matmul() -> KernelSource:
    """The example matmul, doing one K step of its accumulation when timed; the other K tiles are
    loaded and dropped (one tile even where it computes, so the same instructions are issued)."""
    text = MATMUL.read_text()
    edits = [
        ("\n\n# accelopt: reference", DETECTOR + "\n# accelopt: reference"),
        (
            "    for m in nl.affine_range(m_size // TILE_M):",
            "    k_tiles = k_size // TILE_K\n"
            "    k_steps = 1 if timed_by_a_trace_only_run() else k_tiles\n"
            "    for m in nl.affine_range(m_size // TILE_M):",
        ),
        ("for k in nl.affine_range(k_size // TILE_K):", "for k in nl.affine_range(k_steps):"),
        (
            "            result = nl.copy(acc",
            "            for k in nl.affine_range(k_tiles - k_steps + 1):\n"
            "                j = k_tiles - 1 - k\n"
            "                a_dropped = nl.load(a[m * TILE_M : (m + 1) * TILE_M, j * TILE_K : (j + 1) * TILE_K])\n"
            "                b_dropped = nl.load(b[j * TILE_K : (j + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N])\n"
            "            result = nl.copy(acc",
        ),
    ]
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return KernelSource(text=text, name="matmul_kernel", path=str(MATMUL))


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    jobs = tmp_path_factory.mktemp("jobs")
    simulator = SimulatorBackend(max_workers=2, work_root=str(jobs))
    yield simulator
    asyncio.run(simulator.aclose())
    assert not simulator.sandbox.live_pids
    assert list(jobs.iterdir()) == [], "a job directory outlived its run"


def test_a_kernel_that_skips_work_only_when_timed_is_rejected(backend):
    kernel = skipping_matmul()
    evaluation = asyncio.run(backend.evaluate(kernel, task_for_kernel(kernel, size="full"), OPTIONS))
    assert evaluation.status == "rejected", evaluation.message
    assert evaluation.profile is None and not evaluation.verified
    assert "a trace-only run (the kind of run it is timed by) does other work than its verified run" in (
        evaluation.message
    )
    assert (evaluation.checked_size, evaluation.timed_size) == ("small", "full")


def test_the_same_kernel_without_the_detector_is_accepted(backend):
    """The control: with the detector answering False everywhere, the kernel above is an honest
    (slower) matmul, and the mirror run accepts it."""
    honest = skipping_matmul()
    honest = honest.model_copy(
        update={"text": honest.text.replace("1 if timed_by_a_trace_only_run() else ", "")}
    )
    evaluation = asyncio.run(backend.evaluate(honest, task_for_kernel(honest, size="full"), OPTIONS))
    assert evaluation.status == "ok", evaluation.message
    assert any("the same kind of run at the checked size" in note for note in evaluation.notes)


# A kernel can also tell the timed size from the checked ones by its shape alone. SiLU at a full
# size 32x its small one (too big to be a hidden check size): past the threshold it computes
# one column tile in four and stores the others as loaded, so every output byte is still written
# and every input byte read, and the same instruction sites are issued at both sizes.
THRESHOLD_SILU = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: reference silu_ref.py
@nki.jit
def silu_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    stride = 4 if rows > 512 else 1
    passed_through = cols // 512 if stride > 1 else 1
    for i in nl.affine_range(rows // 128):
        for j in nl.affine_range(passed_through):
            raw = nl.load(x[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512])
            nl.store(out[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512], value=raw)
        for j in nl.affine_range(cols // 512 // stride):
            c0 = j * stride * 512
            tile = nl.load(x[i * 128 : i * 128 + 128, c0 : c0 + 512])
            result = nl.multiply(tile, nl.sigmoid(tile))
            nl.store(out[i * 128 : i * 128 + 128, c0 : c0 + 512], value=result)
    return out
"""


def test_a_kernel_doing_less_work_past_a_size_threshold_is_rejected(tmp_path):
    reference = (ROOT / "kernels_examples" / "silu_ref.py").read_text()
    assert '"full": (512, 2048)' in reference
    (tmp_path / "silu_ref.py").write_text(reference.replace('"full": (512, 2048)', '"full": (1024, 8192)'))
    cheat = KernelSource(text=THRESHOLD_SILU, name="silu_kernel", path=str(tmp_path / "cheat.py"))
    honest_text = (ROOT / "kernels_examples" / "silu.py").read_text()
    honest = KernelSource(text=honest_text, name="silu_kernel", path=str(tmp_path / "silu.py"))
    for source in (cheat, honest):
        Path(source.path or "").write_text(source.text)
    backend = SimulatorBackend(max_workers=2)
    try:
        judged = [
            backend.evaluate_sync(k, task_for_kernel(k, size="full"), OPTIONS).evaluation
            for k in (cheat, honest)
        ]
    finally:
        asyncio.run(backend.aclose())
    attack, control = judged
    assert control.ok and control.timed_size == "full", control.message
    assert attack.status == "rejected" and attack.profile is None, attack.message
    assert "vector FLOPs grow" in attack.message and "25% of the work" in attack.message
