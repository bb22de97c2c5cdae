"""Reward hacks: candidates that try to pass the correctness check without doing the work.

Every one must come back `incorrect` (or `rejected`), never `ok`: the seeds are secret, outputs
are compared in full, inputs are checked untouched, and the candidate's process never holds the
reference outputs."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.inputs import generate_inputs
from accelopt.profiling.task import task_for_kernel
from profiling.kernels import HAND_WRITTEN, body, kernel, line_of

OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)
TASK = task_for_kernel(kernel(HAND_WRITTEN))

# A small task of its own, so that a whole cached answer fits in the kernel's text.
SMALL_BASELINE = kernel(HAND_WRITTEN.replace("x=float32[128,256]", "x=float32[128,4]"))
SMALL_TASK = task_for_kernel(SMALL_BASELINE)


def cached_answer_kernel(seed: int) -> str:
    """A kernel that ignores its input and returns the answer recorded for `seed`'s inputs."""
    (x,) = generate_inputs(SMALL_TASK.inputs, seed)
    values = ", ".join(repr(float(v)) for v in (x * 2).ravel())
    return body(
        f"""
cached = np.array([{values}], dtype=np.float32).reshape(128, 4)
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out, value=nl.load(nl.shared_constant(cached)))
return out
""",
        "# accelopt: inputs x=float32[128,4]",
    )


async def test_outputs_cached_for_predictable_seeds(shared_backend):
    """The answer for seed 0 (the first seed a harness with fixed seeds would use) is exact for
    seed 0, and wrong on the secret seeds actually used."""
    evaluation = await shared_backend.evaluate(kernel(cached_answer_kernel(0)), SMALL_TASK, OPTIONS)
    assert evaluation.status == "incorrect" and "exceeds tolerance" in evaluation.message
    assert 0 not in evaluation.seeds


async def test_an_answer_cached_for_the_very_seed_used_is_rejected_by_verification(shared_backend):
    """Cached outputs: a kernel holding the exact answer for the evaluation's own seed passes
    the output comparison; re-running its recorded calls on a secret seed's inputs (which no
    kernel ever receives) gives the cached answer again, not the reference's."""
    first = await shared_backend.evaluate(SMALL_BASELINE, SMALL_TASK, OPTIONS)
    seed = first.seeds[0]
    replay = await shared_backend.evaluate(
        kernel(cached_answer_kernel(seed)), SMALL_TASK, OPTIONS.model_copy(update={"seeds": 1})
    )
    assert replay.seeds == [seed]
    assert replay.status == "rejected", replay.message
    assert replay.message.startswith("verification: re-running the kernel's recorded calls on fresh inputs")
    assert replay.profile is None


async def test_regenerating_inputs_from_a_known_seed(shared_backend):
    """Seeds appear in evaluation messages; a kernel that re-draws its inputs from one (to
    compute the answer on the host) is refused: kernels have no random number generator."""
    text = body(
        """
x_again = np.random.RandomState(12345).randn(128, 256)
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out, value=nl.load(nl.shared_constant((x_again * 2).astype(np.float32))))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "rejected" and "'.RandomState'" in evaluation.message


async def test_computing_the_answer_on_the_host_while_tracing(shared_backend):
    """Reads the input's values through the emulator and embeds the finished answer as a
    constant: numerically perfect, and nearly free on the simulated hardware."""
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
answer = nl.shared_constant(np.asarray(x.data) * 2)
nl.store(out, value=nl.load(answer))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "rejected" and "'.data'" in evaluation.message
    assert evaluation.line == line_of(text, "x.data")


async def test_mutating_inputs(shared_backend):
    text = body(
        """
t = nl.load(x)
nl.store(x, value=nl.multiply(t, 2.0))
return x
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect" and "writes into its input 'x'" in evaluation.message
    assert evaluation.line == line_of(text, "nl.store(x")


async def test_writing_only_part_of_the_output(shared_backend):
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
t = nl.load(x[:, 0:128])
nl.store(out[:, 0:128], value=nl.multiply(t, 2.0))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect"
    assert f"{128 * 128} of {128 * 256} values NaN (unwritten or invalid)" in evaluation.message


async def test_lowering_precision_inside_the_kernel(shared_backend):
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
low = nl.load(x, dtype=nl.bfloat16)
nl.store(out, value=nl.multiply(low, 2.0, dtype=np.float32))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect" and evaluation.max_error is not None
    assert evaluation.max_error > 1e-4  # bf16 rounding, far above the fp32 tolerance


async def test_returning_a_lower_precision_output(shared_backend):
    text = body(
        """
out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
nl.store(out, value=nl.multiply(nl.load(x), 2.0))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert (
        evaluation.status == "incorrect" and "less precise than the reference's float32" in evaluation.message
    )


async def test_skipping_work_on_random_looking_inputs(shared_backend):
    """Does the first half properly and fills the rest with zeros (what a kernel that
    skips work when the data "looks random" would leave)."""
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out[:, 0:128], value=nl.multiply(nl.load(x[:, 0:128]), 2.0))
nl.store(out[:, 128:256], value=nl.zeros((128, 128), dtype=x.dtype))
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert evaluation.status == "incorrect" and evaluation.max_error == pytest.approx(np.sqrt(0.5), rel=0.05)


async def test_the_candidate_process_never_receives_reference_outputs(shared_backend, tmp_path, monkeypatch):
    """Reading the reference's result is impossible by construction: record what every worker
    was given and check the candidate's job holds only the inputs."""
    (tmp_path / "double_ref.py").write_text(
        "import numpy as np\n"
        "def get_inputs(size='full'):\n    return [np.random.randn(128, 256).astype(np.float32)]\n"
        "def forward(x):\n    return x * 2\n"
        "def transform_to_nki_inputs(inputs):\n    return list(inputs)\n"
        # Not the identity pairing, so the module's own transform runs in a third worker.
        "def transform_nki_outputs(kernel_out, ref_out):\n    return [kernel_out.reshape(-1)], [ref_out.reshape(-1)]\n"
    )
    text = HAND_WRITTEN.replace(
        "# accelopt: inputs x=float32[128,256]", "# accelopt: reference double_ref.py"
    )
    candidate = kernel(text).model_copy(update={"path": str(tmp_path / "double.py")})
    task = task_for_kernel(candidate)
    given = []
    real_prepare = shared_backend.sandbox.prepare

    def recording_prepare(job, inputs=None, bundle=None, **options):
        given.append((job.mode, dict(inputs or {}), bundle))
        return real_prepare(job, inputs, bundle, **options)

    monkeypatch.setattr(shared_backend.sandbox, "prepare", recording_prepare)
    evaluation = await shared_backend.evaluate(candidate, task, OPTIONS)
    assert evaluation.status == "ok", evaluation.message
    assert [mode for mode, _, _ in given] == ["reference", "kernel", "transform"]
    _, kernel_inputs, kernel_bundle = given[1]
    assert kernel_bundle is None and len(kernel_inputs) == 2  # one input per seed, nothing else
    reference_outputs = [v for k, v in given[2][2].items() if k.startswith("r")]
    for array in kernel_inputs.values():
        assert not any(np.array_equal(array, ref) for ref in reference_outputs)
