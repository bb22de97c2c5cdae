"""`accelopt bench`: profile the NKIBench suite and report each kernel's percent of roofline peak.

    accelopt bench                                  # all 14 baselines, full NKIBench shapes, simulator
    accelopt bench --size small --tasks silu,matmul # a quick subset at the tiny test shapes
    accelopt bench --kernels out/best/ --check      # optimized kernels (DIR/<task>.py), correctness too

Each task is evaluated through a profiling backend (in the backend's own worker processes, up to
--jobs at once); profiling alone is trace-only emulation, --check adds the correctness check on
--seeds random inputs. The table ends with the geometric mean of percent of peak, the figure
AccelOpt reports for the suite. Results are also written as JSON (--out).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from accelopt.profiling.backend import EvaluationOptions, resolved_hardware
from accelopt.profiling.evaluation import EvalStatus, Evaluation, KernelSource
from accelopt.profiling.profile import Bound, Profile

if TYPE_CHECKING:
    from accelopt.profiling.backend import Backend
    from accelopt.profiling.task import Task

DEFAULT_OUT = Path("accelopt-out") / "bench.json"


class TaskResult(BaseModel):
    name: str
    kernel_path: str
    status: EvalStatus
    message: str = ""
    line: int | None = None
    latency_ms: float | None = None
    peak_latency_ms: float | None = None
    percent_of_peak: float | None = Field(None, description="peak latency / latency, a fraction")
    bound: Bound | None = Field(
        None, description="what bounded this run (busiest saturated resource, or latency)"
    )
    roofline_bound: Bound | None = Field(None, description="the roofline's dominant term for the task's work")
    max_error: float | None = None
    checked_size: str | None = Field(None, description="the size the outputs were checked at (None: not checked)")
    timed_size: str | None = Field(None, description="the size the latency was timed at")
    notes: list[str] = Field(default_factory=list, description="the evaluation's notes")
    wall_time_s: float = 0.0
    profile: Profile | None = None


class BenchReport(BaseModel):
    backend: str
    hardware: str
    size: str
    latency_kind: str = Field(description="'simulated' (simulator) or 'measured' (hardware)")
    checked_correctness: bool
    jobs: int
    tasks: list[TaskResult]
    geomean_percent_of_peak: float | None = Field(None, description="over the tasks that ran, a fraction")
    wall_time_s: float


EPILOG = """examples:
  accelopt bench                                   the full suite at the published shapes (minutes)
  accelopt bench --size small --tasks silu,matmul  a quick look at tiny shapes (what CI runs)
  accelopt bench --kernels DIR --check             optimized kernels DIR/<task>.py, with correctness
  accelopt bench --backend neuron --check          measured on a Trainium host with the Neuron SDK"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--tasks", help="comma-separated task names (default: the whole suite)")
    parser.add_argument("--hardware", choices=("trn1", "trn2", "trn3"), default="trn1")
    parser.add_argument("--backend", choices=("simulator", "neuron"), default="simulator")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run evaluations as Ray tasks: on a private local cluster, or on the cluster at ADDRESS",
    )
    parser.add_argument(
        "--size",
        choices=("full", "small"),
        default="full",
        help="full: the published NKIBench shapes; small: tiny shapes for quick checks (not comparable)",
    )
    parser.add_argument(
        "--kernels", type=Path, metavar="DIR", help="profile DIR/<task>.py (or DIR/<task>/kernel.py)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="tasks evaluated at once (worker processes)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also check correctness against the reference (at --size full: checked at the small size, "
        "timed at the full one; --check-size full checks at the full size)",
    )
    parser.add_argument("--check-size", choices=("full", "small"), help="size the outputs are checked at")
    parser.add_argument("--seeds", type=int, default=5, help="random inputs per correctness check")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per task (default 1800 full, 300 small)"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where the JSON report goes ({DEFAULT_OUT})"
    )


def run(args: argparse.Namespace) -> int:
    from accelopt.profiling.nkibench import NkiBenchError

    if args.jobs < 1 or args.seeds < 1:
        print("accelopt bench: --jobs and --seeds must be at least 1", file=sys.stderr)
        return 2
    try:
        selection = select_tasks(args.tasks, args.size, args.kernels)
        if args.check_size is not None:
            selection = [(k, t.model_copy(update={"check_size": args.check_size})) for k, t in selection]
    except NkiBenchError as exc:
        print(f"accelopt bench: {exc}", file=sys.stderr)
        return 2
    options = EvaluationOptions(
        hardware=args.hardware,
        seeds=args.seeds,
        timeout_s=args.timeout or (1800.0 if args.size == "full" else 300.0),
        check_correctness=args.check,
    )
    try:
        backend = make_backend(args.backend, args.jobs, args.ray)
    except Exception as exc:  # a backend that cannot start says why (e.g. no Neuron SDK here)
        print(f"accelopt bench: {exc}", file=sys.stderr)
        return 2

    report = asyncio.run(_run_with_progress(selection, backend, options, args, show_progress=not args.json))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report.model_dump_json(indent=2))
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        render_table(report)
        print(f"results written to {args.out}")
    return 0 if all(t.status == "ok" for t in report.tasks) else 1


def select_tasks(names: str | None, size: str, kernels_dir: Path | None) -> list[tuple[KernelSource, Task]]:
    """(kernel, task) for every selected task, in index order; raises NkiBenchError."""
    from accelopt.profiling.nkibench import NkiBenchError, bench_task, load_index, optimized_kernel_path

    index = load_index()
    known = [t.name for t in index]
    wanted = known if not names else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise NkiBenchError(f"unknown task(s) {', '.join(unknown)}; the tasks are: {', '.join(known)}")
    selection = []
    for name in wanted:
        kernel_path = None
        if kernels_dir is not None:
            kernel_path = optimized_kernel_path(kernels_dir, name)
            if kernel_path is None:
                raise NkiBenchError(
                    f"{kernels_dir}: no kernel for task {name!r} ({name}.py or {name}/kernel.py)"
                )
        selection.append(bench_task(name, size, kernel_path=kernel_path))
    return selection


def make_backend(name: str, jobs: int, ray: str | None = None) -> Backend:
    from accelopt.profiling.ray_backend import backend_for

    return backend_for(name, max_workers=jobs, ray=ray)


async def run_bench(
    selection: list[tuple[KernelSource, Task]],
    backend: Backend,
    options: EvaluationOptions,
    *,
    jobs: int,
    size: str,
    on_done: Callable[[TaskResult], None] | None = None,
) -> BenchReport:
    """Evaluate every (kernel, task) through `backend`, at most `jobs` at a time."""
    started = time.perf_counter()
    gate = asyncio.Semaphore(jobs)
    # one target for the whole report: the one asked for, else the first kernel's own (NKIBench: trn1)
    target = resolved_hardware(options, selection[0][0]) if selection else (options.hardware or "trn1")
    options = options.model_copy(update={"hardware": target})

    async def one(kernel: KernelSource, task: Task) -> TaskResult:
        async with gate:
            try:
                evaluation = await backend.evaluate(kernel, task, options)
            except Exception as exc:  # a backend bug must not cost the other tasks' results
                evaluation = Evaluation(
                    status="runtime_error", message=f"the {backend.name} backend failed: {exc!r}"
                )
        profile = evaluation.profile
        result = TaskResult(
            name=task.name,
            kernel_path=kernel.path or "",
            status=evaluation.status,
            message=evaluation.message,
            line=evaluation.line,
            max_error=evaluation.max_error,
            checked_size=evaluation.checked_size,
            timed_size=evaluation.timed_size,
            notes=evaluation.notes,
            wall_time_s=evaluation.wall_time_s,
            profile=profile,
        )
        if profile is not None:
            result.latency_ms = profile.latency_ms
            result.peak_latency_ms = profile.peak_latency_ms
            result.percent_of_peak = profile.percent_of_peak
            result.bound = profile.bound
            result.roofline_bound = profile.roofline_bound
        if on_done is not None:
            on_done(result)
        return result

    try:
        results = await asyncio.gather(*(one(kernel, task) for kernel, task in selection))
    finally:
        await backend.aclose()
    return BenchReport(
        backend=backend.name,
        hardware=target,
        size=size,
        latency_kind="simulated" if backend.name == "simulator" else "measured",
        checked_correctness=options.check_correctness,
        jobs=jobs,
        tasks=list(results),
        geomean_percent_of_peak=geometric_mean([r.percent_of_peak for r in results if r.status == "ok"]),
        wall_time_s=time.perf_counter() - started,
    )


def geometric_mean(values: list[float | None]) -> float | None:
    positive = [v for v in values if v is not None and v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


async def _run_with_progress(
    selection: list[tuple[KernelSource, Task]],
    backend: Backend,
    options: EvaluationOptions,
    args: argparse.Namespace,
    *,
    show_progress: bool,
) -> BenchReport:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]bench[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        disable=not show_progress,
        transient=True,
    ) as progress:
        bar = progress.add_task("", total=len(selection))

        def done(result: TaskResult) -> None:
            progress.advance(bar)
            progress.update(bar, description=f"{result.name}: {result.status}")

        return await run_bench(selection, backend, options, jobs=args.jobs, size=args.size, on_done=done)


def render_table(report: BenchReport) -> None:
    from rich.console import Console
    from rich.table import Table

    kind = report.latency_kind
    title = f"NKIBench ({report.size} shapes) on {report.hardware}, {kind} by the {report.backend} backend"
    table = Table(title=title, show_footer=True)
    table.add_column("task", footer="geometric mean", no_wrap=True)
    table.add_column(f"latency ms ({kind})", justify="right")
    table.add_column("roofline peak ms", justify="right")
    geomean = report.geomean_percent_of_peak
    table.add_column("% of peak", justify="right", footer="-" if geomean is None else f"{100 * geomean:.1f}%")
    table.add_column("roofline term")
    table.add_column("run bound by")
    table.add_column("status")
    for r in report.tasks:
        status = (
            "ok" if r.status == "ok" else f"[red]{r.status}[/]" + (f": {r.message[:60]}" if r.message else "")
        )
        table.add_row(
            r.name,
            _num(r.latency_ms, ".3f"),
            _num(r.peak_latency_ms, ".3f"),
            "-" if r.percent_of_peak is None else f"{100 * r.percent_of_peak:.1f}%",
            r.roofline_bound or "-",
            r.bound or "-",
            status,
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=132)  # a file or pipe: room for the whole table on one line per task
    console.print(table)
    console.print(f"suite profiled in {report.wall_time_s:.1f} s with {report.jobs} job(s)")
    splits = sorted({(r.checked_size, r.timed_size) for r in report.tasks if r.checked_size and r.timed_size})
    for checked, timed in splits:  # real sizes (profiling/real_size.py): say what was verified where
        if checked != timed:
            console.print(
                f"outputs checked (and traces verified) at the {checked} size; latencies timed at the "
                f"{timed} size by trace-only runs, checked for plausibility, not re-run"
            )


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
