"""The shapes of a kernel's inputs at the size it is timed at, for the agents' size facts.

A split evaluation (checked at the small size, timed at the full one) states the timed shapes in
its timing note, in the kernel's argument order: "timed at the full size (16x64x4096, 16x64x4096)
by a trace-only run ...". Paired with the kernel's parameters they say, e.g., that `w` is
5120 x 12288 at the size the user runs -- which decides whether keeping a block of it in SBUF
fits. When the count of shapes and of parameters differ (a scalar argument the trace does not
list, a note in another form), nothing is guessed: no shapes.
"""

from __future__ import annotations

import ast
import re

from accelopt.nki.python_source import parse_module
from accelopt.profiling.evaluation import KernelSource

_TIMED = re.compile(r"^timed at the \w+ size \(([^)]*)\)")


def timed_input_shapes(notes: list[str], kernel: KernelSource) -> dict[str, list[int]]:
    """parameter name -> shape at the timing size; empty when the notes do not say."""
    for note in notes:
        match = _TIMED.match(note)
        if match is None:
            continue
        shapes = [_dims(part.strip()) for part in match.group(1).split(",")]
        params = _parameters(kernel)
        if not params or len(params) != len(shapes):
            return {}
        return {name: dims for name, dims in zip(params, shapes, strict=True) if dims is not None}
    return {}


def _dims(text: str) -> list[int] | None:
    if text == "scalar":
        return []
    try:
        return [int(d) for d in text.split("x")]
    except ValueError:
        return None


def _parameters(kernel: KernelSource) -> list[str]:
    try:
        tree = parse_module(kernel.text)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == kernel.name:
            return [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    return []
