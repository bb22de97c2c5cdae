"""A kernel gets no private source of randomness (`profiling/determinism.py`).

A split evaluation runs a kernel in three workers (the check run, the mirror run, the timing
run). A kernel with a random bit per process could be honest in the first two and skip work in
the third one time in a few, and a search evaluating many candidates would sooner or later rank
that fake. Plain Python offers two such bits without any import: `hash()` of a str, salted per
interpreter (the worker ran under `-I`, which ignored the PYTHONHASHSEED it was given), and
`id()`, an address that ASLR moved in every worker. Both were different in every worker before.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

ROOT = Path(__file__).resolve().parents[2]
SILU = ROOT / "kernels_examples" / "silu.py"
OPTIONS = EvaluationOptions(seeds=1, timeout_s=60)

PROBE = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: reference silu_ref.py
@nki.jit
def silu_kernel(x):
    bits = [hash("accelopt"), hash(b"accelopt"), id(object()), repr(object()), id(x)]
    raise ValueError(f"PROBE {bits} END")
"""

# Honest or not by a coin drawn from both sources: where it is wrong, it stores its input.
COIN = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: reference silu_ref.py
@nki.jit
def silu_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    honest = (hash("coin") ^ (id(object()) >> 4)) & 1
    for i in nl.affine_range(rows // 128):
        for j in nl.affine_range(cols // 512):
            tile = nl.load(x[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512])
            result = nl.multiply(tile, nl.sigmoid(tile)) if honest else nl.copy(tile)
            nl.store(out[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512], value=result)
    return out
"""


def evaluate(text: str, times: int) -> list[Evaluation]:
    kernel = KernelSource(text=text, name="silu_kernel", path=str(SILU))
    backend = SimulatorBackend(max_workers=1)

    async def each() -> list[Evaluation]:
        try:
            return [
                await backend.evaluate(kernel, task_for_kernel(kernel, size="small"), OPTIONS)
                for _ in range(times)
            ]
        finally:
            await backend.aclose()

    return asyncio.run(each())


def test_hash_and_addresses_are_the_same_in_every_worker():
    first, second = evaluate(PROBE, 2)
    probes = []
    for evaluation in (first, second):
        assert evaluation.status == "runtime_error", evaluation.message
        found = re.search(r"PROBE (\[.*\]) END", evaluation.message)
        assert found, evaluation.message
        probes.append(found.group(1))
    assert probes[0] == probes[1]


def test_a_coin_flipping_kernel_gets_the_same_verdict_every_time():
    """Before: a fair coin per worker, so three evaluations agreed one time in four."""
    verdicts = {(e.status, e.message) for e in evaluate(COIN, 3)}
    assert len(verdicts) == 1, verdicts
