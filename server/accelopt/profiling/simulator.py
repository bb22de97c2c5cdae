"""The `simulator` backend: emulate a kernel in a sandboxed worker, judge it, time it.

One evaluation is up to three sandboxed runs, each in its own worker process:

1. the *reference* (cached per task and seed): a reference module's inputs and outputs, or
   the baseline kernel's outputs on declared inputs;
2. the *candidate*: the kernel on those inputs (numerics for correctness, or trace-only);
3. for reference-module tasks, the module's `transform_nki_outputs` on both sides' outputs (it is
   user code, so it runs sandboxed; the candidate's process never sees the reference outputs).
   Skipped when the function is, read statically, the identity pairing (every shipped module).

Each run has its own wall-clock limit (`EvaluationOptions.timeout_s`) and a matching CPU limit.

The trusted parent compares outputs (`compare.py`) and times the trace
(`accelopt.profiling.metrics.profile_trace`). Seeds are secret and drawn per task by this
process (`secrets`), so a kernel cannot know its inputs in advance; the inputs' fingerprints are
checked after the run so a kernel cannot pass by editing them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from accelopt.hardware.roofline import work_from_trace
from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace
from accelopt.profiling import arrays
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.compare import compare_outputs
from accelopt.profiling.deadline import DeadlineExceeded, within
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.inputs import DirectiveError, find_grid, generate_inputs
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.policy import check_source
from accelopt.profiling.profile import Profile
from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.task import Task, transform_is_identity
from accelopt.profiling.timeline import Timeline
from accelopt.profiling.worker_protocol import ArrayRef, ResourceLimits, WorkerJob

_KERNEL_PLACEHOLDER_PATH = "<kernel>"


@dataclass
class SimulatedRun:
    """An evaluation plus what produced its profile (for `--trace-out`)."""

    evaluation: Evaluation
    trace: Trace | None = None
    timeline: Timeline | None = None


@dataclass
class _SeedData:
    inputs: list[np.ndarray]
    outputs: list[np.ndarray] | None  # None: only the inputs are known
    structure: str = "single"


@dataclass
class _TaskCache:
    seeds: dict[int, _SeedData] = field(default_factory=dict)
    pool: list[int] = field(default_factory=list)
    work: Work | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Failed(Exception):
    """An evaluation ended early; carries its verdict."""

    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(evaluation.message)
        self.evaluation = evaluation


class SimulatorBackend:
    name = "simulator"

    def __init__(
        self,
        max_workers: int = 2,
        *,
        limits: ResourceLimits | None = None,
        isolate_network: bool = True,
        fresh_seeds: bool = False,
        cached_tasks: int = 4,
        work_root: str | None = None,
    ) -> None:
        """`fresh_seeds=True` draws new secret seeds for every evaluation (one extra reference
        run each time); by default the seeds are drawn once per task and kept secret in this
        process, so every candidate of a search is judged on the same unpredictable inputs."""
        self.sandbox = Sandbox(limits, isolate_network=isolate_network, work_root=work_root)
        self.fresh_seeds = fresh_seeds
        self._slots = asyncio.Semaphore(max_workers)
        self._tasks: OrderedDict[str, _TaskCache] = OrderedDict()
        self._cached_tasks = cached_tasks

    # --- the Backend protocol --------------------------------------------------------------

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        return (await self.evaluate_detailed(kernel, task, options)).evaluation

    async def aclose(self) -> None:
        await self.sandbox.aclose()

    def evaluate_sync(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> SimulatedRun:
        """For the command line: run one evaluation on a private event loop."""

        async def once() -> SimulatedRun:
            try:
                return await self.evaluate_detailed(kernel, task, options)
            finally:
                await self.aclose()

        return asyncio.run(once())

    async def evaluate_detailed(
        self, kernel: KernelSource, task: Task, options: EvaluationOptions
    ) -> SimulatedRun:
        started = time.perf_counter()
        try:
            run = await self._evaluate(kernel, task, options)
        except _Failed as failed:
            run = SimulatedRun(failed.evaluation)
        run.evaluation.wall_time_s = time.perf_counter() - started
        return run

    # --- one evaluation ------------------------------------------------------------------------

    async def _evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> SimulatedRun:
        _static_check(kernel)
        check = options.check_correctness
        tolerance = options.tolerance if options.tolerance is not None else task.tolerance
        cache = self._cache(task)
        seeds = self._seeds(cache, options.seeds if check else 1)
        is_baseline_itself = (
            task.kind == "baseline"
            and task.baseline is not None
            and task.baseline.normalized_hash() == kernel.normalized_hash()
        )
        need_outputs = check and not is_baseline_itself
        references = await self._references(
            task, cache, seeds, need_outputs, options.timeout_s, options.hardware
        )

        outcome = await self._run(
            _kernel_job(kernel, numerics=check, hardware=options.hardware, grid=task.grid),
            options.timeout_s,
            [references[s].inputs for s in seeds],
        )
        failure = _outcome_failure(outcome, seeds, who=None)
        if failure is not None:
            return SimulatedRun(failure)
        assert outcome.result is not None
        _check_inputs_untouched(outcome, [references[s].inputs for s in seeds], seeds)

        # Parsing and timing the trace are the parent's work on the kernel's data: bounded too.
        analysis = _Analysis(options.timeout_s, outcome.wall_time_s)
        trace = await analysis.run(_parse_trace, outcome)
        max_error: float | None = None
        if check:
            _check_no_input_writes(trace, seeds)
            max_error = await self._judge(
                task, outcome, references, seeds, tolerance, is_baseline_itself, options
            )

        work = task.work or cache.work
        if work is None and task.kind == "baseline" and is_baseline_itself:
            work = await analysis.run(_work_from_trace, trace)
            cache.work = work
        profile, timeline = await analysis.run(_profile, trace, options.hardware, work, kernel.text)
        message = "" if profile is not None else "the worker returned no instruction trace to time"
        evaluation = Evaluation(
            status="ok", message=message, max_error=max_error, seeds=seeds, profile=profile
        )
        return SimulatedRun(evaluation, trace, timeline)

    async def _judge(
        self,
        task: Task,
        outcome: WorkerOutcome,
        references: dict[int, _SeedData],
        seeds: list[int],
        tolerance: float,
        is_baseline_itself: bool,
        options: EvaluationOptions,
    ) -> float:
        assert outcome.result is not None
        kernel_outputs = [outcome.group(i, "outputs") for i in range(len(seeds))]
        single = all(run.structure == "single" for run in outcome.result.runs) and all(
            len(k) == 1 and len(references[s].outputs or []) == 1 for k, s in zip(kernel_outputs, seeds)
        )
        if task.kind == "reference" and single and transform_is_identity(task.reference_text or ""):
            # The module pairs outputs as they are: no need to run its code once more.
            pairs = [(k, references[s].outputs or []) for k, s in zip(kernel_outputs, seeds)]
        elif task.kind == "reference":
            pairs = await self._transform(task, outcome, kernel_outputs, references, seeds, options.timeout_s)
        elif is_baseline_itself:  # the kernel is its own oracle: only NaN/unwritten checks apply
            pairs = [(k, k) for k in kernel_outputs]
        else:
            pairs = [(k, references[s].outputs or []) for k, s in zip(kernel_outputs, seeds)]
        worst = 0.0
        for (k, r), seed in zip(pairs, seeds):
            verdict = await asyncio.to_thread(compare_outputs, k, r, tolerance, seed=seed)
            if not verdict.ok:
                raise _Failed(
                    Evaluation(
                        status="incorrect", message=verdict.message, max_error=verdict.max_error, seeds=seeds
                    )
                )
            worst = max(worst, verdict.max_error or 0.0)
        return worst

    # --- seeds and the reference cache ---------------------------------------------------------

    def _cache(self, task: Task) -> _TaskCache:
        key = task.key()
        cache = self._tasks.pop(key, None) or _TaskCache()
        self._tasks[key] = cache
        while len(self._tasks) > self._cached_tasks:
            self._tasks.popitem(last=False)
        return cache

    def _seeds(self, cache: _TaskCache, count: int) -> list[int]:
        if self.fresh_seeds:
            return [secrets.randbelow(2**31) for _ in range(count)]
        while len(cache.pool) < count:
            cache.pool.append(secrets.randbelow(2**31))
        return cache.pool[:count]

    async def _references(
        self,
        task: Task,
        cache: _TaskCache,
        seeds: list[int],
        need_outputs: bool,
        timeout_s: float,
        hardware: str = "trn1",
    ) -> dict[int, _SeedData]:
        async with cache.lock:
            missing = [
                s for s in seeds if s not in cache.seeds or (need_outputs and cache.seeds[s].outputs is None)
            ]
            if missing:
                if task.kind == "reference":
                    await self._run_reference_module(task, cache, missing, need_outputs, timeout_s)
                else:
                    await self._run_baseline(task, cache, missing, need_outputs, timeout_s, hardware)
            found = {s: cache.seeds[s] for s in seeds}
            if self.fresh_seeds:
                for s in seeds:
                    cache.seeds.pop(s, None)
            return found

    async def _run_reference_module(
        self, task: Task, cache: _TaskCache, seeds: list[int], need_outputs: bool, timeout_s: float
    ) -> None:
        job = WorkerJob(
            mode="reference",
            policy="reference",
            source=task.reference_text or "",
            source_path=task.reference_path or "<reference>",
            size=task.size,
            seeds=seeds,
            inputs_only=not need_outputs,
        )
        outcome = await self._run(job, timeout_s)
        failure = _outcome_failure(outcome, seeds, who="reference module")
        if failure is not None:
            raise _Failed(failure)
        assert outcome.result is not None
        for i, seed in enumerate(seeds):
            cache.seeds[seed] = _SeedData(
                inputs=outcome.group(i, "inputs"),
                outputs=outcome.group(i, "outputs") if need_outputs else None,
                structure=outcome.result.runs[i].structure,
            )
        if outcome.result.work is not None and cache.work is None:
            try:
                cache.work = Work(**outcome.result.work, source="task")
            except (TypeError, ValueError):
                cache.work = None

    async def _run_baseline(
        self,
        task: Task,
        cache: _TaskCache,
        seeds: list[int],
        need_outputs: bool,
        timeout_s: float,
        hardware: str = "trn1",
    ) -> None:
        generated = {s: generate_inputs(task.inputs, s) for s in seeds}
        if not need_outputs:
            for s in seeds:
                cache.seeds.setdefault(s, _SeedData(inputs=generated[s], outputs=None))
            return
        assert task.baseline is not None
        outcome = await self._run(
            _kernel_job(task.baseline, numerics=True, hardware=hardware, grid=task.grid), timeout_s, [generated[s] for s in seeds]
        )
        failure = _outcome_failure(outcome, seeds, who="baseline kernel (the correctness oracle)")
        if failure is not None:
            raise _Failed(failure)
        assert outcome.result is not None
        for i, s in enumerate(seeds):
            cache.seeds[s] = _SeedData(
                inputs=generated[s],
                outputs=outcome.group(i, "outputs"),
                structure=outcome.result.runs[i].structure,
            )
        if cache.work is None and outcome.trace_json is not None:
            try:
                analysis = _Analysis(timeout_s, outcome.wall_time_s)
                trace = await analysis.run(Trace.from_json, outcome.trace_json)
                cache.work = await analysis.run(_work_from_trace, trace)
            except Exception:  # a malformed or huge oracle trace only costs the task's roofline work
                cache.work = None

    async def _transform(
        self,
        task: Task,
        outcome: WorkerOutcome,
        kernel_outputs: list[list[np.ndarray]],
        references: dict[int, _SeedData],
        seeds: list[int],
        timeout_s: float,
    ) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
        assert outcome.result is not None
        bundle: dict[str, np.ndarray] = {}
        kernel_refs: list[list[ArrayRef]] = []
        ref_refs: list[list[ArrayRef]] = []
        for i, seed in enumerate(seeds):
            k_names: list[ArrayRef] = []
            r_names: list[ArrayRef] = []
            for j, a in enumerate(kernel_outputs[i]):
                bundle[f"k{i}_{j}"] = arrays.to_transport(a)
                k_names.append(ArrayRef(name=f"k{i}_{j}", dtype=arrays.dtype_name(a), shape=a.shape))
            for j, a in enumerate(references[seed].outputs or []):
                bundle[f"r{i}_{j}"] = arrays.to_transport(a)
                r_names.append(ArrayRef(name=f"r{i}_{j}", dtype=arrays.dtype_name(a), shape=a.shape))
            kernel_refs.append(k_names)
            ref_refs.append(r_names)
        job = WorkerJob(
            mode="transform",
            policy="reference",
            source=task.reference_text or "",
            source_path=task.reference_path or "<reference>",
            kernel_outputs=kernel_refs,
            kernel_structures=[run.structure for run in outcome.result.runs],
            reference_outputs=ref_refs,
        )
        result = await self._run(job, timeout_s, bundle=bundle)
        failure = _outcome_failure(result, seeds, who="reference module's transform_nki_outputs")
        if failure is not None:
            if result.result is not None and result.result.failure is not None:
                # The transform choked on what the kernel returned: the kernel's outputs are wrong.
                failure = failure.model_copy(update={"status": "incorrect"})
            raise _Failed(failure)
        return [(result.group(i, "kernel"), result.group(i, "reference")) for i in range(len(seeds))]

    # --- running a worker ----------------------------------------------------------------------

    async def _run(
        self,
        job: WorkerJob,
        timeout_s: float,
        input_sets: list[list[np.ndarray]] | None = None,
        *,
        bundle: dict[str, np.ndarray] | None = None,
    ) -> WorkerOutcome:
        """One sandboxed worker run, holding one of the backend's worker slots. `input_sets` are
        the kernel's inputs, one list per run (seed)."""
        arrays_in = {
            f"s{i}_{j}": a for i, inputs in enumerate(input_sets or []) for j, a in enumerate(inputs)
        }
        refs = [
            [self.sandbox.input_ref(f"s{i}_{j}", a) for j, a in enumerate(inputs)]
            for i, inputs in enumerate(input_sets or [])
        ]
        job = job.model_copy(update={"inputs": refs or job.inputs})
        async with self._slots:
            files = await asyncio.to_thread(self.sandbox.prepare, job, arrays_in, bundle, timeout_s=timeout_s)
            return await self.sandbox.run(files, timeout_s)


# --- helpers (pure functions over validated data) --------------------------------------------


def _static_check(kernel: KernelSource) -> None:
    try:
        violation = check_source(kernel.text, "kernel")
    except SyntaxError as exc:
        raise _Failed(
            Evaluation(status="syntax_error", message=f"SyntaxError: {exc.msg}", line=exc.lineno)
        ) from None
    if violation is not None:
        raise _Failed(
            Evaluation(status="rejected", message=f"sandbox policy: {violation.reason}", line=violation.line)
        )


def _kernel_job(
    kernel: KernelSource, *, numerics: bool, hardware: str, grid: str | None = None
) -> WorkerJob:
    """A kernel run in a worker; the kernel's own `# accelopt: grid` wins over the task's `grid`."""
    try:
        grid = find_grid(kernel.text, kernel.name) or grid
    except DirectiveError as exc:
        raise _Failed(Evaluation(status="compile_error", message=exc.message, line=exc.line)) from None
    return WorkerJob(
        mode="kernel",
        policy="kernel",
        source=kernel.text,
        source_path=kernel.path or _KERNEL_PLACEHOLDER_PATH,
        kernel_name=kernel.name,
        numerics=numerics,
        hardware=hardware,
        grid=grid,
    )


def _outcome_failure(outcome: WorkerOutcome, seeds: list[int], who: str | None) -> Evaluation | None:
    prefix = f"{who}: " if who else ""
    if outcome.kind == "timeout":
        return Evaluation(status="timeout", message=prefix + outcome.message, seeds=seeds)
    if outcome.kind == "crashed" or outcome.result is None:
        return Evaluation(status="runtime_error", message=prefix + outcome.message, seeds=seeds)
    failure = outcome.result.failure
    if failure is None:
        if len(outcome.result.runs) != len(seeds) and outcome.result.runs:
            return Evaluation(
                status="runtime_error",
                message=f"{prefix}the worker reported {len(outcome.result.runs)} runs for {len(seeds)} seeds",
                seeds=seeds,
            )
        return None
    message = failure.message
    if failure.kind == "syntax_error" and not message.startswith("SyntaxError"):
        message = f"SyntaxError: {message}"
    if failure.kind == "rejected":
        message = f"sandbox policy: {message}"
    if who is not None:
        # The task's own code failed; the candidate is not to blame for the kind of failure.
        return Evaluation(status="runtime_error", message=prefix + message, seeds=seeds)
    return Evaluation(
        status=failure.kind, message=message, error_code=failure.error_code, line=failure.line, seeds=seeds
    )


def _check_inputs_untouched(outcome: WorkerOutcome, inputs: list[list[np.ndarray]], seeds: list[int]) -> None:
    assert outcome.result is not None
    for run, given, seed in zip(outcome.result.runs, inputs, seeds):
        expected = [arrays.fingerprint(a) for a in given]
        if run.input_fingerprints != expected:
            changed = [i for i, (a, b) in enumerate(zip(run.input_fingerprints, expected)) if a != b]
            which = f"input {changed[0]}" if changed else "its inputs"
            raise _Failed(
                Evaluation(
                    status="incorrect",
                    message=f"the kernel modified {which} (seed {seed}); kernels must not write their inputs",
                    seeds=seeds,
                )
            )


def _check_no_input_writes(trace: Trace | None, seeds: list[int]) -> None:
    """A kernel that writes into an input tensor fails, whatever its outputs (the emulator
    works on copies, so the check reads the trace rather than the arrays)."""
    if trace is None:
        return
    inputs = {tid: info for tid, info in trace.tensors.items() if info.is_input}
    for record in trace.records:
        for region in record.writes:
            if region.tensor_id in inputs:
                raise _Failed(
                    Evaluation(
                        status="incorrect",
                        message=f"the kernel writes into its input '{inputs[region.tensor_id].name}'; "
                        "kernels must not modify their inputs",
                        line=record.line,
                        seeds=seeds,
                    )
                )


T = TypeVar("T")


class _Analysis:
    """The parent's share of one evaluation's time: whatever the worker left of the timeout, but
    at least a quarter of it (and 2 s), so a kernel that records a huge trace ends as a
    `timeout` shortly after its timeout instead of keeping the parent busy (`deadline.within`
    stops the work)."""

    def __init__(self, timeout_s: float, worker_s: float) -> None:
        self.timeout_s = timeout_s
        self.budget_s = max(timeout_s - worker_s, 0.25 * timeout_s, 2.0)
        self.deadline = time.monotonic() + self.budget_s

    async def run(self, work: Callable[..., T], *args: object) -> T:
        try:
            return await within(self.deadline - time.monotonic(), work, *args)
        except DeadlineExceeded:
            raise _Failed(
                Evaluation(
                    status="timeout",
                    message=f"reading and timing the kernel's trace took longer than the "
                    f"{self.budget_s:.0f} s left of its {self.timeout_s:g} s timeout",
                )
            ) from None


def _parse_trace(outcome: WorkerOutcome) -> Trace | None:
    if outcome.trace_json is None:
        return None
    try:
        return Trace.from_json(outcome.trace_json)
    except Exception as exc:  # untrusted data: any malformation is the kernel's problem
        raise _Failed(
            Evaluation(
                status="runtime_error", message=f"the worker returned an invalid trace ({type(exc).__name__})"
            )
        ) from None


def _work_from_trace(trace: Trace | None) -> Work | None:
    return work_from_trace(trace) if trace is not None else None


def _profile(
    trace: Trace | None, hardware: str, work: Work | None, source_text: str
) -> tuple[Profile | None, Timeline | None]:
    """Integration point with the timing model (`accelopt.profiling.metrics`)."""
    if trace is None:
        return None, None
    try:
        return profile_trace(trace, hardware, work, source_text=source_text)
    except Exception as exc:  # the trace came from untrusted code: a model failure is a result
        raise _Failed(
            Evaluation(
                status="runtime_error",
                message=f"the timing model could not schedule this kernel: {type(exc).__name__}: {exc}",
            )
        ) from None
