"""`accelopt`: the command-line face of the engine.

Each subcommand lives in `accelopt/commands/<name>.py` and exposes `add_arguments(parser)` and
`run(args) -> int`; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "profile": "Emulate a kernel on the simulator (or hardware) and print its profile and roofline",
    "optimize": "Run the AccelOpt beam search on a kernel",
    "bench": "Profile the NKIBench suite and print percent of roofline peak",
    "memory": "List, inspect and prune the optimization memory",
    "lsp": "Start the language server (stdio by default)",
    "mcp": "Start the MCP server for coding agents (stdio by default)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelopt", description="AccelOpt: optimize NKI kernels for AWS Trainium"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(f"accelopt.commands.{name}")
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command in SANDBOXED:
        _say_if_kernels_run_without_os_isolation()
    return int(args._run(args) or 0)


# The commands that run kernels: each says at start when the machine cannot isolate them.
SANDBOXED = ("profile", "optimize", "bench")


def _say_if_kernels_run_without_os_isolation() -> None:
    from accelopt.profiling.isolation import detect

    isolation = detect()
    if not isolation.kernel_enforced:
        print(f"accelopt: {isolation.describe()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
