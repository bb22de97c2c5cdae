"""The `simulator` backend: emulate a kernel in a sandboxed worker, judge it, time it.

One evaluation is up to three sandboxed runs, each in its own worker process:

1. the *reference* (cached per task and seed): a reference module's inputs and outputs, or
   the baseline kernel's outputs on declared inputs;
2. the *candidate*: the kernel on those inputs (numerics for correctness, or trace-only);
3. for reference-module tasks, the module's `transform_nki_outputs` on both sides' outputs (it is
   user code, so it runs sandboxed; the candidate's process never sees the reference outputs).
   Skipped when the function is, read statically, the identity pairing (every shipped module).

Each run has its own wall-clock limit (`EvaluationOptions.timeout_s`) and a matching CPU limit.

Only the slice of the kernel's file that the kernel reaches runs (`module_slice`, `siblings`).
Small tasks run every seed in one worker per step; at full size (a seed's arrays past
`worker_memory.BATCH_BYTES`) each seed runs in a worker of its own, whose memory limit is sized
from the task and the machine, the reference cache moves to memory-mapped files, and outputs are
compared chunk by chunk, so neither side holds more than one seed's arrays at a time.

The trusted parent compares outputs (`compare.py`) and times the trace
(`accelopt.profiling.metrics.profile_trace`). Seeds are secret and drawn per task by this
process (`secrets`), so a kernel cannot know its inputs in advance; the inputs' fingerprints are
checked after the run so a kernel cannot pass by editing them.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace
from accelopt.profiling import arrays
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.compare import compare_outputs
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.inputs import generate_inputs
from accelopt.profiling.module_slice import ModuleSlice
from accelopt.profiling.policy import check_source
from accelopt.profiling.profile import Profile
from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.siblings import SiblingError, kernel_program
from accelopt.profiling.task import Task, transform_is_identity
from accelopt.profiling.worker_memory import (
    BATCH_BYTES,
    MemoryPlan,
    kernel_plan,
    out_of_memory_advice,
    reference_plan,
    seeds_per_worker,
    widened,
)
from accelopt.profiling.worker_protocol import ModuleBinding, ResourceLimits, SiblingSource, WorkerJob

# Above this much cached reference data per task, the cache lives in files mapped into memory
# (the page cache keeps it warm; the process does not hold gigabytes per task).
_CACHE_IN_MEMORY_BYTES = 1 << 30

_KERNEL_PLACEHOLDER_PATH = "<kernel>"


@dataclass
class SimulatedRun:
    """An evaluation plus what produced its profile (for `--trace-out`)."""

    evaluation: Evaluation
    trace: Trace | None = None
    timeline: Any = None


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
    # one seed's kernel inputs and reference outputs, in bytes (None until a run has shown them)
    input_bytes: int | None = None
    output_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    def footprint(self) -> int | None:
        """Bytes of one seed's data; before the outputs are known, guessed as the inputs again."""
        if self.input_bytes is None:
            return None
        return self.input_bytes + (self.output_bytes if self.output_bytes is not None else self.input_bytes)


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
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        """`fresh_seeds=True` draws new secret seeds for every evaluation (one extra reference
        run each time); by default the seeds are drawn once per task and kept secret in this
        process, so every candidate of a search is judged on the same unpredictable inputs.
        Seeds share a worker while their arrays stay under `batch_bytes` (`worker_memory`)."""
        self.sandbox = Sandbox(limits, isolate_network=isolate_network, work_root=work_root)
        self.fresh_seeds = fresh_seeds
        self._slots = asyncio.Semaphore(max_workers)
        self._max_workers = max_workers
        self._batch_bytes = batch_bytes
        self._tasks: OrderedDict[str, _TaskCache] = OrderedDict()
        self._cached_tasks = cached_tasks
        self._spill_dir: str | None = None

    # --- the Backend protocol --------------------------------------------------------------

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        return (await self.evaluate_detailed(kernel, task, options)).evaluation

    async def aclose(self) -> None:
        await self.sandbox.aclose()
        if self._spill_dir is not None:
            self._tasks.clear()  # the mapped files go with the cache
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

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
        runnable = _runnable(kernel)
        try:
            run = await self._evaluate_runnable(kernel, runnable, task, options)
        except _Failed as failed:
            failed.evaluation.notes[:0] = runnable.notes
            raise
        run.evaluation.notes[:0] = runnable.notes
        return run

    async def _evaluate_runnable(
        self, kernel: KernelSource, runnable: _Runnable, task: Task, options: EvaluationOptions
    ) -> SimulatedRun:
        """`kernel` is the user's file; `runnable` the slice of it that runs (same lines)."""
        _static_check(runnable.kernel)
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
        # The references show the task's footprint; then as many seeds share a kernel worker as
        # fit (all of them for small tasks, one at a time at full size).
        references = await self._references(task, cache, seeds, need_outputs, options.timeout_s)
        per_worker = seeds_per_worker(cache.footprint(), len(seeds), self._batch_bytes)
        trace: Trace | None = None
        max_error: float | None = 0.0 if check else None
        for start in range(0, len(seeds), per_worker):
            batch = seeds[start : start + per_worker]
            inputs = [references[s].inputs for s in batch]
            plan = self._kernel_plan(cache, len(batch), check)
            job = _kernel_job(runnable, numerics=check).model_copy(update={"return_trace": trace is None})
            outcome, plan = await self._run_kernel(job, options.timeout_s, inputs, plan)
            failure = _outcome_failure(outcome, batch, who=None)
            if failure is not None:
                failure = failure.model_copy(update={"seeds": seeds})
                return SimulatedRun(_with_memory_advice(failure, plan, task, len(seeds)))
            assert outcome.result is not None
            try:
                _check_inputs_untouched(outcome, inputs, batch)
                if trace is None:
                    trace = _parse_trace(outcome)
                    if check:
                        _check_no_input_writes(trace, seeds, outcome.result.runs[0].output_arguments)
                if check:
                    error = await self._judge(
                        task, outcome, references, batch, tolerance, is_baseline_itself, options
                    )
                    max_error = max(max_error or 0.0, error)
            except _Failed as failed:
                failed.evaluation.seeds = seeds  # the evaluation's seeds, not only this batch's
                raise
            del outcome, inputs  # one batch of kernel outputs at a time

        work = task.work or cache.work
        if work is None and task.kind == "baseline" and is_baseline_itself:
            work = await asyncio.to_thread(_work_from_trace, trace)
            cache.work = work
        profile, timeline = await asyncio.to_thread(_profile, trace, options.hardware, work, kernel.text)
        message = "" if profile is not None else "no timing model is available in this build"
        evaluation = Evaluation(
            status="ok",
            message=message,
            max_error=max_error,
            seeds=seeds,
            profile=profile,
            notes=list(cache.notes),
        )
        return SimulatedRun(evaluation, trace, timeline)

    def _kernel_plan(self, cache: _TaskCache, seeds: int, numerics: bool) -> MemoryPlan:
        footprint = cache.footprint() if numerics else cache.input_bytes
        return kernel_plan(
            self.sandbox.limits.memory_bytes,
            footprint,
            seeds,
            workers=self._max_workers,
            big_bytes=self._batch_bytes,
        )

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
        self, task: Task, cache: _TaskCache, seeds: list[int], need_outputs: bool, timeout_s: float
    ) -> dict[int, _SeedData]:
        async with cache.lock:
            missing = [
                s for s in seeds if s not in cache.seeds or (need_outputs and cache.seeds[s].outputs is None)
            ]
            while missing:
                # A worker stops once its arrays pass BATCH_BYTES: small tasks need one run for
                # every seed, big ones one run per seed (each side holds one seed at a time).
                if task.kind == "reference":
                    done = await self._run_reference_module(task, cache, missing, need_outputs, timeout_s)
                else:
                    done = await self._run_baseline(task, cache, missing, need_outputs, timeout_s)
                missing = missing[done:]
            found = {s: cache.seeds[s] for s in seeds}
            if self.fresh_seeds:
                for s in seeds:
                    cache.seeds.pop(s, None)
            return found

    async def _run_reference_module(
        self, task: Task, cache: _TaskCache, seeds: list[int], need_outputs: bool, timeout_s: float
    ) -> int:
        """Run the reference for `seeds` (or the first of them that fit one worker); returns
        how many were done."""
        job = WorkerJob(
            mode="reference",
            policy="reference",
            source=task.reference_text or "",
            source_path=task.reference_path or "<reference>",
            size=task.size,
            size_argument=task.size_argument,
            seeds=seeds,
            inputs_only=not need_outputs,
            max_run_bytes=self._batch_bytes,
        )
        plan = reference_plan(self.sandbox.limits.memory_bytes)
        outcome = await self._run(job, timeout_s, memory=plan)
        if outcome.result is not None and outcome.result.failure is None and outcome.result.runs:
            seeds = seeds[: len(outcome.result.runs)]
        failure = _outcome_failure(outcome, seeds, who="reference module")
        if failure is not None:
            raise _Failed(_with_memory_advice(failure, plan, task, len(seeds), who="the reference module"))
        assert outcome.result is not None
        if task.size_argument == "none" and task.size != "full":
            note = (
                f"the reference module's get_inputs() takes no size: its own shapes were used "
                f"(size {task.size!r} does not apply)"
            )
            if note not in cache.notes:
                cache.notes.append(note)
        for warning in outcome.result.warnings:
            where = f" (line {warning.line})" if warning.line else ""
            note = f"the reference module warned{where}: {warning.category}: {warning.message}"
            if note not in cache.notes:
                cache.notes.append(note)
        for i, seed in enumerate(seeds):
            self._remember(
                cache,
                seed,
                _SeedData(
                    inputs=outcome.group(i, "inputs"),
                    outputs=outcome.group(i, "outputs") if need_outputs else None,
                    structure=outcome.result.runs[i].structure,
                ),
            )
        if outcome.result.work is not None and cache.work is None:
            try:
                cache.work = Work(**outcome.result.work, source="task")
            except (TypeError, ValueError):
                cache.work = None
        return len(seeds)

    async def _run_baseline(
        self, task: Task, cache: _TaskCache, seeds: list[int], need_outputs: bool, timeout_s: float
    ) -> int:
        """The baseline kernel's outputs on declared inputs for `seeds` (or the first of them
        that fit one worker); returns how many were done."""
        if cache.input_bytes is None:
            cache.input_bytes = sum(a.nbytes for a in generate_inputs(task.inputs, seeds[0]))
        seeds = seeds[: seeds_per_worker(cache.footprint(), len(seeds), self._batch_bytes)]
        generated = {s: generate_inputs(task.inputs, s) for s in seeds}
        if not need_outputs:
            for s in seeds:
                if s not in cache.seeds:
                    self._remember(cache, s, _SeedData(inputs=generated[s], outputs=None))
            return len(seeds)
        assert task.baseline is not None
        plan = self._kernel_plan(cache, len(seeds), True)
        outcome, plan = await self._run_kernel(
            _kernel_job(_runnable(task.baseline), numerics=True), timeout_s, [generated[s] for s in seeds], plan
        )
        failure = _outcome_failure(outcome, seeds, who="baseline kernel (the correctness oracle)")
        if failure is not None:
            raise _Failed(
                _with_memory_advice(failure, plan, task, len(seeds), who="the baseline kernel (the oracle)")
            )
        assert outcome.result is not None
        for i, s in enumerate(seeds):
            self._remember(
                cache,
                s,
                _SeedData(
                    inputs=generated[s],
                    outputs=outcome.group(i, "outputs"),
                    structure=outcome.result.runs[i].structure,
                ),
            )
        if cache.work is None and outcome.trace_json is not None:
            try:
                cache.work = await asyncio.to_thread(_work_from_trace, Trace.from_json(outcome.trace_json))
            except Exception:  # a malformed oracle trace only costs the task-level roofline work
                cache.work = None
        return len(seeds)

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
        kernel_refs, ref_refs = [], []
        for i, seed in enumerate(seeds):
            k_names, r_names = [], []
            for j, a in enumerate(kernel_outputs[i]):
                bundle[f"k{i}_{j}"] = arrays.to_transport(a)
                k_names.append({"name": f"k{i}_{j}", "dtype": arrays.dtype_name(a), "shape": a.shape})
            for j, a in enumerate(references[seed].outputs or []):
                bundle[f"r{i}_{j}"] = arrays.to_transport(a)
                r_names.append({"name": f"r{i}_{j}", "dtype": arrays.dtype_name(a), "shape": a.shape})
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
        result = await self._run(job, timeout_s, bundle=bundle, memory=reference_plan(self.sandbox.limits.memory_bytes))
        failure = _outcome_failure(result, seeds, who="reference module's transform_nki_outputs")
        if failure is not None:
            if result.result is not None and result.result.failure is not None:
                # The transform choked on what the kernel returned: the kernel's outputs are wrong.
                failure = failure.model_copy(update={"status": "incorrect"})
            raise _Failed(failure)
        return [(result.group(i, "kernel"), result.group(i, "reference")) for i in range(len(seeds))]

    async def _run_kernel(
        self, job: WorkerJob, timeout_s: float, input_sets: list[list[np.ndarray]], plan: MemoryPlan
    ) -> tuple[WorkerOutcome, MemoryPlan]:
        """A kernel's worker run; once more with the worker's share of the free memory when it
        ran out of its estimated limit (`worker_memory.widened`)."""
        outcome = await self._run(job, timeout_s, input_sets, memory=plan)
        failure = outcome.result.failure if outcome.result is not None else None
        if failure is not None and failure.exception == "MemoryError":
            wider = widened(plan, workers=self._max_workers)
            if wider is not None:
                plan = wider
                outcome = await self._run(job, timeout_s, input_sets, memory=plan)
        return outcome, plan

    def _remember(self, cache: _TaskCache, seed: int, data: _SeedData) -> None:
        """Cache one seed's data; a big task's arrays go to files mapped into memory."""
        if cache.input_bytes is None or (data.outputs is not None and cache.output_bytes is None):
            cache.input_bytes = sum(a.nbytes for a in data.inputs)
            if data.outputs is not None:
                cache.output_bytes = sum(a.nbytes for a in data.outputs)
        if (cache.footprint() or 0) * max(len(cache.pool), 1) > _CACHE_IN_MEMORY_BYTES:
            data = _SeedData(
                inputs=[self._spill(a) for a in data.inputs],
                outputs=None if data.outputs is None else [self._spill(a) for a in data.outputs],
                structure=data.structure,
            )
        cache.seeds[seed] = data

    def _spill(self, array: np.ndarray) -> np.ndarray:
        if array.ndim == 0 or array.dtype.kind not in "biuf":
            return array  # scalars and ml_dtypes arrays stay in memory (.npy cannot map the latter)
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="accelopt-reference-cache-")
        handle, path = tempfile.mkstemp(suffix=".npy", dir=self._spill_dir)
        with open(handle, "wb") as f:
            np.save(f, array, allow_pickle=False)
        return np.load(path, mmap_mode="r", allow_pickle=False)

    # --- running a worker ----------------------------------------------------------------------

    async def _run(
        self,
        job: WorkerJob,
        timeout_s: float,
        input_sets: list[list[np.ndarray]] | None = None,
        *,
        bundle: dict[str, np.ndarray] | None = None,
        memory: MemoryPlan | None = None,
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
            files = await asyncio.to_thread(
                self.sandbox.prepare,
                job,
                arrays_in,
                bundle,
                timeout_s=timeout_s,
                memory_bytes=None if memory is None else memory.limit_bytes,
            )
            return await self.sandbox.run(files, timeout_s)


# --- helpers (pure functions over validated data) --------------------------------------------


@dataclass
class _Runnable:
    """What runs for a kernel: the slice of its file (under its own path, on its own lines),
    the slices of the modules beside it that it imports, and notes on what was left out."""

    kernel: KernelSource
    modules: list[SiblingSource]
    bindings: list[ModuleBinding]
    notes: list[str]


def _bindings(sliced: ModuleSlice) -> list[ModuleBinding]:
    return [ModuleBinding(target=i.target, module=i.module, attribute=i.attribute) for i in sliced.sibling_imports]


def _runnable(kernel: KernelSource) -> _Runnable:
    """The part of the kernel's file that runs in the sandbox (`module_slice`), with the
    sibling modules it imports (`siblings`), each checked by the policy."""
    try:
        program = kernel_program(kernel)
    except SyntaxError as exc:
        raise _Failed(
            Evaluation(status="syntax_error", message=f"SyntaxError: {exc.msg}", line=exc.lineno)
        ) from None
    except SiblingError as exc:
        where = f"{exc.path}:{exc.line}: " if exc.path and exc.line else f"{exc.path}: " if exc.path else ""
        status = "syntax_error" if exc.message.startswith("syntax error") else "runtime_error"
        raise _Failed(Evaluation(status=status, message=f"{where}{exc.message}")) from None
    sliced = program.kernel
    modules = []
    for module in program.modules:
        try:
            violation = check_source(module.sliced.text, "kernel")
        except SyntaxError as exc:  # parsed once already: only a slice bug could get here
            raise _Failed(Evaluation(status="syntax_error", message=f"{module.path}:{exc.lineno}: {exc.msg}")) from None
        if violation is not None:
            raise _Failed(
                Evaluation(
                    status="rejected", message=f"sandbox policy: {module.path}:{violation.line}: {violation.reason}"
                )
            )
        modules.append(
            SiblingSource(name=module.name, path=module.path, source=module.sliced.text, bindings=_bindings(module.sliced))
        )
    if not sliced.defines(kernel.name):
        where = kernel.path or _KERNEL_PLACEHOLDER_PATH
        raise _Failed(
            Evaluation(
                status="runtime_error",
                message=f"ValueError: kernel {kernel.name!r} is not defined in {where} "
                f"(functions: {', '.join(sliced.functions) or 'none'})",
            )
        )
    return _Runnable(kernel.model_copy(update={"text": sliced.text}), modules, _bindings(sliced), program.notes())


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


def _with_memory_advice(
    failure: Evaluation, plan: MemoryPlan, task: Task, seeds: int, who: str = "the kernel"
) -> Evaluation:
    """A run that ran out of memory says how much it had and what to do about it."""
    text = failure.message
    if "MemoryError" not in text and "out of memory" not in text:
        return failure
    advice = out_of_memory_advice(
        plan,
        seeds=seeds,
        size_adjustable=task.kind == "reference" and task.size_argument != "none",
        who=f"the sandboxed worker running {who}",
    )
    return failure.model_copy(update={"message": f"{text}. {advice}"})


def _kernel_job(runnable: _Runnable, *, numerics: bool) -> WorkerJob:
    kernel = runnable.kernel
    return WorkerJob(
        mode="kernel",
        policy="kernel",
        source=kernel.text,
        source_path=kernel.path or _KERNEL_PLACEHOLDER_PATH,
        kernel_name=kernel.name,
        numerics=numerics,
        modules=runnable.modules,
        bindings=runnable.bindings,
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


def _check_no_input_writes(trace: Trace | None, seeds: list[int], output_arguments: bool = False) -> None:
    """A kernel that writes into an input tensor fails, whatever its outputs (the emulator
    works on copies, so the check reads the trace rather than the arrays). A kernel that
    returns nothing and stores into some of its arguments (`def k(a, out)`, the output-argument
    style) has those arguments as its outputs: writing them is its job."""
    if trace is None:
        return
    inputs = {
        tid: info
        for tid, info in trace.tensors.items()
        if info.is_input and not (output_arguments and info.is_output)
    }
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
    if trace is None:
        return None
    try:
        from accelopt.hardware.roofline import work_from_trace
    except ImportError:
        return None
    return work_from_trace(trace)


def _profile(
    trace: Trace | None, hardware: str, work: Work | None, source_text: str
) -> tuple[Profile | None, Any]:
    """Integration point with the timing model (`accelopt.profiling.metrics`)."""
    if trace is None:
        return None, None
    try:
        from accelopt.profiling.metrics import profile_trace
    except ImportError:
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
