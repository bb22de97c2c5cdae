"""End-to-end kernels of both styles: numerics against numpy and instruction counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from nki_helpers import rel_l2

from accelopt.nki import runtime
from accelopt.nki.trace import Engine

KERNELS = Path(__file__).parent / "kernels"


def _load(name: str, fn: str):
    path = KERNELS / name
    return runtime.load_kernel(path.read_text(), fn, str(path))


def test_generated_rmsnorm_with_masked_tail(rng):
    kernel = _load("generated_rmsnorm.py", "gen_rmsnorm")
    x = rng.standard_normal((300, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    run = runtime.run_kernel(kernel, [x, w])
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * w
    assert rel_l2(run.outputs[0], ref) < 2e-5
    counts = Counter(r.opcode for r in run.trace.records)
    # one weight load, then per 128-row block (3 blocks): load, activation+reduce, two scalar
    # ops, a partition broadcast, a multiply, a store
    assert counts == {
        "dma_load": 1 + 3,
        "activation_reduce": 3,
        "tensor_scalar": 3 * 2,
        "activation": 3,
        "broadcast": 3,
        "tensor_tensor": 3,
        "dma_store": 3,
    }
    tail_store = [r for r in run.trace.records if r.opcode == "dma_store"][-1]
    assert tail_store.writes[0].box == ((256, 300), (0, 256))
    assert tail_store.dma_chunks == 44


def test_generated_rmsnorm_trace_only_matches(rng):
    kernel = _load("generated_rmsnorm.py", "gen_rmsnorm")
    x = rng.standard_normal((300, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    assert (
        runtime.run_kernel(kernel, [x, w], numerics=False).trace.records
        == runtime.run_kernel(kernel, [x, w]).trace.records
    )


def test_handwritten_softmax_with_loop_reduce(rng):
    kernel = _load("handwritten_softmax.py", "softmax_kernel")
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    run = runtime.run_kernel(kernel, [x])
    e = np.exp(x - x.max(1, keepdims=True))
    assert rel_l2(run.outputs[0], e / e.sum(1, keepdims=True)) < 2e-5
    per_block = Counter(
        (r.engine, r.opcode) for r in run.trace.records if r.loops and r.loops[0].iteration == 0
    )
    # per 128-row block, 2 column tiles: loads 3 passes x 2, exp 2 passes x 2, reductions 2 x 2,
    # loop_reduce: a first-iteration copy + a combine per pass, negate, reciprocal, multiply, store
    assert per_block[(Engine.DMA, "dma_load")] == 6
    assert per_block[(Engine.SCALAR, "activation")] == 4
    assert per_block[(Engine.VECTOR, "tensor_reduce")] == 4
    assert per_block[(Engine.UNASSIGNED, "tensor_copy")] == 2
    assert per_block[(Engine.VECTOR, "tensor_tensor")] == 2
    assert per_block[(Engine.DMA, "dma_store")] == 2
    assert len(run.trace.records) == 2 * sum(per_block.values())
