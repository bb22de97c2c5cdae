"""Parsing Python text into `ast` trees, safe when several threads parse at once.

CPython 3.11 keeps the depth counter of its parse-tree-to-`ast` conversion in state the whole
interpreter shares (python/cpython#106905, the bookkeeping added by #95185). The engine parses in
several threads at once: the offline planner's threads, the trace analysis under its deadline and
the verification re-run all read kernel text while the event loop's thread reads the next
candidate. When a thread switch lands inside one conversion (a garbage collection running a
finalizer is enough) and another thread converts meanwhile, the first one fails with a spurious
`SystemError: AST constructor recursion depth mismatch`, and a good candidate is recorded as a
runtime error. Every parse of ours goes through one lock (ruff's banned-api rule keeps it so);
parses are short and hold the GIL anyway, so the lock costs no parallelism.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Re-entrant: `ast.parse` raises a "compile" audit event first, and a hook that parses in turn
# (the sandbox guard judges what is compiled) must not wait on its own thread.
_CONVERSION = threading.RLock()


def parse_python(text: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse(text, filename, mode)` under the process-wide parse lock. The tree's type is
    `ast.Module` for mode "exec" and `ast.Expression` for "eval" (hence `Any`)."""
    with _CONVERSION:
        return ast.parse(text, filename=filename, mode=mode)  # noqa: TID251 (the one allowed parse)


def parse_module(text: str, filename: str = "<unknown>") -> ast.Module:
    """A whole module's tree (mode "exec")."""
    tree: ast.Module = parse_python(text, filename)
    return tree


def literal_value(node_or_text: ast.AST | str) -> Any:
    """`ast.literal_eval` (which parses a string argument) under the same lock."""
    with _CONVERSION:
        return ast.literal_eval(node_or_text)  # noqa: TID251 (parses strings; kept under the lock)


@contextmanager
def parse_lock() -> Iterator[None]:
    """Hold the parse lock around other libraries' code that parses Python text itself: numpy
    reads every `.npy` header with `ast.literal_eval`, so loading arrays converts too.

    libcst needs none: its native parser builds its own tree without `ast`, and only its
    `evaluated_value` properties (and `get_docstring`, the ScopeProvider's string annotations)
    call `ast.literal_eval`; the offline agents use none of them (`kernel_ir.literal_int`), which
    tests/nki/test_python_source.py checks with an audit hook. Holding the lock over libcst's
    parses and analyses would only make the event loop's parses wait for the planner's threads."""
    with _CONVERSION:
        yield
