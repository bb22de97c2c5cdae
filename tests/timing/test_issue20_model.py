"""Pins of the second round of issue-20 model changes, each to its public source
(hardware/specs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.hardware.specs import TRN1, TRN2
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.nki.trace import Engine, LoopKind, Memory
from accelopt.profiling.lowering import dma_pieces
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.timeline import ModelOptions, schedule

from .tracebuild import TraceBuilder, full

# Rotary embedding two ways over x [D, S], cos/sin [D/2, S]: 512-column tiles with x loaded on
# all partitions and its second half copied down to partition 0, against 2048-column tiles
# loading each half of x (and cos, sin) into fresh tiles where each product needs it, so every
# load appears twice.
ROPE_PAIR = """
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def rope_small_tiles(x, cos, sin):
    d, s = x.shape
    h = d // 2
    out = nl.ndarray((d, s), dtype=x.dtype, buffer=nl.shared_hbm)
    w = 512
    for j in nl.affine_range(s // w):
        xt = nl.load(x[0:d, j * w:(j + 1) * w])
        c = nl.load(cos[0:h, j * w:(j + 1) * w])
        sn = nl.load(sin[0:h, j * w:(j + 1) * w])
        second = nl.copy(xt[h:d, :])
        a = nisa.tensor_tensor(xt[0:h, :], c, nl.multiply)
        b = nisa.tensor_tensor(second, c, nl.multiply)
        e = nisa.tensor_tensor(xt[0:h, :], sn, nl.multiply)
        f = nisa.tensor_tensor(second, sn, nl.multiply)
        res = nl.ndarray((d, w), dtype=x.dtype, buffer=nl.sbuf)
        res[0:h, :] = nisa.tensor_tensor(a, f, nl.subtract)
        res[h:d, :] = nisa.tensor_tensor(b, e, nl.add)
        nl.store(out[0:d, j * w:(j + 1) * w], res)
    return out


@nki.jit
def rope_repeated_loads(x, cos, sin):
    d, s = x.shape
    h = d // 2
    out = nl.ndarray((d, s), dtype=x.dtype, buffer=nl.shared_hbm)
    w = 2048
    for j in nl.affine_range(s // w):
        cols = slice(j * w, (j + 1) * w)
        a = nisa.tensor_tensor(nl.load(x[0:h, cols]), nl.load(cos[0:h, cols]), nl.multiply)
        f = nisa.tensor_tensor(nl.load(x[h:d, cols]), nl.load(sin[0:h, cols]), nl.multiply)
        e = nisa.tensor_tensor(nl.load(x[0:h, cols]), nl.load(sin[0:h, cols]), nl.multiply)
        b = nisa.tensor_tensor(nl.load(x[h:d, cols]), nl.load(cos[0:h, cols]), nl.multiply)
        nl.store(out[0:h, cols], nisa.tensor_tensor(a, f, nl.subtract))
        nl.store(out[h:d, cols], nisa.tensor_tensor(b, e, nl.add))
    return out
"""


@pytest.mark.parametrize("hw", [TRN1, TRN2], ids=["trn1", "trn2"])
def test_dma_engines_serve_eight_partitions_each(hw: object) -> None:
    """[DMA-OV]'s two profiled examples: A[4, 4096] onto 4 partitions keeps a single DMA engine
    busy; A[128, 128] uses all 16, each moving its 8 partitions' rows."""
    assert [q for q, _ in dma_pieces(4 * 8192, (0, 4), 8192.0, hw)] == [0]
    full = dma_pieces(128 * 256, (0, 128), 256.0, hw)
    assert sorted(q for q, _ in full) == list(range(16))
    assert len({t for _, t in full}) == 1


def _two_loads(write_between: str) -> TraceBuilder:
    """Two iterations, each loading its own rows of x into two fresh tiles (as `f(nl.load(x[r]))
    ... g(nl.load(x[r]))` does), with an optional write in between: to x, or to the first tile."""
    b = TraceBuilder()
    x = b.tensor("x", (256, 512), Memory.HBM, is_input=True)
    out = b.tensor("out", (128, 512), Memory.HBM, is_output=True)
    loop = b.loop(LoopKind.AFFINE, 2)
    for it in range(2):
        b.enter(loop, it)
        first = b.tensor("t1", (128, 512), in_loop=True, line=3)
        second = b.tensor("t2", (128, 512), in_loop=True, line=5)
        res = b.tensor("r", (128, 512), in_loop=True, line=6)
        rows = ((128 * it, 128 * (it + 1)), (0, 512))
        b.load(first, full((128, 512)), x, rows, line=3)
        if write_between == "source":
            b.store(x, rows, res, full((128, 512)), line=4)
        elif write_between == "tile":
            b.compute(Engine.VECTOR, "memset", [], [(first, full((128, 512)))], free_size=512, line=4)
        b.load(second, full((128, 512)), x, rows, line=5)
        b.compute(
            Engine.VECTOR,
            "tensor_tensor",
            [(first, full((128, 512))), (second, full((128, 512)))],
            [(res, full((128, 512)))],
            free_size=512,
            line=6,
        )
        b.store(out, full((128, 512)), res, full((128, 512)), line=7)
    return b


def test_a_repeated_identical_load_in_one_iteration_is_not_issued() -> None:
    """The compiler's redundant-load elimination (*inferred*, the same pass as hoisting): the
    second load of the same HBM region into a fresh tile of the same shape reads the first
    tile, unless the source or the first tile was written in between."""
    loads = {}
    for case in ("none", "source", "tile"):
        timeline = schedule(_two_loads(case).trace, TRN1)
        loads[case] = sum(1 for op in timeline.ops if op.kind == "dma_load")
    assert loads == {"none": 2, "source": 4, "tile": 4}
    kept = schedule(_two_loads("none").trace, TRN1, ModelOptions(eliminate_redundant_loads=False))
    assert sum(1 for op in kept.ops if op.kind == "dma_load") == 4


def test_larger_rope_tiles_with_repeated_half_loads_are_faster() -> None:
    """The direction of the issue's RoPE optimization (1.30x faster on hardware, 0.80x in the
    model): larger tiles and no partition-moving copy win although the kernel loads each half
    of x twice. Issued twice, those loads (all onto partitions 0..63, so on 8 of the 16 DMA
    engines) made the second version DMA-bound and slower."""
    f = np.float32
    s = 65536  # the tile loop runs 32 times: start-up no longer dominates
    inputs = [np.zeros((128, s), f), np.zeros((64, s), f), np.zeros((64, s), f)]
    traces = {}
    for name in ("rope_small_tiles", "rope_repeated_loads"):
        fn = load_kernel(ROPE_PAIR, name, "rope_pair.py")
        traces[name] = run_kernel(fn, inputs, numerics=False, kernel_name=name, source_path="rope_pair.py").trace
    small = profile_trace(traces["rope_small_tiles"], "trn1")[0]
    large = profile_trace(traces["rope_repeated_loads"], "trn1")[0]
    issued = profile_trace(
        traces["rope_repeated_loads"], "trn1", options=ModelOptions(eliminate_redundant_loads=False)
    )[0]
    assert large.hbm_read_bytes == small.hbm_read_bytes < issued.hbm_read_bytes
    assert small.latency_ms > 1.02 * large.latency_ms
    assert issued.latency_ms > small.latency_ms  # the sign the model had before


def test_trn2_charges_the_kernel_start_its_device_traces_show_once_per_launch() -> None:
    """[DMA-OV]'s trn2 device traces start the kernel's first instruction ≈21 µs into the
    execution: every trn2 profile includes it, an SPMD grid once; trn1 has no such figure."""
    b = TraceBuilder()
    x = b.tensor("x", (128, 512), Memory.HBM, is_input=True)
    t = b.tensor("t", (128, 512))
    b.load(t, full((128, 512)), x, full((128, 512)))
    alone = {hw.name: schedule(b.trace, hw) for hw in (TRN1, TRN2)}
    work = max(op.end for op in alone["trn2"].ops)
    assert alone["trn2"].total_time == pytest.approx(work + TRN2.kernel_start_s)
    assert TRN2.kernel_start_s == pytest.approx(21e-6)
    assert alone["trn1"].total_time == pytest.approx(max(op.end for op in alone["trn1"].ops))
    profile = profile_trace(b.trace, "trn2")[0]
    assert profile.latency_ms == pytest.approx(alone["trn2"].total_time * 1e3)
