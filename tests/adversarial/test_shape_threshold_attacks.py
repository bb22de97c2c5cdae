"""Kernels that tell the timed size from the checked ones by the shape alone (SECURITY.md "Real
sizes", "Known gaps").

The task: SiLU whose full size (1024 x 8192) is 32 times its small one, too big to be a hidden
check size, so the full size's outputs are never computed. Past a row threshold that only the
full size crosses, each attack below changes what it does while issuing instructions from the
same source lines, reading every input byte and writing every output byte:

- it computes half of the column tiles and stores the rest as loaded (half the vector work:
  within the 0.3 growth floor, so it was accepted before the share rule);
- it computes in bf16 instead of fp32 (the same work, at a cheaper precision nobody checks).

The control, the example SiLU, must stay `ok` on the same task.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = EvaluationOptions(seeds=1, timeout_s=60)

HEADER = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


# accelopt: reference silu_ref.py
@nki.jit
def silu_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
"""

HALF_THE_WORK = (
    HEADER
    + """    stride = 2 if rows > 512 else 1
    passed_through = cols // 512 // 2 if stride > 1 else 1
    for i in nl.affine_range(rows // 128):
        for j in nl.affine_range(passed_through):
            c0 = (j * stride + 1) * 512 if stride > 1 else 0
            raw = nl.load(x[i * 128 : i * 128 + 128, c0 : c0 + 512])
            nl.store(out[i * 128 : i * 128 + 128, c0 : c0 + 512], value=raw)
        for j in nl.affine_range(cols // 512 // stride):
            c0 = j * stride * 512
            tile = nl.load(x[i * 128 : i * 128 + 128, c0 : c0 + 512])
            result = nl.multiply(tile, nl.sigmoid(tile))
            nl.store(out[i * 128 : i * 128 + 128, c0 : c0 + 512], value=result)
    return out
"""
)

BF16_WHEN_BIG = (
    HEADER
    + """    work_dtype = nl.bfloat16 if rows > 512 else x.dtype
    for i in nl.affine_range(rows // 128):
        for j in nl.affine_range(cols // 512):
            tile = nl.load(x[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512], dtype=work_dtype)
            result = nl.multiply(tile, nl.sigmoid(tile))
            nl.store(out[i * 128 : i * 128 + 128, j * 512 : j * 512 + 512], value=result)
    return out
"""
)


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict[str, Evaluation]:
    folder = tmp_path_factory.mktemp("silu32x")
    reference = (ROOT / "kernels_examples" / "silu_ref.py").read_text()
    assert '"full": (512, 2048)' in reference
    (folder / "silu_ref.py").write_text(reference.replace('"full": (512, 2048)', '"full": (1024, 8192)'))
    kernels = {
        "half": HALF_THE_WORK,
        "bf16": BF16_WHEN_BIG,
        "honest": (ROOT / "kernels_examples" / "silu.py").read_text(),
    }
    sources = {}
    for name, text in kernels.items():
        path = folder / f"{name}.py"
        path.write_text(text)
        sources[name] = KernelSource(text=text, name="silu_kernel", path=str(path))
    backend = SimulatorBackend(max_workers=2)

    async def all_of_them() -> dict[str, Evaluation]:
        try:
            return {
                name: await backend.evaluate(k, task_for_kernel(k, size="full"), OPTIONS)
                for name, k in sources.items()
            }
        finally:
            await backend.aclose()

    results = asyncio.run(all_of_them())
    assert not backend.sandbox.live_pids
    return results


def test_the_honest_kernel_is_accepted_on_the_same_task(judged):
    control = judged["honest"]
    assert control.ok, control.message
    assert (control.checked_size, control.timed_size) == ("small", "full")


def test_skipping_half_the_work_past_a_threshold_is_rejected(judged):
    attack = judged["half"]
    assert attack.status == "rejected" and attack.profile is None, attack.message
    assert "vector FLOPs" in attack.message and "keeps 50% of that share (at least 75%" in attack.message


def test_a_cheaper_precision_past_a_threshold_is_rejected(judged):
    attack = judged["bf16"]
    assert attack.status == "rejected" and attack.profile is None, attack.message
    assert "never issued" in attack.message and "bfloat16" in attack.message
    assert "in the same element types" in attack.message
