"""Backend "neuron": compile, run and profile a kernel with the real Neuron toolchain on a
Trainium host, on today's SDK (NKI_NOTES §8; neuron-profile was removed in SDK 2.29 and
Neuron Explorer replaced it).

The trusted parent (this class) never imports the kernel or the Neuron SDK. Each evaluation runs
in a worker subprocess (`python -m accelopt.profiling.neuron JOB_DIR`) with
`NEURON_CC_FLAGS=--auto-cast=none`, `NEURON_RT_NUM_CORES=1` and the NKI debug info Neuron
Explorer needs for source lines (`NKI_DEBUG_INFO=True`, `NEURON_FRAMEWORK_DEBUG=1`), which:

1. builds the inputs for every seed through the same task code as the simulator (the reference
   module's `get_inputs`/`forward`/`transform_*`, or the declared inputs and the baseline kernel
   as oracle) and, when asked, checks the kernel's outputs with the same comparison;
2. compiles the kernel with `nki.baremetal(kernel, save_neff_name=...,
   additional_compile_opt="--disable-dge --logical-nc-config=1")` (the current `nki` package,
   or the legacy `neuronxcc.nki` where the installed SDK still has it), running it twice to warm up;
3. captures 10 measured executions of that NEFF with Neuron Explorer, each
   `neuron-explorer capture -n X.neff -s X.ntff --profile-nth-exec=2` (the capture writes
   `X_exec_2.ntff`: the second execution, past one-time warm-up), processes each with
   `neuron-explorer view -n X.neff -s X_exec_2.ntff --output-file DIR` into Parquet tables, and
   reads the one-row `DIR/Summary.parquet` (documented in "Profile Parquet Schema Reference":
   `total_time` in seconds, byte and flop counts, `*_percent` fields in percent) and
   `DIR/Instruction.parquet` (`duration_ns`, `engine` and `nki_source_location` per executed
   instruction: the per-source-line attribution); re-measures the batch while (max - min) / min
   exceeds 1%.

The parent turns the median run's summary into the same `Profile` the simulator fills, with
`backend="neuron"` and the roofline view of the task's work.

Real sizes (`real_size.split_for`, as in the simulator backend): when the reference module offers
a small size beside the one a task is timed at, a checked evaluation is two worker runs on the
device: the *check run* at the small size (outputs compared on every seed, nothing measured), then
the *timing run* at the task's size (steps 2-3 only, outputs not compared), whose profile and
roofline are the evaluation's. The evaluation says which size was checked and which timed, and a
note says what each run covered. Unlike the simulator, the device gives no instruction trace, so
the timing run cannot be compared with the checked one; `--check-size full` checks on the device
at the size it is timed at.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from accelopt.hardware.work import Work
from accelopt.profiling import real_size
from accelopt.profiling.backend import EvaluationOptions, resolved_hardware
from accelopt.profiling.evaluation import EvalStatus, Evaluation, KernelSource
from accelopt.profiling.policy import check_source
from accelopt.profiling.profile import (
    SUMMARY_COUNTS,
    SUMMARY_FRACTIONS,
    SUMMARY_RATIOS,
    Bound,
    LineCost,
    Profile,
)
from accelopt.profiling.task import Task

COMPILE_OPTIONS = "--disable-dge --logical-nc-config=1"
NEURON_ENV = {
    "NEURON_CC_FLAGS": "--auto-cast=none",
    "NEURON_RT_NUM_CORES": "1",
    # Neuron Explorer's docs: NEFFs compiled with NKI_DEBUG_INFO=True embed the map from
    # instructions to NKI source lines ("Neuron Explorer profile files"); NEURON_FRAMEWORK_DEBUG=1
    # enables kernel source tracking ("Capture and Launch a Profile in Neuron Explorer").
    "NKI_DEBUG_INFO": "True",
    "NEURON_FRAMEWORK_DEBUG": "1",
}
DEVICE_GLOB = "/dev/neuron*"
PROFILER = "neuron-explorer"
CAPTURE_EXEC = 2  # --profile-nth-exec: profile the second execution, past one-time warm-up
WARMUP_RUNS = 2
MEASURED_RUNS = 10
MAX_SPREAD = 0.01  # re-measure when (max - min) / min exceeds this
MAX_BATCHES = 3
MAX_MESSAGE = 8000
# The compiler's error codes (NKI_NOTES §2) are part of its messages; agents learn from them.
_ERROR_CODE = re.compile(r"\berr_[a-z0-9_]+\b")


class NeuronUnavailable(RuntimeError):
    """This machine cannot run the neuron backend (no Neuron SDK, device or profiler)."""


class NeuronJob(BaseModel):
    """What the parent asks the worker to do (job.json)."""

    kernel: KernelSource
    task: Task
    seeds: list[int]
    tolerance: float
    check_correctness: bool
    measure: bool = Field(True, description="compile and measure (False: a check-only run at the check size)")
    profiler: str
    warmup_runs: int = WARMUP_RUNS
    measured_runs: int = MEASURED_RUNS
    max_spread: float = MAX_SPREAD
    max_batches: int = MAX_BATCHES


class LineTime(BaseModel):
    """Device time of one NKI source line in the median measured run (Instruction table)."""

    line: int
    instructions: int = 0
    engines: dict[str, float] = Field(default_factory=dict, description="engine -> seconds")


class NeuronResult(BaseModel):
    """What the worker reports back (result.json); untrusted data, validated on the way in."""

    status: EvalStatus
    message: str = Field("", max_length=MAX_MESSAGE)
    error_code: str | None = None
    line: int | None = None
    max_error: float | None = None
    samples_s: list[float] = Field(default_factory=list, description="total_time of the accepted batch")
    batches: int = 0
    summary: dict[str, float] = Field(
        default_factory=dict, description="Neuron Explorer Summary of the median run (percent fields as fractions)"
    )
    work: dict[str, float] | None = None
    lines: list[LineTime] = Field(default_factory=list, description="per source line, from the median run")

    @field_validator("message", mode="before")
    @classmethod
    def _clip(cls, value: object) -> object:
        # compiler output can be long; keep its end, where the error is
        if isinstance(value, str) and len(value) > MAX_MESSAGE:
            return "..." + value[-(MAX_MESSAGE - 3) :]
        return value


_IMPORT_SDK = (
    "try:\n    import nki\n    nki.baremetal\nexcept (ImportError, AttributeError):\n    import neuronxcc.nki\n"
)


def check_available(python: str, device_glob: str, profiler: str, env: dict[str, str]) -> None:
    """Fail fast, with the reason, when this is not a usable Trainium host."""
    probe = subprocess.run(
        [python, "-c", _IMPORT_SDK], env=env, capture_output=True, text=True, timeout=300
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no error output)"])[-1]
        raise NeuronUnavailable(
            "the neuron backend needs the Neuron SDK, but neither `import nki` nor `import neuronxcc.nki` "
            f"works here ({last}); install the Neuron SDK on a Trainium host, or use the simulator backend"
        )
    if not glob.glob(device_glob):
        raise NeuronUnavailable(
            f"no Neuron device ({device_glob}) on this machine: the neuron backend measures on a "
            "Trainium host; use the simulator backend here"
        )
    if shutil.which(profiler, path=env.get("PATH")) is None:
        raise NeuronUnavailable(
            f"`{profiler}` (Neuron Explorer, package aws-neuronx-tools) is not on PATH; it captures the measured runs"
        )


class NeuronBackend:
    name = "neuron"

    def __init__(
        self,
        *,
        max_workers: int = 1,
        python: str = sys.executable,
        profiler: str = PROFILER,
        device_glob: str = DEVICE_GLOB,
        workdir: str | Path | None = None,
        env: dict[str, str] | None = None,
        measured_runs: int = MEASURED_RUNS,
        max_spread: float = MAX_SPREAD,
    ) -> None:
        self._python = python
        self._profiler = profiler
        self._env = {**(os.environ if env is None else env), **NEURON_ENV}
        self._workdir = Path(workdir) if workdir is not None else None
        self._measured_runs = measured_runs
        self._max_spread = max_spread
        # One kernel per NeuronCore at a time unless the caller has more cores to give.
        self._gate = asyncio.Semaphore(max_workers)
        self._live: set[asyncio.subprocess.Process] = set()
        # Seeds are secret and kept per task, as in the simulator: a kernel cannot know its
        # inputs in advance, and every candidate of a task is judged on the same ones.
        self._seed_pools: dict[str, list[int]] = {}
        check_available(python, device_glob, profiler, self._env)

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        started = time.perf_counter()
        # The same static policy as the simulator's sandbox: the kernel runs on a real host here.
        try:
            violation = check_source(kernel.text, "kernel")
        except SyntaxError as exc:
            return Evaluation(status="syntax_error", message=f"SyntaxError: {exc.msg}", line=exc.lineno)
        if violation is not None:
            return Evaluation(
                status="rejected", message=f"sandbox policy: {violation.reason}", line=violation.line
            )
        split = real_size.split_for(task, options)
        if split is None:
            evaluation = await self._run(kernel, task, options, check=options.check_correctness, measure=True)
        else:
            evaluation = await self._evaluate_split(kernel, split, options)
        if task.kind == "reference":
            evaluation.timed_size = evaluation.timed_size or task.size
            if options.check_correctness:
                evaluation.checked_size = evaluation.checked_size or real_size.check_size_of(task)
        evaluation.wall_time_s = time.perf_counter() - started
        return evaluation

    async def _evaluate_split(
        self, kernel: KernelSource, split: real_size.SizeSplit, options: EvaluationOptions
    ) -> Evaluation:
        """Checked on the device at the small size, then timed there at the task's size."""
        check, timed_size = split.check.size, split.timed.size
        checked = await self._run(kernel, split.check, options, check=True, measure=False)
        sizes: dict[str, object] = {"checked_size": check, "timed_size": timed_size}
        if not checked.ok:
            note = f"checked at the {check} size (it would be timed at {timed_size})"
            return checked.model_copy(update={"notes": [*checked.notes, note], **sizes})
        timed = await self._run(kernel, split.timed, options, check=False, measure=True)
        if not timed.ok:
            message = f"at the {timed_size} size it is timed at (outputs not compared there): {timed.message}"
            return timed.model_copy(update={"message": message, "max_error": checked.max_error, **sizes})
        notes = [
            f"correctness checked on the device at the {check} size on {len(checked.seeds)} seed(s)",
            f"timed on the device at the {timed_size} size: outputs not compared there, and, with no "
            "instruction trace from the device, not compared with the checked run either",
        ]
        return timed.model_copy(
            update={"max_error": checked.max_error, "seeds": checked.seeds, "notes": [*timed.notes, *notes], **sizes}
        )

    async def _run(
        self, kernel: KernelSource, task: Task, options: EvaluationOptions, *, check: bool, measure: bool
    ) -> Evaluation:
        """One worker run at `task`'s size: outputs checked on the task's seeds (`check`), and the
        kernel compiled and measured (`measure`)."""
        seeds = self._seeds(task, options.seeds if check else 1)
        job = NeuronJob(
            kernel=kernel,
            task=task,
            seeds=seeds,
            tolerance=options.tolerance if options.tolerance is not None else task.tolerance,
            check_correctness=check,
            measure=measure,
            profiler=self._profiler,
            measured_runs=self._measured_runs,
            max_spread=self._max_spread,
        )
        async with self._gate:
            result = await self._run_worker(job, options.timeout_s)
        evaluation = Evaluation(
            status=result.status,
            message=result.message,
            error_code=result.error_code,
            line=result.line,
            max_error=result.max_error,
            seeds=seeds if check else [],
        )
        if result.status == "ok" and measure:
            try:
                evaluation.profile = profile_from_summary(
                    result, task, resolved_hardware(options, kernel), kernel.text
                )
            except (KeyError, ValueError, ValidationError) as exc:
                evaluation.status = "runtime_error"
                evaluation.message = f"the Neuron Explorer summary could not be read: {exc}"
        return evaluation

    def _seeds(self, task: Task, count: int) -> list[int]:
        pool = self._seed_pools.setdefault(task.key(), [])
        while len(pool) < count:
            pool.append(secrets.randbelow(2**31))
        return pool[:count]

    async def _run_worker(self, job: NeuronJob, timeout_s: float) -> NeuronResult:
        if self._workdir is not None:
            self._workdir.mkdir(parents=True, exist_ok=True)
        job_dir = Path(tempfile.mkdtemp(prefix="accelopt-neuron-", dir=self._workdir))
        (job_dir / "job.json").write_text(job.model_dump_json())
        log = open(job_dir / "worker.log", "wb")
        try:
            process = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "accelopt.profiling.neuron",
                str(job_dir),
                env=self._env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
            self._live.add(process)
            try:
                await asyncio.wait_for(process.wait(), timeout_s)
            except asyncio.TimeoutError:
                _kill(process)
                await process.wait()
                return NeuronResult(
                    status="timeout",
                    message=f"compile + {job.measured_runs} runs took over {timeout_s:.0f} s",
                )
            finally:
                self._live.discard(process)
        finally:
            log.close()
        result_path = job_dir / "result.json"
        try:
            result = NeuronResult.model_validate_json(result_path.read_text())
        except (OSError, ValidationError) as exc:
            tail = (job_dir / "worker.log").read_text(errors="replace")[-2000:]
            return NeuronResult(
                status="runtime_error",
                message=f"the neuron worker exited with code {process.returncode} and no valid result ({exc}); "
                f"log tail:\n{tail}",
            )
        if result.status == "ok":
            shutil.rmtree(job_dir, ignore_errors=True)  # keep failed jobs' NEFF/NTFF/log for a look
        return result

    async def aclose(self) -> None:
        for process in list(self._live):
            _kill(process)
            await process.wait()
        self._live.clear()


def _kill(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, 9)
    except ProcessLookupError:
        pass


def line_costs(lines: list[LineTime], source_text: str | None) -> list[LineCost]:
    """The measured per-line device time as the Profile's line costs, costliest first."""
    source = source_text.splitlines() if source_text else []
    grand = sum(sum(t.engines.values()) for t in lines)
    costs = []
    for t in lines:
        seconds = sum(t.engines.values())
        costs.append(
            LineCost(
                line=t.line,
                time_ms=seconds * 1e3,
                fraction=min(1.0, seconds / grand) if grand > 0 else 0.0,
                instructions=t.instructions,
                engines={k: v * 1e3 for k, v in sorted(t.engines.items())},
                text=source[t.line - 1].strip() if 0 < t.line <= len(source) else "",
            )
        )
    costs.sort(key=lambda c: (-c.time_ms, c.line))
    return costs


def profile_from_summary(
    result: NeuronResult, task: Task, hardware: str, source_text: str | None = None
) -> Profile:
    """Our Profile from the median measured run's Neuron Explorer summary, its per-line device
    time and the task's roofline."""
    from accelopt.hardware.roofline import peak_latency
    from accelopt.hardware.specs import get_hardware
    from accelopt.profiling.metrics import LATENCY_BOUND_BELOW

    summary = result.summary
    latency_s = statistics.median(result.samples_s) if result.samples_s else float(summary["total_time"])
    if latency_s <= 0:
        raise ValueError(f"total_time must be positive, got {latency_s}")
    # the Summary fields Profile shares with the profiler (same names) are copied as they are
    fields: dict[str, Any] = {k: int(summary[k]) for k in SUMMARY_COUNTS if k in summary}
    fields.update({k: float(summary[k]) for k in SUMMARY_RATIOS if k in summary})
    fields.update({k: min(1.0, max(0.0, float(summary[k]))) for k in SUMMARY_FRACTIONS if k in summary})
    work = task.work
    if work is None and result.work is not None:
        work = Work(
            source="task",
            **{k: result.work.get(k, 0.0) for k in ("matmul_flops", "vector_flops", "hbm_bytes")},
        )
    profile = Profile(
        backend="neuron",
        hardware=hardware,
        latency_ms=latency_s * 1e3,
        lines=line_costs(result.lines, source_text),
        **fields,
    )
    if work is not None:
        peak_s, roof_bound = peak_latency(work, get_hardware(hardware))
        percent = peak_s / latency_s
        bound: Bound = roof_bound if percent >= LATENCY_BOUND_BELOW and peak_s > 0 else "latency"
        profile = profile.model_copy(
            update={
                "work": work,
                "peak_latency_ms": peak_s * 1e3,
                "percent_of_peak": percent,
                "bound": bound,
                "roofline_bound": roof_bound if peak_s > 0 else None,
            }
        )
    return profile


# ---------------------------------------------------------------------------------------------
# The worker: runs on the Trainium host in its own process, with the real SDK importable.


def _run_tool(argv: list[str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed ({out.returncode}): {out.stderr.strip()[-500:]}")


def capture(profiler: str, neff: Path, ntff: Path) -> Path:
    """`neuron-explorer capture`: run the NEFF on the device and record its execution trace.
    Returns the NTFF written (the capture appends `_exec_N` for the execution it profiled)."""
    _run_tool([profiler, "capture", "-n", str(neff), "-s", str(ntff), f"--profile-nth-exec={CAPTURE_EXEC}"])
    written = ntff.with_name(f"{ntff.stem}_exec_{CAPTURE_EXEC}{ntff.suffix}")
    if written.is_file():
        return written
    if ntff.is_file():
        return ntff
    raise RuntimeError(f"{profiler} capture wrote no trace ({written.name} or {ntff.name})")


_PERCENT_SUFFIX = "_percent"


def read_summary_table(path: Path) -> dict[str, float]:
    """The one-row Summary table as our flat metric dict: numbers only, `*_percent` fields (in
    percent in the Parquet schema) as fractions."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    if len(rows) != 1:
        raise ValueError(f"{path.name} should have one row (the whole run), got {len(rows)}")
    (row,) = rows
    if row.get("total_time") is None:
        raise ValueError(f"{path.name} has no total_time")
    summary: dict[str, float] = {}
    for key, value in row.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        summary[str(key)] = float(value) / 100 if key.endswith(_PERCENT_SUFFIX) else float(value)
    return summary


_LOCATION = re.compile(r"([^\s'\",\[\]]+):(\d+)")


def read_instruction_lines(path: Path, kernel_file: str) -> list[LineTime]:
    """Per NKI source line of `kernel_file`, the device time of its instructions: the
    Instruction table's `duration_ns` by `engine`, attributed through `nki_source_location`
    ("file.py:42", or a list of them when the compiler fused instructions of several lines:
    each line then gets an equal share)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    names = set(table.column_names)
    if not {"nki_source_location", "duration_ns", "engine"} <= names:
        return []
    wanted = Path(kernel_file).name
    per_line: dict[int, LineTime] = {}
    columns = (table.column(c).to_pylist() for c in ("nki_source_location", "duration_ns", "engine"))
    for location, duration, engine in zip(*columns):
        if not isinstance(location, str) or not isinstance(duration, (int, float)):
            continue
        lines = [int(n) for f, n in _LOCATION.findall(location) if Path(f).name == wanted]
        for line in lines:
            entry = per_line.setdefault(line, LineTime(line=line))
            entry.instructions += 1
            key = str(engine).lower()
            entry.engines[key] = entry.engines.get(key, 0.0) + duration * 1e-9 / len(lines)
    return sorted(per_line.values(), key=lambda t: t.line)


def read_profile(profiler: str, neff: Path, ntff: Path, kernel_file: str) -> tuple[dict[str, float], list[LineTime]]:
    """`neuron-explorer view -n X.neff -s X.ntff --output-file DIR`, then DIR/Summary.parquet and
    (when written) DIR/Instruction.parquet."""
    out_dir = ntff.with_suffix(".profile")
    _run_tool([profiler, "view", "-n", str(neff), "-s", str(ntff), "--output-file", str(out_dir)])
    table = out_dir / "Summary.parquet"
    if not table.is_file():
        raise ValueError(f"{profiler} view wrote no Summary.parquet in {out_dir}")
    instructions = out_dir / "Instruction.parquet"
    lines = read_instruction_lines(instructions, kernel_file) if instructions.is_file() else []
    return read_summary_table(table), lines


def spread(samples: list[float]) -> float:
    return (max(samples) - min(samples)) / min(samples)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _load_module(name: str, text: str, path: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": name, "__file__": path}
    exec(compile(text, path, "exec"), namespace)
    return namespace


def _innermost_line(exc: BaseException, path: str) -> int | None:
    line = exc.lineno if isinstance(exc, SyntaxError) and exc.filename == path else None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _worker(job: NeuronJob, job_dir: Path) -> NeuronResult:
    import numpy as np

    from accelopt.profiling.compare import compare_outputs
    from accelopt.profiling.inputs import generate_inputs

    try:  # today's SDK ships the `nki` package; older hosts only the legacy `neuronxcc.nki`
        import nki

        nki.baremetal  # noqa: B018 - the attribute the worker needs
    except (ImportError, AttributeError):
        try:
            import neuronxcc.nki as nki
        except ImportError as exc:
            return NeuronResult(
                status="runtime_error", message=f"no Neuron SDK (nki or neuronxcc.nki) in the worker: {exc}"
            )

    kernel_path = job.kernel.path or "kernel.py"
    try:
        kernel_fn = _load_module("accelopt_kernel", job.kernel.text, kernel_path)[job.kernel.name]
    except SyntaxError as exc:
        return NeuronResult(status="syntax_error", message=str(exc.msg), line=exc.lineno)
    except KeyError:
        return NeuronResult(
            status="compile_error", message=f"no function {job.kernel.name!r} in the kernel file"
        )
    except Exception as exc:  # the module body itself failed
        return NeuronResult(status="runtime_error", message=repr(exc), line=_innermost_line(exc, kernel_path))

    def baremetal(fn: Any, **kwargs: Any) -> Any:
        # A @nki.jit object keeps the Python function as `.func`; baremetal wants the function.
        return nki.baremetal(getattr(fn, "func", fn), additional_compile_opt=COMPILE_OPTIONS, **kwargs)

    task = job.task
    reference: dict[str, Any] | None = None
    oracle = None
    if task.kind == "reference":
        assert task.reference_text is not None
        reference = _load_module(
            "accelopt_reference", task.reference_text, task.reference_path or "reference.py"
        )
    else:
        assert task.baseline is not None
        oracle = _load_module("accelopt_baseline", task.baseline.text, task.baseline.path or "baseline.py")[
            task.baseline.name
        ]

    def inputs_for(seed: int) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
        """NKI inputs for one seed, the task's own inputs, and a thunk giving the expected outputs."""
        if reference is not None:
            np.random.seed(seed)
            raw = list(reference["get_inputs"](task.size))
            nki_inputs = [np.array(a, copy=True) for a in reference["transform_to_nki_inputs"](raw)]
            return nki_inputs, raw, lambda: reference["forward"](*raw)
        arrays = generate_inputs(task.inputs, seed)
        return arrays, arrays, lambda: baremetal(oracle)(*[a.copy() for a in arrays])

    work = None
    max_error: float | None = None
    try:
        if job.check_correctness:
            for seed in job.seeds:
                nki_inputs, _, expected = inputs_for(seed)
                out = baremetal(kernel_fn)(*nki_inputs)
                ref_out = expected()
                if reference is not None:
                    got, want = reference["transform_nki_outputs"](out, ref_out)
                else:
                    got, want = _as_list(out), _as_list(ref_out)
                verdict = compare_outputs(
                    [np.asarray(a) for a in got], [np.asarray(a) for a in want], job.tolerance, seed=seed
                )
                max_error = (
                    verdict.max_error if max_error is None else max(max_error, verdict.max_error or 0.0)
                )
                if not verdict.ok:
                    return NeuronResult(
                        status="incorrect", message=verdict.message, max_error=verdict.max_error
                    )
        if not job.measure:
            return NeuronResult(status="ok", max_error=max_error)
        nki_inputs, raw, _ = inputs_for(job.seeds[0])
        if reference is not None and callable(reference.get("work")):
            work = {str(k): float(v) for k, v in dict(reference["work"](*raw)).items()}

        neff = job_dir / "kernel.neff"
        for _ in range(job.warmup_runs):  # compiles (the NEFF) and warms the device up
            baremetal(kernel_fn, save_neff_name=str(neff))(*nki_inputs)
        batches = 0
        best: tuple[float, list[float], list[tuple[dict[str, float], list[LineTime]]]] | None = None
        while batches < job.max_batches:
            batches += 1
            runs = []
            for i in range(job.measured_runs):
                ntff = capture(job.profiler, neff, job_dir / f"b{batches}_run{i}.ntff")
                runs.append(read_profile(job.profiler, neff, ntff, kernel_path))
            samples = [summary["total_time"] for summary, _ in runs]
            if best is None or spread(samples) < best[0]:
                best = (spread(samples), samples, runs)
            if spread(samples) <= job.max_spread:
                break
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        code = _ERROR_CODE.search(text)
        return NeuronResult(
            status="compile_error" if code else "runtime_error",
            message=text,
            error_code=code.group(0) if code else None,
            line=_innermost_line(exc, kernel_path),
            max_error=max_error,
        )

    assert best is not None
    noise, samples, runs = best
    median_index = sorted(range(len(samples)), key=samples.__getitem__)[len(samples) // 2]
    summary, lines = runs[median_index]
    message = (
        "" if noise <= job.max_spread else f"timings still spread {100 * noise:.1f}% after {batches} batches"
    )
    return NeuronResult(
        status="ok",
        message=message,
        max_error=max_error,
        samples_s=samples,
        batches=batches,
        summary=summary,
        work=work,
        lines=lines,
    )


def main(argv: list[str]) -> int:
    job_dir = Path(argv[1])
    job = NeuronJob.model_validate_json((job_dir / "job.json").read_text())
    result = _worker(job, job_dir)
    (job_dir / "result.json").write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
