"""`accelopt optimize KERNEL.py`: run the AccelOpt beam search on a kernel from the terminal.

Shows live progress (iteration, best speedup, percent of peak, cost), then the ranked candidates
with the chain of plans behind each, and writes to --out (default accelopt-out/<kernel>/):
best.py (the fastest correct kernel), report.html and events.jsonl (every SearchEvent).
Ctrl-C stops the search cleanly: the partial ranking is still printed and written.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import difflib
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from accelopt.nki.python_source import parse_module
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.events import (
    CandidateEvent,
    CostEvent,
    Finished,
    IterationEvent,
    PlannerNotice,
    SearchEvent,
    Started,
)

if TYPE_CHECKING:
    from accelopt.agents.run_config import RunConfig
    from accelopt.profiling.backend import Backend
    from accelopt.profiling.task import Task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel_file", metavar="KERNEL.py", help="file with the @nki.jit kernel")
    parser.add_argument(
        "--kernel", help="kernel function name (default: the only @nki.jit function in the file)"
    )
    parser.add_argument(
        "--reference", metavar="REF.py", help="reference module (wins over the directive in the file)"
    )
    parser.add_argument(
        "--size",
        choices=["full", "small"],
        default="full",
        help="input shapes of the reference module kernels are timed at (default full; outputs are then "
        "checked at the small size when the module offers one, see --check-size)",
    )
    parser.add_argument(
        "--check-size",
        choices=["full", "small"],
        help="shapes the outputs are checked at (default: small when the module offers it)",
    )
    parser.add_argument(
        "--agents", choices=["auto", "llm", "offline"], help="default: the config file's, else auto"
    )
    parser.add_argument(
        "--config", metavar="FILE", help="TOML or JSON: [search], [llm], agents, backend, memory"
    )
    parser.add_argument("--backend", metavar="NAME", help="profiling backend (default simulator)")
    parser.add_argument("--hardware", choices=["trn1", "trn2", "trn3"])
    parser.add_argument("--iterations", "-T", type=int, metavar="T", help="T (default 16)")
    parser.add_argument("--beam", "-B", type=int, metavar="B", help="beam width B (default 6)")
    parser.add_argument("--plans", "-N", type=int, metavar="N", help="plans per beam kernel N (default 12)")
    parser.add_argument("--samples", "-K", type=int, metavar="K", help="kernels per plan K (default 2)")
    parser.add_argument("--fix-attempts", "-F", type=int, metavar="F", help="fixer attempts F (default 2)")
    parser.add_argument(
        "--seeds", type=int, metavar="S", help="random inputs per correctness check (default 5)"
    )
    parser.add_argument(
        "--budget-usd", type=float, metavar="USD", help="stop when the LLM calls have cost this much"
    )
    parser.add_argument("--max-tokens", type=int, metavar="TOKENS", help="stop after this many LLM tokens")
    parser.add_argument(
        "--max-evaluations", type=int, metavar="E", help="stop after this many backend evaluations"
    )
    parser.add_argument("--wall-time", type=float, metavar="SECONDS", help="stop after this long")
    parser.add_argument(
        "--patience", type=int, metavar="P", help="stop after P iterations without a faster kernel"
    )
    parser.add_argument(
        "--target-peak", type=float, metavar="PERCENT", help="stop at this percent of roofline peak"
    )
    parser.add_argument("--memory", metavar="FILE", help="optimization memory database (default: per user)")
    parser.add_argument(
        "--no-memory", action="store_true", help="neither read nor write the persistent memory"
    )
    parser.add_argument("--workers", type=int, metavar="W", help="concurrent evaluations (default 2)")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run evaluations as Ray tasks: on a private local cluster, or on the cluster at ADDRESS",
    )
    parser.add_argument("--out", metavar="DIR", help="output directory (default accelopt-out/<kernel>)")
    parser.add_argument("--seed", type=int, metavar="SEED", help="seed for the agents' choices")


def run(args: argparse.Namespace) -> int:
    # Not a terminal (a pipe, a CI log): rich would cut diffs and tables at 80 columns.
    console = Console(stderr=False, width=None if sys.stdout.isatty() else 1000)
    try:
        return asyncio.run(_optimize(args, console))
    except _UsageError as exc:
        print(f"accelopt optimize: {exc}", file=sys.stderr)
        return 2


class _UsageError(Exception):
    pass


def _find_kernel_name(text: str, path: str, wanted: str | None) -> str:
    try:
        tree = parse_module(text, filename=path)
    except SyntaxError as exc:
        raise _UsageError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    kernels = [f.name for f in functions if any("jit" in ast.unparse(d) for d in f.decorator_list)]
    if wanted:
        if wanted not in {f.name for f in functions}:
            raise _UsageError(
                f"{path}: no function named '{wanted}' (kernels here: {', '.join(kernels) or 'none'})"
            )
        return wanted
    if len(kernels) == 1:
        return kernels[0]
    if not kernels:
        raise _UsageError(f"{path}: no @nki.jit kernel found; name one with --kernel")
    raise _UsageError(f"{path}: several kernels ({', '.join(kernels)}); choose one with --kernel")


def _config_sets_hardware(args: argparse.Namespace) -> bool:
    from accelopt.agents.run_config import load_run_config

    return "hardware" in load_run_config(args.config).search.model_fields_set


def _settings(args: argparse.Namespace) -> RunConfig:
    from accelopt.agents.run_config import ConfigError, load_run_config

    try:
        run_config = load_run_config(args.config)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from exc
    search = run_config.search.model_dump()
    overrides = {
        "iterations": args.iterations,
        "beam_width": args.beam,
        "plans_per_kernel": args.plans,
        "samples_per_plan": args.samples,
        "fix_attempts": args.fix_attempts,
        "seeds": args.seeds,
        "hardware": args.hardware,
        "patience": args.patience,
        "max_concurrent_evaluations": args.workers,
        "seed": args.seed,
        "target_percent_of_peak": args.target_peak / 100 if args.target_peak is not None else None,
    }
    search.update({k: v for k, v in overrides.items() if v is not None})
    budget = search["budget"]
    for key, value in (
        ("max_dollars", args.budget_usd),
        ("max_tokens", args.max_tokens),
        ("max_evaluations", args.max_evaluations),
        ("max_wall_time_s", args.wall_time),
    ):
        if value is not None:
            budget[key] = value
    updates: dict[str, Any] = {"search": search}
    if args.agents:
        updates["agents"] = args.agents
    if args.backend:
        updates["backend"] = args.backend
    if args.ray:
        updates["ray"] = args.ray
    if args.memory:
        updates["memory"] = args.memory
    try:
        return type(run_config).model_validate({**run_config.model_dump(), **updates})
    except ValueError as exc:
        raise _UsageError(f"invalid option: {exc}") from exc


async def _optimize(args: argparse.Namespace, console: Console) -> int:
    from accelopt.agents.factory import AgentsUnavailable, aclose_agents, make_agents
    from accelopt.profiling.task import TaskError, task_for_kernel
    from accelopt.search.beam import run_search
    from accelopt.search.memory import Memory, MemoryUnavailable

    path = Path(args.kernel_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    name = _find_kernel_name(text, str(path), args.kernel)
    kernel = KernelSource(text=text, name=name, path=str(path))
    settings = _settings(args)
    if args.hardware is None and not _config_sets_hardware(args):
        # no target chosen on the command line or in the config: the kernel's own
        from accelopt.nki.apiversion import default_hardware

        search = settings.search.model_copy(update={"hardware": default_hardware(text)})
        settings = settings.model_copy(update={"search": search})
    try:
        task = task_for_kernel(kernel, reference=args.reference, size=args.size)
        if args.check_size is not None:
            task = task.model_copy(update={"check_size": args.check_size})
    except TaskError as exc:
        raise _UsageError(str(exc)) from exc
    out_dir = Path(args.out) if args.out else Path("accelopt-out") / name
    waiting: dict[str, str] = {}
    try:
        agents = make_agents(
            settings.llm,
            kind=settings.agents,
            seed=settings.search.seed,
            transcript=out_dir / "exchanges.jsonl",
            on_status=lambda message: waiting.update(status=message),
        )
    except AgentsUnavailable as exc:
        raise _UsageError(str(exc)) from exc
    if (
        settings.llm is not None
        and agents.name.startswith("llm")
        and settings.search.budget.max_dollars is not None
    ):
        unpriced = [m for m in settings.llm.models if settings.llm.price_table.price_for(m) is None]
        if unpriced:
            console.print(
                f"[yellow]warning:[/] no price configured for {', '.join(unpriced)}: their calls count as $0 "
                "against --budget-usd (add [llm.prices] to the config)"
            )
    memory = None
    if not args.no_memory:
        try:
            memory = Memory(settings.memory)
        except MemoryUnavailable as exc:
            console.print(f"[yellow]warning:[/] {exc}; continuing without the persistent memory")
    backend = _backend(settings.backend, settings.search.max_concurrent_evaluations, settings.ray)
    cancel = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, cancel.set)
    events: list[SearchEvent] = []
    try:
        finished = await _drive(
            run_search(kernel, task, agents, backend, settings.search, memory, cancel), events, console, waiting
        )
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        await backend.aclose()
        await aclose_agents(agents)
        if memory is not None:
            memory.close()
    _print_ranking(console, finished)
    _print_best_diff(console, kernel, finished)
    _write_outputs(console, out_dir, kernel, task, events, finished)
    return 0 if finished.reason != "error" else 1


def _backend(name: str, workers: int, ray: str | None = None) -> Backend:
    from accelopt.profiling.ray_backend import backend_for

    try:
        return backend_for(name, max_workers=workers, ray=ray)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise _UsageError(f"backend {name!r}: {exc}") from exc


@dataclass
class _Progress:
    """What the progress line shows, as the events come."""

    best: float = 1.0
    peak: float | None = None
    dollars: float = 0.0
    tokens: int = 0
    evals: int = 0


async def _drive(
    stream: AsyncIterator[SearchEvent],
    events: list[SearchEvent],
    console: Console,
    waiting: dict[str, str] | None = None,
) -> Finished:
    """Render the events as progress; `waiting` holds the agents' latest word on the endpoint
    queue ("waiting for the endpoint"), shown until the next event."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=20),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    state = _Progress()

    def status() -> str:
        peak = f"{100 * state.peak:.1f}% of peak" if state.peak is not None else "peak –"
        cost = f" · ${state.dollars:.4f} ({state.tokens:,} tokens)" if state.tokens else ""
        queue = f" · {waiting.pop('status')}" if waiting and "status" in waiting else ""
        return f"best {state.best:.3f}x · {peak} · {state.evals} evals{cost}{queue}"

    finished: Finished | None = None
    with progress:
        bar = progress.add_task("baseline", total=None, status="evaluating the baseline")
        async for event in stream:
            events.append(event)
            if isinstance(event, Started):
                base = event.baseline
                total = event.config.iterations
                label = base.profile.label if base.profile else event.backend
                progress.update(bar, description="iteration 1", total=total or None, completed=0)
                state.peak = base.percent_of_peak
                console.print(
                    f"baseline [bold]{event.kernel_name}[/]: {base.status}"
                    + (f", {base.latency_ms:.4f} ms ({label})" if base.latency_ms else f": {base.message}")
                    + f" · agents {event.agents}"
                )
                for note in base.evaluation_notes:  # what was checked and timed at which size
                    console.print(Text(f"note: {note}", style="dim"))
            elif isinstance(event, CandidateEvent):
                c = event.candidate
                if c.status == "ok" and c.speedup and c.speedup > state.best and not c.duplicate_of:
                    state.best, state.peak = c.speedup, c.percent_of_peak  # a new best, shown at once
                    console.print(f"  {c.id} {c.speedup:.3f}x · {escape(c.plan.title) if c.plan else ''}")
            elif isinstance(event, IterationEvent):
                state.best, state.peak = event.best_speedup, event.best_percent_of_peak
                state.evals = event.evaluations
                progress.update(
                    bar, completed=event.iteration, description=f"iteration {event.iteration + 1}"
                )
            elif isinstance(event, PlannerNotice):
                console.print(f"  [dim]iteration {event.iteration}, {event.candidate_id}: {escape(event.message)}[/]")
            elif isinstance(event, CostEvent):
                state.dollars, state.tokens = event.dollars, event.prompt_tokens + event.completion_tokens
            elif isinstance(event, Finished):
                finished = event
                state.evals = event.evaluations
                progress.update(bar, description=event.reason)
            progress.update(bar, status=status())
    assert finished is not None, "the search ended without a Finished event"
    return finished


def _print_ranking(console: Console, finished: Finished) -> None:
    console.print(f"\n[bold]{finished.reason}[/]: {finished.message}")
    if finished.endpoint.calls:
        colour = "red" if not finished.endpoint.succeeded else "yellow" if finished.endpoint.failed else "green"
        console.print(f"[{colour}]agents:[/] {finished.endpoint.describe()}")
    table = Table(title="ranked candidates (correct only)")
    for column in ("#", "id", "speedup", "latency ms", "of peak", "plans from the baseline"):
        table.add_column(
            column, justify="right" if column in ("#", "speedup", "latency ms", "of peak") else "left"
        )
    for item in finished.ranked[:15]:
        c = item.candidate
        table.add_row(
            str(item.rank),
            c.id,
            f"{c.speedup:.3f}x" if c.speedup else "–",
            f"{c.latency_ms:.4f}" if c.latency_ms else "–",
            f"{100 * c.percent_of_peak:.1f}%" if c.percent_of_peak is not None else "–",
            escape("\n".join(f"{i + 1}. {p.title}" for i, p in enumerate(c.rationale)) or "(baseline)"),
        )
    console.print(table)
    if finished.ranked and finished.ranked[0].candidate.profile is not None:
        console.print(f"latencies are {finished.ranked[0].candidate.profile.label}")


def _print_best_diff(console: Console, baseline: KernelSource, finished: Finished) -> None:
    if not finished.ranked or finished.ranked[0].candidate.parent_id is None:
        return
    best = finished.ranked[0].candidate
    diff = "\n".join(
        difflib.unified_diff(
            baseline.text.splitlines(), best.kernel.text.splitlines(), "baseline", best.id, lineterm=""
        )
    )
    if diff:
        console.print(f"\n[bold]{best.id} against the baseline[/]")
        if console.is_terminal:
            console.print(Syntax(diff, "diff", theme="ansi_dark"))
        else:  # plain lines, whole: a log or a pipe gets the diff as `diff -u` writes it
            console.out(diff, highlight=False)


def _write_outputs(
    console: Console,
    out_dir: Path,
    kernel: KernelSource,
    task: Task,
    events: list[SearchEvent],
    finished: Finished,
) -> None:
    from accelopt.profiling.inputs import point_reference_directive
    from accelopt.search.report import build_report

    out_dir.mkdir(parents=True, exist_ok=True)
    if finished.ranked:
        best = finished.ranked[0].candidate
        text = best.kernel.text
        if task.kind == "reference" and task.reference_path:
            # best.py lives in another folder: its directive must still find the reference.
            text = point_reference_directive(text, best.kernel.name, task.reference_path, out_dir)
        (out_dir / "best.py").write_text(text, encoding="utf-8")
        console.print(f"best kernel ({best.id}, {best.speedup or 1:.3f}x): {out_dir / 'best.py'}")
    (out_dir / "report.html").write_text(build_report(events), encoding="utf-8")
    with (out_dir / "events.jsonl").open("w", encoding="utf-8") as handle:
        for event in events:
            handle.write(event.model_dump_json() + "\n")
    exchanges = out_dir / "exchanges.jsonl"
    shown = f" · exchanges with the endpoint: {exchanges}" if exchanges.exists() else ""
    console.print(f"report: {out_dir / 'report.html'} · events: {out_dir / 'events.jsonl'}{shown}")
