"""`accelopt memory [--memory FILE] list|show ID|rm ID|clear`: inspect and prune the optimization
memory (default: $ACCELOPT_MEMORY or ~/.local/share/accelopt/memory.sqlite).

`--memory FILE` is the spelling `accelopt optimize` uses; the older `--path FILE` still works and
says it is deprecated."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

if TYPE_CHECKING:
    from accelopt.search.memory import Memory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory",
        metavar="FILE",
        help="optimization memory database (default: $ACCELOPT_MEMORY or the per-user file)",
    )
    parser.add_argument("--path", dest="deprecated_path", metavar="FILE", help=argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list experiences, newest first")
    listing.add_argument("--family", help="only this kernel family (e.g. silu)")
    listing.add_argument("--limit", type=int, default=50)
    show = actions.add_parser("show", help="show one experience in full")
    show.add_argument("id", type=int)
    remove = actions.add_parser("rm", help="remove experiences by id")
    remove.add_argument("ids", type=int, nargs="+", metavar="ID")
    clear = actions.add_parser("clear", help="remove every experience")
    clear.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def run(args: argparse.Namespace) -> int:
    from accelopt.search.memory import Memory, MemoryUnavailable

    console = Console(width=None if sys.stdout.isatty() else 1000)  # a pipe: whole cells, no "…"
    path = args.memory
    if args.deprecated_path is not None:
        print("accelopt memory: --path is deprecated; use --memory FILE (as accelopt optimize does)", file=sys.stderr)
        path = path or args.deprecated_path
    try:
        memory = Memory(path)
    except MemoryUnavailable as exc:
        print(f"accelopt memory: {exc}", file=sys.stderr)
        return 1
    with memory:
        if memory.recovery is not None:
            console.print(
                f"[yellow]warning:[/] the memory file was damaged; kept {memory.recovery.salvaged} rows, "
                f"the damaged copy is {memory.recovery.corrupt_copy}"
            )
        if args.action == "list":
            return _list(console, memory, args.family, args.limit)
        if args.action == "show":
            return _show(console, memory, args.id)
        if args.action == "rm":
            missing = [i for i in args.ids if not memory.remove(i)]
            for i in missing:
                print(f"accelopt memory: no experience with id {i} in {memory.path}", file=sys.stderr)
            removed = len(args.ids) - len(missing)
            console.print(f"removed {removed} experience(s)")
            return 1 if missing else 0
        if args.action == "clear":
            count = memory.count()
            if not args.yes and sys.stdin.isatty():
                answer = input(f"remove all {count} experiences from {memory.path}? [y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    console.print("nothing removed")
                    return 1
            console.print(f"removed {memory.clear()} experience(s) from {memory.path}")
            return 0
    return 2


def _list(console: Console, memory: Memory, family: str | None, limit: int) -> int:
    rows = memory.list(kernel_family=family, limit=limit)
    table = Table(title=f"optimization memory: {memory.path} ({memory.count()} experiences)")
    for column in ("id", "when", "family", "speedup", "", "lesson", "hardware", "backend", "model"):
        table.add_column(column, justify="right" if column in ("id", "speedup") else "left")
    for exp in rows:
        table.add_row(
            str(exp.id),
            exp.created_at.strftime("%Y-%m-%d %H:%M"),
            exp.kernel_family,
            "failed" if exp.failure else f"{exp.speedup:.3f}x",
            "[green]+[/]" if exp.positive else "[red]-[/]",
            exp.lesson.title,
            exp.hardware,
            exp.backend,
            exp.model,
        )
    console.print(table)
    return 0


def _show(console: Console, memory: Memory, experience_id: int) -> int:
    exp = memory.get(experience_id)
    if exp is None:
        print(f"accelopt memory: no experience with id {experience_id} in {memory.path}", file=sys.stderr)
        return 1
    outcome = "positive" if exp.positive else "negative"
    measured = f"failed: {exp.failure}" if exp.failure else f"{exp.speedup:.3f}x"
    console.print(f"[bold]#{exp.id} {exp.lesson.title}[/] ({outcome}, {measured})")
    console.print(
        f"family {exp.kernel_family or '-'} · task {exp.task or '-'} · {exp.hardware} · backend {exp.backend} · "
        f"model {exp.model} · {exp.created_at.isoformat(timespec='seconds')}"
    )
    console.print(f"\n[bold]plan[/]\n{exp.lesson.plan}")
    for label, snippet in (("before", exp.lesson.before), ("after", exp.lesson.after)):
        if snippet:
            console.print(f"\n[bold]{label}[/]")
            console.print(Syntax(snippet, "python", theme="ansi_dark"))
    console.print("\n[bold]slow kernel[/]")
    console.print(Syntax(exp.slow_kernel, "python", theme="ansi_dark", line_numbers=True))
    console.print("\n[bold]fast kernel[/]")
    console.print(Syntax(exp.fast_kernel, "python", theme="ansi_dark", line_numbers=True))
    return 0
