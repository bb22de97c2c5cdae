"""`accelopt profile KERNEL.py`: check a kernel against its task and show its profile.

The kernel runs only in the sandboxed worker; this process reads files, prints, and writes the
optional Chrome/Perfetto trace of the simulated schedule.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from accelopt.nki.python_source import parse_module
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import Evaluation, KernelSource
from accelopt.profiling.profile import Profile

if TYPE_CHECKING:
    from accelopt.nki.trace import Trace
    from accelopt.profiling.task import Task
    from accelopt.profiling.timeline import Timeline


class UsageError(Exception):
    """Bad input on the command line: printed as `file:line: error: message`."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel_file", metavar="KERNEL.py", help="file defining an @nki.jit kernel")
    parser.add_argument(
        "--kernel", dest="kernel_name", metavar="NAME", help="kernel function (default: the first @nki.jit)"
    )
    parser.add_argument(
        "--reference", metavar="REF.py", help="reference module (overrides the `# accelopt:` directive)"
    )
    parser.add_argument(
        "--hardware",
        choices=["trn1", "trn2", "trn3"],
        help="target (default: the kernel's own: trn1 for legacy neuronxcc.nki kernels, trn2 for nki.* kernels)",
    )
    parser.add_argument("--backend", choices=["simulator", "neuron"], default="simulator")
    parser.add_argument(
        "--size",
        choices=["full", "small"],
        default="full",
        help="input size of a reference module (default full: timed at full; outputs checked at the small "
        "size when the module offers one, see --check-size)",
    )
    parser.add_argument(
        "--check-size",
        choices=["full", "small"],
        default=None,
        help="size the outputs are checked at (default: small when the module offers it; full checks "
        "numerically at the full size, which takes minutes for NKIBench)",
    )
    parser.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check outputs against the reference on random seeds (--no-check: trace-only, faster)",
    )
    parser.add_argument("--seeds", type=int, default=5, help="random inputs checked (default 5)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="wall-clock limit per sandboxed run, in seconds (default 120; 1800 for a reference "
        "module at its full size, as `accelopt bench` allows: full-size emulation takes minutes per seed; "
        "a task whose seeds are too big to batch gets it per seed)",
    )
    parser.add_argument("--json", action="store_true", help="print the Evaluation as JSON")
    parser.add_argument(
        "--trace-out", metavar="FILE", help="write the simulated schedule as Chrome/Perfetto JSON"
    )


def run(args: argparse.Namespace) -> int:
    from accelopt.profiling.task import TaskError, task_for_kernel

    try:
        kernel = load_kernel_source(Path(args.kernel_file), args.kernel_name)
        task = task_for_kernel(kernel, args.reference, size=args.size)
        if args.check_size is not None:
            task = task.model_copy(update={"check_size": args.check_size})
    except UsageError as exc:
        text = str(exc)
        # `file:line: error: message` when the message starts with a location, as editors parse it
        location, _, rest = text.partition(": ")
        _error(f"{location}: error: {rest}" if rest and location.count(":") == 1 else f"error: {text}")
        return 2
    except TaskError as exc:
        where = f"{exc.path}:{exc.line}: " if exc.path and exc.line else f"{exc.path}: " if exc.path else ""
        _error(f"{where}error: {exc.message}")
        return 2
    timeout = args.timeout
    if timeout is None:
        timeout = 1800.0 if task.kind == "reference" and task.size == "full" else 120.0
    options = EvaluationOptions(
        hardware=args.hardware,
        seeds=max(1, args.seeds),
        timeout_s=timeout,
        check_correctness=args.check,
    )
    evaluation, trace, timeline = _evaluate(args.backend, kernel, task, options)

    if args.json:
        print(evaluation.model_dump_json(indent=2))
    else:
        # Wide enough that source lines in the table are not wrapped when piped.
        # Not a terminal: wide enough that nothing is cut (rich would assume 80 columns).
        render(evaluation, kernel, Console(highlight=False, width=None if sys.stdout.isatty() else 1000))
    if args.trace_out:
        if trace is None or timeline is None:
            _error("no schedule to write: the kernel did not produce a timed trace")
        else:
            from accelopt.profiling.chrome_trace import to_chrome_trace

            Path(args.trace_out).write_text(json.dumps(to_chrome_trace(trace, timeline)), encoding="utf-8")
            _error(f"wrote {args.trace_out} (open it in https://ui.perfetto.dev)")
    return 0 if evaluation.ok else 1


def _error(message: str) -> None:
    # Plain text, one line per message: editors and scripts parse `file:line: error: ...`.
    print(message, file=sys.stderr)


def _evaluate(
    backend_name: str, kernel: KernelSource, task: Task, options: EvaluationOptions
) -> tuple[Evaluation, Trace | None, Timeline | None]:
    from accelopt.profiling.backends import get_backend
    from accelopt.profiling.simulator import SimulatorBackend

    backend = get_backend(backend_name, max_workers=1)
    if isinstance(backend, SimulatorBackend):  # the simulator also hands back its trace and timeline
        run = backend.evaluate_sync(kernel, task, options)
        return run.evaluation, run.trace, run.timeline

    async def once() -> Evaluation:
        try:
            return await backend.evaluate(kernel, task, options)
        finally:
            await backend.aclose()

    return asyncio.run(once()), None, None


def load_kernel_source(path: Path, name: str | None) -> KernelSource:
    """Read the kernel file and pick the kernel: `name`, else the first @nki.jit function."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    try:
        tree = parse_module(text, filename=str(path))
    except SyntaxError as exc:
        # Still profile it: the evaluation reports the syntax error with its line.
        if name is None:
            raise UsageError(
                f"{path}:{exc.lineno}: syntax error: {exc.msg} (fix it, or name the kernel with --kernel NAME)"
            ) from None
        return KernelSource(text=text, name=name, path=str(path.resolve()))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    if name is not None:
        if not any(f.name == name for f in functions):
            known = ", ".join(f.name for f in functions) or "none"
            raise UsageError(f"{path}: no function named '{name}' (functions: {known})")
        return KernelSource(text=text, name=name, path=str(path.resolve()))
    jitted = [f for f in functions if any(_is_nki_decorator(d) for d in f.decorator_list)]
    if not jitted:
        raise UsageError(f"{path}: no @nki.jit kernel found; pass --kernel NAME")
    return KernelSource(text=text, name=jitted[0].name, path=str(path.resolve()))


def _is_nki_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text.split(".")[-1] in ("jit", "baremetal", "simulate_kernel", "benchmark", "profile") and (
        "nki" in text or text in ("jit", "baremetal")
    )


# --- rendering ----------------------------------------------------------------------------------


def render(evaluation: Evaluation, kernel: KernelSource, console: Console) -> None:
    where = f"{kernel.path}:{evaluation.line}" if evaluation.line else (kernel.path or kernel.name)
    if not evaluation.ok:
        code = f" [{evaluation.error_code}]" if evaluation.error_code else ""
        print(f"{where}: {evaluation.status}{code}: {evaluation.message}")
        if evaluation.status == "timeout":
            print("note: --timeout SECONDS allows each sandboxed run more time")
        for note in evaluation.notes:
            print(f"note: {note}")
        return
    checked = (
        f"correct on {len(evaluation.seeds)} seed(s), max rel. L2 error {evaluation.max_error:.2e}"
        if evaluation.max_error is not None
        else "not checked for correctness"
    )
    if evaluation.checked_size and evaluation.checked_size != evaluation.timed_size:
        # real sizes: checked (and verified) at one size, timed at another (profiling/real_size.py)
        checked += f" at the {evaluation.checked_size} size, timed at the {evaluation.timed_size} size"
    if evaluation.verified:
        checked += "; trace verified by a re-run on unseen inputs"
    console.print(f"[bold green]ok[/] {escape(kernel.name)}: {checked} ({evaluation.wall_time_s:.1f} s)")
    for note in evaluation.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if evaluation.profile is None:
        console.print(f"no profile: {evaluation.message or 'no timing model available'}")
        return
    _render_profile(evaluation.profile, console)


def _render_profile(p: Profile, console: Console) -> None:
    summary = Table(title=f"Profile ({p.label})", show_header=False, title_justify="left")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    summary.add_row("latency", f"{_ms(p.latency_ms)}")
    summary.add_row("roofline peak latency", f"{_ms(p.peak_latency_ms)}")
    summary.add_row("percent of peak", f"{100 * p.percent_of_peak:.1f} %")
    summary.add_row("bound", p.bound)
    summary.add_row("HBM read / write", f"{_bytes(p.hbm_read_bytes)} / {_bytes(p.hbm_write_bytes)}")
    if p.spill_save_bytes or p.spill_reload_bytes:
        summary.add_row(
            "spill save / reload", f"{_bytes(p.spill_save_bytes)} / {_bytes(p.spill_reload_bytes)}"
        )
    summary.add_row("hardware FLOPs", f"{p.hardware_flops:,}")
    summary.add_row("instructions / DMA transfers", f"{p.instruction_count:,} / {p.dma_transfer_count:,}")
    console.print(summary)

    engines = Table(title="Engine busy (fraction of the kernel's time)", title_justify="left")
    for name in ("tensor", "vector", "scalar", "gpsimd", "dma"):
        engines.add_column(name, justify="right")
    engines.add_row(
        *(
            f"{100 * v:.1f} %"
            for v in (
                p.tensor_engine_active_time_percent,
                p.vector_engine_active_time_percent,
                p.scalar_engine_active_time_percent,
                p.gpsimd_engine_active_time_percent,
                p.dma_active_time_percent,
            )
        )
    )
    console.print(engines)

    if p.lines:
        hot = Table(title="Hottest lines", title_justify="left")
        hot.add_column("line", justify="right")
        hot.add_column("busy", justify="right")
        hot.add_column("share", justify="right")
        hot.add_column("engines")
        hot.add_column("source", overflow="fold")
        for cost in p.lines[:8]:
            engines_text = ", ".join(
                f"{e} {_ms(t)}" for e, t in sorted(cost.engines.items(), key=lambda kv: -kv[1])
            )
            hot.add_row(
                str(cost.line),
                _ms(cost.time_ms),
                f"{100 * cost.fraction:.1f} %",
                engines_text,
                Text(cost.text.strip()),  # not markup: `x[r0 : r0 + T]` is code, not a style tag
            )
        console.print(hot)


def _ms(value: float) -> str:
    return f"{value * 1e3:.1f} µs" if value < 1 else f"{value:.3f} ms"


def _bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value} B"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="accelopt profile")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
