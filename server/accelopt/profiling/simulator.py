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

A checked evaluation is also verified (`verification.py`, SECURITY.md "Verified evaluations"):
the candidate's recorded API calls are re-run in this process, without its code, on the inputs
of a secret seed it never received; the re-run must reproduce the reference and the returned
trace, and only the re-run's trace is timed. When the reference module offers another size, the
candidate also runs on inputs of a size drawn secretly (one more input set in the same worker).
Every profile must be plausible (`plausibility.py`): no faster than the roofline of the work.

Only the slice of the kernel's file that the kernel reaches runs (`module_slice`, `siblings`).
Workers hold one seed's arrays at a time (they stream each run's results to disk); a reference
worker stops once its arrays pass `worker_memory.BATCH_BYTES` and the next seeds go to another,
memory limits are sized from the task and the machine (`worker_memory`), a big task's cached
reference data moves to memory-mapped files, and outputs are compared chunk by chunk.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from accelopt.hardware.roofline import work_from_trace
from accelopt.hardware.work import Work
from accelopt.nki.apiversion import detect
from accelopt.nki.python_source import parse_lock
from accelopt.nki.trace import Trace
from accelopt.profiling import arrays, real_size
from accelopt.profiling.backend import EvaluationOptions, assumed, resolved_hardware
from accelopt.profiling.compare import compare_outputs
from accelopt.profiling.deadline import DeadlineExceeded, within
from accelopt.profiling.evaluation import EvalStatus, Evaluation, KernelSource
from accelopt.profiling.inputs import DirectiveError, find_grid, generate_inputs, tuple_arguments
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.module_slice import ModuleSlice
from accelopt.profiling.plausibility import implausibility
from accelopt.profiling.policy import check_source
from accelopt.profiling.profile import Profile
from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.siblings import SiblingError, kernel_program
from accelopt.profiling.task import Size, Task, hidden_sizes, transform_is_identity
from accelopt.profiling.timeline import Timeline
from accelopt.profiling.verification import VerificationFailed, rerun_returned_calls
from accelopt.profiling.worker_memory import (
    BATCH_BYTES,
    MemoryPlan,
    available_bytes,
    kernel_plan,
    out_of_memory_advice,
    reference_plan,
    widened,
)
from accelopt.profiling.worker_protocol import (
    ArrayRef,
    ModuleBinding,
    OutputStructure,
    ResourceLimits,
    SiblingSource,
    WorkerJob,
)

_KERNEL_PLACEHOLDER_PATH = "<kernel>"
# Tensor memory a trusted re-run of a call log may allocate in this process (the correctness
# sizes need a few MB; a forged log must not take the server's memory).
RERUN_MAX_BYTES = 1 << 30
# Above this much cached reference data per task, the cache lives in files mapped into memory
# (the page cache keeps it warm; the process does not hold gigabytes per task).
_CACHE_IN_MEMORY_BYTES = 1 << 30


@dataclass
class SimulatedRun:
    """An evaluation plus what produced its profile (for `--trace-out`)."""

    evaluation: Evaluation
    trace: Trace | None = None
    timeline: Timeline | None = None


@dataclass
class _SeedData:
    inputs: list[np.ndarray]  # `arrays.ShapeOnly` ones when only a trace-only run needed them
    outputs: list[np.ndarray] | None  # None: only the inputs are known
    structure: str = "single"

    def shapes_only(self) -> bool:
        return any(isinstance(a, arrays.ShapeOnly) for a in self.inputs)


@dataclass
class _Hidden:
    """The reference at a size the kernel cannot know in advance."""

    size: Size
    seed: int
    data: _SeedData


@dataclass
class _TaskCache:
    seeds: dict[int, _SeedData] = field(default_factory=dict)
    pool: list[int] = field(default_factory=list)
    verification_seed: int | None = None
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
        cached_tasks: int = 8,
        work_root: str | None = None,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        """`fresh_seeds=True` draws new secret seeds for every evaluation (one extra reference
        run each time); by default the seeds are drawn once per task and kept secret in this
        process, so every candidate of a search is judged on the same unpredictable inputs.
        A reference worker stops once its seeds' arrays pass `batch_bytes` (`worker_memory`)."""
        self.sandbox = Sandbox(limits, isolate_network=isolate_network, work_root=work_root)
        self.fresh_seeds = fresh_seeds
        self._slots = asyncio.Semaphore(max_workers)
        self._max_workers = max_workers
        self._batch_bytes = batch_bytes
        self._spill_dir: str | None = None
        self._tasks: OrderedDict[str, _TaskCache] = OrderedDict()
        self._cached_tasks = cached_tasks

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
        options = options.model_copy(update={"hardware": resolved_hardware(options, kernel)})
        split = real_size.split_for(task, options)
        try:
            if split is None:
                run = await self._evaluate(kernel, task, options)
            else:
                run = await self._evaluate_split(kernel, split, options)
        except _Failed as failed:
            run = SimulatedRun(failed.evaluation)
        if task.kind == "reference":
            run.evaluation.timed_size = run.evaluation.timed_size or task.size
            if options.check_correctness:
                run.evaluation.checked_size = run.evaluation.checked_size or real_size.check_size_of(task)
        run.evaluation.wall_time_s = time.perf_counter() - started
        run.evaluation.assumed = assumed(options, kernel)
        if run.evaluation.profile is not None:
            run.evaluation.profile.nki_api = detect(kernel.text).label
        return run

    # --- one evaluation ------------------------------------------------------------------------

    async def _evaluate_split(
        self, kernel: KernelSource, split: real_size.SizeSplit, options: EvaluationOptions
    ) -> SimulatedRun:
        """Checked at the small size, timed at the full one (`real_size`)."""
        try:
            checked = await self._evaluate(kernel, split.check, options)
        except _Failed as failed:
            checked = SimulatedRun(failed.evaluation)
        if not checked.evaluation.ok:
            checked.evaluation.notes.append(
                f"checked at the {split.check.size} size (it would be timed at {split.timed.size})"
            )
            return checked
        trace_only = options.model_copy(update={"check_correctness": False})
        # The timing run and its mirror at the check size (the same kind of run, in its own worker)
        # side by side: the mirror's trace must be the verified one (real_size.py, 3.).
        # (With one worker slot they queue anyway: one after the other, and no waiting on the slot.)
        timing = self._evaluate_or_failure(kernel, split.timed, trace_only)
        mirroring = self._evaluate_or_failure(kernel, split.check, trace_only)
        if self._max_workers > 1:
            timed, mirror = await asyncio.gather(timing, mirroring)
        else:
            timed, mirror = await timing, await mirroring
        # comparing ~100k-record traces takes a fraction of a second: off the event loop
        evaluation = await asyncio.to_thread(
            real_size.combined,
            split,
            checked.evaluation,
            checked.trace,
            timed.evaluation,
            timed.trace,
            mirror.evaluation,
            mirror.trace,
        )
        return SimulatedRun(evaluation, timed.trace, timed.timeline)

    async def _evaluate_or_failure(
        self, kernel: KernelSource, task: Task, options: EvaluationOptions
    ) -> SimulatedRun:
        try:
            return await self._evaluate(kernel, task, options)
        except _Failed as failed:
            return SimulatedRun(failed.evaluation)

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
        hardware = resolved_hardware(options, kernel)  # set by evaluate_detailed; typed here
        # The verification seed's reference comes with the others (one reference run per task).
        verification_seed = self._verification_seed(cache, seeds) if check else None
        wanted = [*seeds, verification_seed] if need_outputs and verification_seed is not None else seeds
        # A trace-only run reads no input values: it gets their shapes only (arrays.ShapeOnly).
        references = await self._references(
            task, cache, wanted, need_outputs, options.timeout_s, hardware, need_values=check
        )
        input_sets = [references[s].inputs if check else _shapes_of(references[s].inputs) for s in seeds]
        hidden: _Hidden | None = None
        if check:
            hidden = await self._hidden_size_reference(task, options.timeout_s, hardware)
            if hidden is not None:
                input_sets.append(hidden.data.inputs)

        # The worker runs the input sets one after another, holding one set's arrays at a time.
        # A big task's sets each get the timeout (as its reference does: one worker per seed).
        plan = self._kernel_plan(cache, check)
        per_set = (cache.footprint() or 0) >= self._batch_bytes
        kernel_timeout_s = options.timeout_s * (len(input_sets) if per_set else 1)
        outcome, plan = await self._run_kernel(
            _kernel_job(runnable, numerics=check, hardware=hardware, grid=task.grid, task=task),
            kernel_timeout_s,
            input_sets,
            plan,
        )
        failure = _outcome_failure(outcome, seeds, who=None, runs=len(input_sets))
        if failure is not None:
            failed = outcome.result.failure if outcome.result is not None else None
            if hidden is not None and failed is not None and failed.run == len(seeds):
                failure = failure.model_copy(update={"message": _at_hidden_size(hidden, failure.message)})
            return SimulatedRun(_with_memory_advice(failure, plan, task, len(seeds)))
        assert outcome.result is not None
        _check_inputs_untouched(outcome, input_sets, seeds)

        # Parsing and timing the trace are the parent's work on the kernel's data: bounded too.
        analysis = _Analysis(kernel_timeout_s, outcome.wall_time_s)
        trace = await analysis.run(_parse_trace, outcome)
        max_error: float | None = None
        verified = False
        if check:
            _check_no_input_writes(trace, seeds, outcome.result.runs[0].output_arguments)
            assert verification_seed is not None
            if verification_seed not in references:
                references |= await self._references(
                    task, cache, [verification_seed], True, options.timeout_s, hardware
                )
            max_error, trace = await self._judge(
                task,
                outcome,
                trace,
                [references[s] for s in seeds],
                seeds,
                hidden,
                (verification_seed, references[verification_seed]),
                tolerance,
                is_baseline_itself,
                options,
                self._rerun_max_bytes(cache, plan),
            )
            verified = True

        work = task.work or cache.work
        if work is None and task.kind == "baseline" and is_baseline_itself:
            work = await analysis.run(_work_from_trace, trace)
            cache.work = work
        profile, timeline = await analysis.run(_profile, trace, hardware, work, kernel.text)
        if profile is not None and trace is not None:
            reason = implausibility(profile, trace)
            if reason is not None:
                raise _Failed(
                    Evaluation(status="rejected", message=f"implausible profile: {reason}", seeds=seeds)
                )
        message = "" if profile is not None else "the worker returned no instruction trace to time"
        evaluation = Evaluation(
            status="ok",
            message=message,
            max_error=max_error,
            seeds=seeds,
            profile=profile,
            verified=verified,
            notes=list(cache.notes),
        )
        return SimulatedRun(evaluation, trace, timeline)

    def _rerun_max_bytes(self, cache: _TaskCache, plan: MemoryPlan) -> int:
        """Tensor memory the trusted re-run of a call log may allocate here: a few MB suffice at
        correctness sizes (a forged log must not take the server's memory), but a full-size
        task's re-run needs more. It runs in this process, whose memory the machine needs too: a
        re-run of the full-size matmul allowed the worker's whole share reached 24 GB resident
        and was killed by the kernel's OOM killer, so it gets at most a third of what is free."""
        small = min(self.sandbox.limits.memory_bytes, RERUN_MAX_BYTES)
        big = (cache.footprint() or 0) >= self._batch_bytes
        widened_run = plan.limit_bytes > max(self.sandbox.limits.memory_bytes, plan.needed_bytes)
        if not (big or widened_run):
            return small
        free = available_bytes()
        return max(small, plan.limit_bytes if free is None else min(plan.limit_bytes, free // 3))

    def _kernel_plan(self, cache: _TaskCache, numerics: bool) -> MemoryPlan:
        footprint = cache.footprint() if numerics else cache.input_bytes
        return kernel_plan(
            self.sandbox.limits.memory_bytes,
            footprint,
            1,
            workers=self._max_workers,
            big_bytes=self._batch_bytes,
        )

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

    async def _judge(
        self,
        task: Task,
        outcome: WorkerOutcome,
        trace: Trace | None,
        references: list[_SeedData],
        seeds: list[int],
        hidden: _Hidden | None,
        verification: tuple[int, _SeedData],
        tolerance: float,
        is_baseline_itself: bool,
        options: EvaluationOptions,
        rerun_max_bytes: int = RERUN_MAX_BYTES,
    ) -> tuple[float, Trace]:
        """Judge the candidate's outputs on the check seeds and at the hidden size, and verify
        its trace; returns the worst error and the verified trace. All pairs that need the
        reference module's `transform_nki_outputs` go to one sandboxed worker.

        Verification: the returned call log is re-run here, with no kernel code, on the inputs
        of a secret seed no candidate's process ever receives; its outputs must match the
        reference's and its trace must be the returned one. A wrong kernel is `incorrect` (with
        its error) before verification is looked at; a failed verification is `rejected`."""
        assert outcome.result is not None
        runs = outcome.result.runs
        count = len(seeds)
        kernel_outputs = [outcome.group(i, "outputs") for i in range(count)]
        structures = [run.structure for run in runs[:count]]
        batch: list[tuple[list[np.ndarray], OutputStructure, _SeedData, int]] = []
        if not is_baseline_itself:  # (else the kernel is its own oracle: only NaN/unwritten checks)
            batch += [(k, st, r, s) for k, st, r, s in zip(kernel_outputs, structures, references, seeds)]
        if hidden is not None:
            batch.append((outcome.group(count, "outputs"), runs[count].structure, hidden.data, hidden.seed))
        verify_failure: str | None = None
        rerun_run = None
        if trace is None:
            verify_failure = "the sandbox returned no trace to verify"
        else:
            try:
                rerun_run = await asyncio.to_thread(
                    rerun_returned_calls,
                    trace,
                    # the arrays only: scalar arguments are constants in the call log
                    [a for a in verification[1].inputs if np.ndim(a) > 0],
                    timeout_s=options.timeout_s,
                    max_bytes=rerun_max_bytes,
                )
            except VerificationFailed as exc:
                verify_failure = exc.message
        if rerun_run is not None:
            structure: OutputStructure = "single" if rerun_run.single else "tuple"
            batch.append((rerun_run.outputs, structure, verification[1], verification[0]))
        pairs = await self._pairs(
            task,
            [b[0] for b in batch],
            [b[1] for b in batch],
            [b[2] for b in batch],
            [b[3] for b in batch],
            options.timeout_s,
        )
        if is_baseline_itself:
            pairs = [(k, k) for k in kernel_outputs] + pairs
        worst = 0.0
        for i, (k, r) in enumerate(pairs):
            is_check, is_hidden = i < count, hidden is not None and i == count
            verdict = await asyncio.to_thread(
                compare_outputs, k, r, tolerance, seed=seeds[i] if is_check else None
            )
            if verdict.ok:
                if is_check:
                    worst = max(worst, verdict.max_error or 0.0)
                continue
            if is_check or is_hidden:
                message = verdict.message
                if is_hidden:
                    assert hidden is not None
                    message = _at_hidden_size(hidden, message)
                raise _Failed(
                    Evaluation(status="incorrect", message=message, max_error=verdict.max_error, seeds=seeds)
                )
            verify_failure = (
                "re-running the kernel's recorded calls on fresh inputs does not reproduce the reference "
                f"({verdict.message}); the outputs it returned were not computed by the calls it recorded"
            )
        if verify_failure is not None or rerun_run is None:
            raise _Failed(
                Evaluation(status="rejected", message=f"verification: {verify_failure}", seeds=seeds)
            )
        return worst, rerun_run.trace

    async def _pairs(
        self,
        task: Task,
        kernel_outputs: list[list[np.ndarray]],
        structures: list[OutputStructure],
        references: list[_SeedData],
        seeds: list[int],
        timeout_s: float,
    ) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
        """(kernel outputs, reference outputs) per run, as the task pairs them."""
        single = all(s == "single" for s in structures) and all(
            len(k) == 1 and len(r.outputs or []) == 1 for k, r in zip(kernel_outputs, references)
        )
        if task.kind == "reference" and not (single and transform_is_identity(task.reference_text or "")):
            return await self._transform(task, kernel_outputs, structures, references, seeds, timeout_s)
        # The module pairs outputs as they are (or the task is a baseline): no code to run.
        return [(k, r.outputs or []) for k, r in zip(kernel_outputs, references)]

    # --- seeds and the reference cache ---------------------------------------------------------

    def _cache(self, task: Task) -> _TaskCache:
        key = task.key()
        cache = self._tasks.pop(key, None) or _TaskCache()
        self._tasks[key] = cache
        while len(self._tasks) > self._cached_tasks:
            self._tasks.popitem(last=False)
        return cache

    def _verification_seed(self, cache: _TaskCache, seeds: list[int]) -> int:
        """A secret seed whose inputs no candidate's process ever receives: only the trusted
        re-run of a call log sees them (one per task, or per evaluation with `fresh_seeds`)."""
        if cache.verification_seed is None or self.fresh_seeds:
            seed = secrets.randbelow(2**31)
            while seed in seeds or seed in cache.pool:
                seed = secrets.randbelow(2**31)
            if self.fresh_seeds:
                return seed
            cache.verification_seed = seed
        return cache.verification_seed

    async def _hidden_size_reference(
        self, task: Task, timeout_s: float, hardware: str = "trn1"
    ) -> _Hidden | None:
        """Inputs and reference outputs at a size the reference module offers besides the
        task's, drawn secretly by this process (None if the module offers no other size small
        enough to check numerically; see `task.hidden_sizes`)."""
        if task.kind != "reference":
            return None
        sizes = hidden_sizes(task.reference_text or "", task.size)
        if not sizes:
            return None
        size = sizes[secrets.randbelow(len(sizes))]
        hidden_task = task.model_copy(update={"size": size})
        cache = self._cache(hidden_task)
        seed = self._seeds(cache, 1)[0]
        data = (await self._references(hidden_task, cache, [seed], True, timeout_s, hardware))[seed]
        return _Hidden(size=size, seed=seed, data=data)

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
        *,
        need_values: bool = True,
    ) -> dict[int, _SeedData]:
        """Each seed's inputs (and outputs when `need_outputs`); with `need_values=False` the
        inputs may be shapes only (`arrays.ShapeOnly`: for a trace-only run)."""
        async with cache.lock:
            missing = [
                s
                for s in seeds
                if s not in cache.seeds
                or (need_outputs and cache.seeds[s].outputs is None)
                or (need_values and cache.seeds[s].shapes_only())
            ]
            while missing:
                # A reference worker stops once its arrays pass the batch budget: small tasks
                # need one run for every seed, big ones one run per seed.
                if task.kind == "reference":
                    done = await self._run_reference_module(
                        task, cache, missing, need_outputs, timeout_s, need_values
                    )
                else:
                    await self._run_baseline(
                        task, cache, missing, need_outputs, timeout_s, hardware, need_values
                    )
                    done = len(missing)
                missing = missing[done:]
            found = {s: cache.seeds[s] for s in seeds}
            if self.fresh_seeds:
                for s in seeds:
                    cache.seeds.pop(s, None)
            return found

    async def _run_reference_module(
        self,
        task: Task,
        cache: _TaskCache,
        seeds: list[int],
        need_outputs: bool,
        timeout_s: float,
        need_values: bool = True,
    ) -> int:
        """Run the reference for `seeds` (or the first of them that fit one worker); returns
        how many were done. Without `need_outputs` or `need_values`, it reports the inputs'
        shapes only: a full-size trace-only run then costs no gigabytes of files."""
        job = WorkerJob(
            mode="reference",
            policy="reference",
            source=task.reference_text or "",
            source_path=task.reference_path or "<reference>",
            size=task.size,
            size_argument=task.size_argument,
            seeds=seeds,
            inputs_only=not need_outputs,
            shapes_only=not (need_outputs or need_values),
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
        self,
        task: Task,
        cache: _TaskCache,
        seeds: list[int],
        need_outputs: bool,
        timeout_s: float,
        hardware: str = "trn1",
        need_values: bool = True,
    ) -> None:
        if not (need_outputs or need_values):  # a trace-only run: the declared shapes suffice
            for s in seeds:
                shapes: list[np.ndarray] = [
                    arrays.shape_only(spec.shape, spec.dtype) if spec.value is None else spec.constant()
                    for spec in task.inputs
                ]
                self._remember(cache, s, _SeedData(inputs=shapes, outputs=None))
            return
        generated = {s: generate_inputs(task.inputs, s) for s in seeds}
        if cache.input_bytes is None:
            cache.input_bytes = sum(a.nbytes for a in generated[seeds[0]])
        if not need_outputs:
            for s in seeds:
                if s not in cache.seeds or cache.seeds[s].shapes_only():
                    self._remember(cache, s, _SeedData(inputs=generated[s], outputs=None))
            return
        assert task.baseline is not None
        plan = self._kernel_plan(cache, True)
        outcome, plan = await self._run_kernel(
            _kernel_job(
                _runnable(task.baseline), numerics=True, hardware=hardware, grid=task.grid, task=task
            ),
            timeout_s,
            [generated[s] for s in seeds],
            plan,
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
                analysis = _Analysis(timeout_s, outcome.wall_time_s)
                trace = await analysis.run(Trace.from_json, outcome.trace_json)
                cache.work = await analysis.run(_work_from_trace, trace)
            except Exception:  # a malformed or huge oracle trace only costs the task's roofline work
                cache.work = None

    async def _transform(
        self,
        task: Task,
        kernel_outputs: list[list[np.ndarray]],
        structures: list[OutputStructure],
        references: list[_SeedData],
        seeds: list[int],
        timeout_s: float,
    ) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
        bundle: dict[str, np.ndarray] = {}
        kernel_refs: list[list[ArrayRef]] = []
        ref_refs: list[list[ArrayRef]] = []
        for i, reference in enumerate(references):
            k_names: list[ArrayRef] = []
            r_names: list[ArrayRef] = []
            for j, a in enumerate(kernel_outputs[i]):
                bundle[f"k{i}_{j}"] = arrays.to_transport(a)
                k_names.append(ArrayRef(name=f"k{i}_{j}", dtype=arrays.dtype_name(a), shape=a.shape))
            for j, a in enumerate(reference.outputs or []):
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
            kernel_structures=structures,
            reference_outputs=ref_refs,
        )
        result = await self._run(
            job, timeout_s, bundle=bundle, memory=reference_plan(self.sandbox.limits.memory_bytes)
        )
        failure = _outcome_failure(result, seeds, who="reference module's transform_nki_outputs")
        if failure is not None:
            if result.result is not None and result.result.failure is not None:
                # The transform choked on what the kernel returned: the kernel's outputs are wrong.
                failure = failure.model_copy(update={"status": "incorrect"})
            raise _Failed(failure)
        return [(result.group(i, "kernel"), result.group(i, "reference")) for i in range(len(references))]

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
        if array.ndim == 0 or not arrays.is_standard(array.dtype) or isinstance(array, arrays.ShapeOnly):
            return array  # scalars, shapes and ml_dtypes arrays stay in memory (.npy cannot map the latter)
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="accelopt-reference-cache-")
        handle, path = tempfile.mkstemp(suffix=".npy", dir=self._spill_dir)
        with open(handle, "wb") as f:
            np.save(f, array, allow_pickle=False)
        with parse_lock():  # numpy parses the header (nki/python_source.py)
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
        if job.numerics and any(
            isinstance(a, arrays.ShapeOnly) for inputs in input_sets or [] for a in inputs
        ):
            raise ValueError("a numeric run needs its inputs' values, not their shapes only")
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
    original: KernelSource  # the file as written (its comments: the grid directive)


def _bindings(sliced: ModuleSlice) -> list[ModuleBinding]:
    return [
        ModuleBinding(target=i.target, module=i.module, attribute=i.attribute) for i in sliced.sibling_imports
    ]


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
        status: EvalStatus = "syntax_error" if exc.message.startswith("syntax error") else "runtime_error"
        raise _Failed(Evaluation(status=status, message=f"{where}{exc.message}")) from None
    sliced = program.kernel
    modules = []
    for module in program.modules:
        try:
            violation = check_source(module.sliced.text, "kernel")
        except SyntaxError as exc:  # parsed once already: only a slice bug could get here
            raise _Failed(
                Evaluation(status="syntax_error", message=f"{module.path}:{exc.lineno}: {exc.msg}")
            ) from None
        if violation is not None:
            raise _Failed(
                Evaluation(
                    status="rejected",
                    message=f"sandbox policy: {module.path}:{violation.line}: {violation.reason}",
                )
            )
        modules.append(
            SiblingSource(
                name=module.name,
                path=module.path,
                source=module.sliced.text,
                bindings=_bindings(module.sliced),
            )
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
    return _Runnable(
        kernel.model_copy(update={"text": sliced.text}), modules, _bindings(sliced), program.notes(), kernel
    )


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
    runnable: _Runnable, *, numerics: bool, hardware: str, grid: str | None = None, task: Task | None = None
) -> WorkerJob:
    """A kernel run in a worker; the kernel's own `# accelopt: grid` wins over the task's `grid`
    (read from the file as written: the slice that runs keeps no comments)."""
    kernel = runnable.kernel
    try:
        grid = find_grid(runnable.original.text, kernel.name) or grid
    except DirectiveError as exc:
        raise _Failed(Evaluation(status="compile_error", message=exc.message, line=exc.line)) from None
    return WorkerJob(
        mode="kernel",
        policy="kernel",
        source=kernel.text,
        source_path=kernel.path or _KERNEL_PLACEHOLDER_PATH,
        kernel_name=kernel.name,
        numerics=numerics,
        record_calls=numerics,  # numeric runs are verified: their first run logs its calls
        hardware=hardware,
        grid=grid,
        modules=runnable.modules,
        bindings=runnable.bindings,
        tuple_arguments=tuple_arguments(task.inputs) if task is not None else [],
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


def _at_hidden_size(hidden: _Hidden, message: str) -> str:
    shapes = ", ".join("x".join(str(d) for d in a.shape) for a in hidden.data.inputs)
    return f"at another input size ({shapes}), not known to the kernel in advance: {message}"


def _outcome_failure(
    outcome: WorkerOutcome, seeds: list[int], who: str | None, runs: int | None = None
) -> Evaluation | None:
    prefix = f"{who}: " if who else ""
    if outcome.kind == "timeout":
        return Evaluation(status="timeout", message=prefix + outcome.message, seeds=seeds)
    if outcome.kind == "crashed" or outcome.result is None:
        return Evaluation(status="runtime_error", message=prefix + outcome.message, seeds=seeds)
    failure = outcome.result.failure
    if failure is None:
        expected = len(seeds) if runs is None else runs
        if len(outcome.result.runs) != expected and outcome.result.runs:
            return Evaluation(
                status="runtime_error",
                message=f"{prefix}the worker reported {len(outcome.result.runs)} runs for {expected} input sets",
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


def _shapes_of(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """What a trace-only run gets of its inputs: their shapes and dtypes (it reads no values),
    with 0-d inputs (scalars, which a kernel may branch on) as they are."""
    return [
        a if a.ndim == 0 or isinstance(a, arrays.ShapeOnly) else arrays.shape_only(a.shape, a.dtype)
        for a in inputs
    ]


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
