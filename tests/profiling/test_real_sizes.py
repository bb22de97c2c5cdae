"""Real sizes: a reference module offering a small size beside its full one has a full-size
evaluation checked (and verified) at the small size and timed at the full one; the evaluation
says so, and a kernel that runs other code at the size it is timed at is rejected."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace
from accelopt.profiling.arrays import shape_only
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.real_size import check_size_of, split_for
from accelopt.profiling.sandbox import Sandbox
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.task import task_for_kernel
from accelopt.profiling.worker_protocol import WorkerJob

ROOT = Path(__file__).resolve().parents[2]
SILU = ROOT / "kernels_examples" / "silu.py"
OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)
FULL_BYTES, SMALL_BYTES = 512 * 2048 * 4, 256 * 1024 * 4  # silu_ref.py's SHAPES, fp32


def silu(old: str = "", new: str = "") -> KernelSource:
    text = SILU.read_text()
    assert old in text
    return KernelSource(text=text.replace(old, new) if old else text, name="silu_kernel", path=str(SILU))


@pytest.fixture(scope="module")
def backend():
    simulator = SimulatorBackend(max_workers=1)
    yield simulator
    asyncio.run(simulator.aclose())


def test_which_size_is_checked_and_which_is_timed():
    task = task_for_kernel(silu(), size="full")
    assert check_size_of(task) == "small"
    split = split_for(task, OPTIONS)
    assert split is not None and split.check.size == "small" and split.timed.size == "full"
    assert split_for(task, OPTIONS.model_copy(update={"check_correctness": False})) is None  # profile only
    assert split_for(task_for_kernel(silu(), size="small"), OPTIONS) is None
    assert split_for(task.model_copy(update={"check_size": "full"}), OPTIONS) is None
    declared = silu().model_copy(
        update={
            "text": silu().text.replace(
                "# accelopt: reference silu_ref.py", "# accelopt: inputs x=float32[256,1024]"
            )
        }
    )
    assert split_for(task_for_kernel(declared), OPTIONS) is None  # no sizes: one size for both


def test_a_full_size_evaluation_is_checked_small_and_timed_full(backend):
    kernel = silu()
    real = asyncio.run(backend.evaluate(kernel, task_for_kernel(kernel, size="full"), OPTIONS))
    assert real.status == "ok", real.message
    assert (real.checked_size, real.timed_size) == ("small", "full")
    assert real.max_error is not None and real.max_error < 1e-5 and len(real.seeds) == 2
    assert real.profile is not None and real.profile.hbm_read_bytes >= FULL_BYTES  # the full-size trace
    assert not real.verified  # the timed trace is a trace-only run: not re-run, and it says so
    notes = " ".join(real.notes)
    assert "correctness checked at the small size (256x1024)" in notes
    assert "timed at the full size (512x2048) by a trace-only run" in notes
    assert real.timed_input_shapes == {"x": [512, 2048]}  # what the agents' size facts read
    assert real.timed_input_dtypes == {"x": "float32"}  # and the bytes of each element
    small = asyncio.run(backend.evaluate(kernel, task_for_kernel(kernel, size="small"), OPTIONS))
    assert (small.checked_size, small.timed_size, small.verified) == ("small", "small", True)
    assert small.timed_input_shapes == {} and small.timed_input_dtypes == {}  # one size: no size facts
    assert small.profile is not None and SMALL_BYTES <= small.profile.hbm_read_bytes < FULL_BYTES
    assert real.profile.latency_ms > small.profile.latency_ms


def test_a_kernel_wrong_at_the_small_size_is_incorrect_there(backend):
    wrong = silu("result = nl.multiply(tile, gate)", "result = nl.add(tile, gate)")
    evaluation = asyncio.run(backend.evaluate(wrong, task_for_kernel(wrong, size="full"), OPTIONS))
    assert evaluation.status == "incorrect" and evaluation.checked_size == "small"
    assert evaluation.profile is None
    assert any("checked at the small size" in note for note in evaluation.notes)


def test_a_kernel_that_runs_other_code_at_the_full_size_is_rejected(backend):
    # Correct at both sizes, but at 2048 columns it takes a path the verified small-size run
    # never took: the full-size trace is then not the kind of trace that was verified.
    branching = silu(
        "            result = nl.multiply(tile, gate)\n",
        "            if cols > 1024:\n"
        "                result = nl.multiply(gate, tile)\n"
        "            else:\n"
        "                result = nl.multiply(tile, gate)\n",
    )
    task = task_for_kernel(branching, size="full").model_copy(update={"name": "silu_branching"})
    evaluation = asyncio.run(backend.evaluate(branching, task, OPTIONS))
    assert evaluation.status == "rejected", evaluation.message
    assert (
        "the kernel issues instructions its verified run at the small size never issued" in evaluation.message
    )
    assert evaluation.profile is None and evaluation.line is not None
    assert "nl.multiply(gate, tile)" in branching.text.splitlines()[evaluation.line - 1]


def test_the_search_report_says_which_size_was_checked_and_which_timed():
    from accelopt.search.candidate import Candidate
    from accelopt.search.config import SearchConfig
    from accelopt.search.events import Started
    from accelopt.search.report import build_report

    baseline = Candidate(
        id="c0",
        parent_id=None,
        iteration=0,
        kernel=silu(),
        status="ok",
        latency_ms=0.01,
        checked_size="small",
        timed_size="full",
        evaluation_notes=["timed at the full size (512x2048) by a trace-only run"],
    )
    started = Started(
        search_id="s",
        kernel_name="silu_kernel",
        backend="simulator",
        hardware="trn1",
        agents="offline",
        baseline=baseline,
        config=SearchConfig(),
    )
    report = build_report([started])
    assert "outputs checked at the small size, latencies timed at the full size" in report
    assert "timed at the full size (512x2048) by a trace-only run" in report


def _trace_only_job(kernel: KernelSource, inputs: list) -> WorkerJob:
    refs = [Sandbox.input_ref(f"s0_{j}", a) for j, a in enumerate(inputs)]
    return WorkerJob(
        mode="kernel",
        policy="kernel",
        source=kernel.text,
        source_path=kernel.path or "<kernel>",
        kernel_name=kernel.name,
        numerics=False,
        inputs=[refs],
    )


def test_a_trace_only_run_given_shapes_only_traces_and_times_as_given_the_values(sandbox):
    # The timing run gets its inputs' shapes and dtypes, not their values (arrays.ShapeOnly);
    # the previous path sent the values. Same trace, so the same profile.
    kernel = silu()
    x = np.random.default_rng(0).standard_normal((256, 1024), dtype=np.float32)
    traces = []
    for given in (x, shape_only(x.shape, x.dtype)):
        files = sandbox.prepare(_trace_only_job(kernel, [given]), {"s0_0": given})
        written = sorted(p.name for p in (files.root / "in").iterdir())
        assert written == (["s0_0.npy"] if given is x else [])  # shapes only: no file
        outcome = sandbox.run_sync(files, 60)
        assert outcome.kind == "finished" and outcome.result is not None and outcome.result.failure is None
        assert outcome.trace_json is not None
        traces.append(Trace.from_json(outcome.trace_json))
    with_values, with_shapes = traces
    assert with_shapes.to_json() == with_values.to_json() and len(with_values.records) > 0
    work = Work(matmul_flops=0.0, vector_flops=3.0 * x.size, hbm_bytes=8.0 * x.size, source="task")
    profiles = [profile_trace(t, "trn1", work, source_text=kernel.text)[0] for t in traces]
    assert profiles[1].model_dump() == profiles[0].model_dump()


def test_a_timed_only_run_writes_no_full_size_array_file(tmp_path):
    # silu at a full size too big to be a hidden check size (32x the small one): the full size
    # is only timed, and no array of it is written or read by any worker
    big = 1024 * 8192 * 4
    reference = (ROOT / "kernels_examples" / "silu_ref.py").read_text()
    assert '"full": (512, 2048)' in reference
    (tmp_path / "silu_ref.py").write_text(reference.replace('"full": (512, 2048)', '"full": (1024, 8192)'))
    (tmp_path / "silu.py").write_text(SILU.read_text())
    kernel = KernelSource(text=SILU.read_text(), name="silu_kernel", path=str(tmp_path / "silu.py"))
    simulator = SimulatorBackend(max_workers=1)
    files_in: list[tuple[str, bool, list[tuple[tuple[int, ...], bool]], list[int]]] = []
    returned: list[int] = []
    prepare, run = simulator.sandbox.prepare, simulator.sandbox.run

    def spy_prepare(job, inputs=None, bundle=None, **kwargs):
        files = prepare(job, inputs, bundle, **kwargs)
        refs = [(tuple(r.shape), r.stored) for rs in files.job.inputs for r in rs]
        files_in.append(
            (job.mode, job.numerics, refs, [p.stat().st_size for p in (files.root / "in").rglob("*.npy")])
        )
        return files

    async def spy_run(files, timeout_s):
        outcome = await run(files, timeout_s)
        returned.extend(a.nbytes for a in outcome.arrays.values())
        return outcome

    simulator.sandbox.prepare, simulator.sandbox.run = spy_prepare, spy_run  # type: ignore[method-assign]
    try:
        evaluation = asyncio.run(simulator.evaluate(kernel, task_for_kernel(kernel, size="full"), OPTIONS))
    finally:
        asyncio.run(simulator.aclose())
    assert evaluation.status == "ok", evaluation.message
    assert (evaluation.checked_size, evaluation.timed_size) == ("small", "full")
    assert evaluation.profile is not None and evaluation.profile.hbm_read_bytes >= big
    timed = [refs for mode, numerics, refs, _ in files_in if mode == "kernel" and not numerics]
    # the full-size run and its mirror at the small size: their inputs' shapes, no values
    assert timed == [[((1024, 8192), False)], [((256, 1024), False)]]
    assert all(size <= SMALL_BYTES + 128 for *_, sizes in files_in for size in sizes)  # no full-size file in
    assert returned and all(nbytes <= SMALL_BYTES for nbytes in returned)  # nor out
