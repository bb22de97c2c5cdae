"""From a tool's arguments to the engine's inputs: the kernel (`KernelSource`) and its `Task`.

A kernel comes as a path, as source text (an unsaved buffer), or both (the text of the file at
that path). Bad input is a `KernelInputError` whose message names the file and line, so the
agent can fix it; nothing here runs the kernel (the backend's sandbox does).
"""

from __future__ import annotations

import ast
from pathlib import Path

from accelopt.nki.python_source import parse_module
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.task import Size, Task, TaskError, task_for_kernel

# The decorators that make a function an NKI kernel, by their last name.
_KERNEL_DECORATORS = ("jit", "baremetal", "simulate_kernel", "benchmark", "profile")
UNSAVED = "<source>"


class KernelInputError(Exception):
    """The tool's input cannot be used; the message says where and why."""


def load_kernel(path: str | None, source: str | None, kernel: str | None) -> KernelSource:
    """The kernel the arguments name: `kernel`, else the first @nki.jit function of the file."""
    if path is None and source is None:
        raise KernelInputError("give the kernel's file `path`, its `source` text, or both")
    resolved = str(Path(path).expanduser().resolve()) if path else None
    if source is None:
        assert resolved is not None
        try:
            source = Path(resolved).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KernelInputError(f"{resolved}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KernelInputError(f"{resolved}: cannot read: {exc}") from None
    where = resolved or UNSAVED
    try:
        tree = parse_module(source, filename=where)
    except SyntaxError as exc:
        column = f":{exc.offset}" if exc.offset else ""
        raise KernelInputError(f"{where}:{exc.lineno}{column}: syntax error: {exc.msg}") from None
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    kernels = [f.name for f in functions if any(_is_kernel_decorator(d) for d in f.decorator_list)]
    if kernel is None:
        if not kernels:
            raise KernelInputError(f"{where}: no @nki.jit kernel found; name the function with `kernel`")
        kernel = kernels[0]
    elif kernel not in {f.name for f in functions}:
        known = ", ".join(kernels) or "none"
        raise KernelInputError(f"{where}: no function named '{kernel}' (NKI kernels in this file: {known})")
    return KernelSource(text=source, name=kernel, path=resolved)


def build_task(kernel: KernelSource, reference: str | None, size: Size) -> Task:
    """The kernel's task (reference module or its own `# accelopt: inputs` directive)."""
    if reference is not None:
        reference = str(Path(reference).expanduser())
    try:
        return task_for_kernel(kernel, reference, size=size)
    except TaskError as exc:
        if exc.path is None and kernel.path is None:
            exc.path = UNSAVED
        raise KernelInputError(str(exc)) from None


def source_line(text: str, line: int | None) -> str:
    if line is None:
        return ""
    lines = text.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _is_kernel_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text.split(".")[-1] in _KERNEL_DECORATORS and ("nki" in text or text in ("jit", "baremetal"))
