"""Find the NKI kernels in a Python document.

A kernel is a function decorated with `@nki.jit`, `@nki.baremetal` (called or not, under any of
the import spellings: `nki.jit`, `neuronxcc.nki.jit`, `jit` imported from an nki module, ...).

The document is usually mid-edit, so discovery must survive syntax errors elsewhere in the file:
the exact answer comes from `ast`; when the module does not parse, an indentation-based scan of
the lines finds the same functions (a kernel whose own header is broken is simply not found).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from accelopt.nki.python_source import parse_module

# The last component of a decorator that marks an NKI kernel entry point.
KERNEL_DECORATORS = frozenset({"jit", "baremetal"})

_NKI_IMPORT = re.compile(r"^\s*(from\s+[\w.]*nki[\w.]*\s+import\b|import\s+[\w.]*nki)", re.MULTILINE)
_DECORATOR_LINE = re.compile(r"^(?P<indent>\s*)@(?P<expr>[\w.]+)")
_DEF_LINE = re.compile(r"^(?P<indent>\s*)(async\s+)?def\s+(?P<name>\w+)\s*\(")


@dataclass(frozen=True)
class KernelInfo:
    """Where a kernel sits in a document. Lines are 0-based (LSP); columns are code points (str
    indexes), turned into the client's position encoding at the protocol boundary (positions.py)."""

    name: str
    first_line: int  # the first decorator line
    def_line: int  # the `def` line
    last_line: int  # the last line of the body
    name_start: int  # column of the name on the def line
    name_end: int
    decorator: str  # the decorator's dotted name, e.g. "nki.jit"

    def covers(self, line: int) -> bool:
        return self.first_line <= line <= self.last_line

    def on_header(self, line: int, character: int) -> bool:
        """True on the decorators or on the kernel's name (where hover answers)."""
        if self.first_line <= line < self.def_line:
            return True
        return line == self.def_line and self.name_start <= character <= self.name_end


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_kernel_decorator(dotted: str, nki_imported: bool) -> bool:
    parts = dotted.split(".")
    if parts[-1] not in KERNEL_DECORATORS:
        return False
    if len(parts) == 1:
        # A bare `@jit` is only an NKI kernel when the module imports from nki (not numba's jit).
        return nki_imported
    return any("nki" in part for part in parts[:-1])


def _name_columns(line_text: str, name: str) -> tuple[int, int]:
    match = re.search(rf"\bdef\s+({re.escape(name)})\b", line_text)
    if match is None:
        return 0, len(line_text)
    return match.start(1), match.end(1)


def find_kernels(text: str) -> list[KernelInfo]:
    """Every kernel in the document, in source order."""
    nki_imported = _NKI_IMPORT.search(text) is not None
    try:
        tree = parse_module(text)
    except (SyntaxError, ValueError):
        return _scan_lines(text, nki_imported)
    lines = text.splitlines()
    kernels: list[KernelInfo] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            dotted = _dotted(decorator)
            if dotted and _is_kernel_decorator(dotted, nki_imported):
                def_line = node.lineno - 1
                start, end = _name_columns(lines[def_line], node.name)
                kernels.append(
                    KernelInfo(
                        name=node.name,
                        first_line=min(d.lineno for d in node.decorator_list) - 1,
                        def_line=def_line,
                        last_line=(node.end_lineno or node.lineno) - 1,
                        name_start=start,
                        name_end=end,
                        decorator=dotted,
                    )
                )
                break
    return sorted(kernels, key=lambda k: k.first_line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _scan_lines(text: str, nki_imported: bool) -> list[KernelInfo]:
    """The fallback for a module that does not parse: decorator lines followed by a def, with the
    body running while lines are indented deeper than the def (blank and comment lines included)."""
    lines = text.splitlines()
    kernels: list[KernelInfo] = []
    i = 0
    while i < len(lines):
        match = _DECORATOR_LINE.match(lines[i])
        if not match or not _is_kernel_decorator(match["expr"], nki_imported):
            i += 1
            continue
        first_line, decorator = i, match["expr"]
        # Other decorators stacked above the NKI one belong to the kernel too.
        while (
            first_line > 0
            and _DECORATOR_LINE.match(lines[first_line - 1])
            and _indent(lines[first_line - 1]) == _indent(lines[i])
        ):
            first_line -= 1
        j = i + 1
        # Skip further decorators (and a decorator's continuation lines) up to the def.
        while j < len(lines) and not _DEF_LINE.match(lines[j]):
            stripped = lines[j].strip()
            if (
                stripped
                and not stripped.startswith(("@", "#", ")"))
                and _indent(lines[j]) <= _indent(lines[i])
            ):
                break
            j += 1
        def_match = _DEF_LINE.match(lines[j]) if j < len(lines) else None
        if def_match is None:
            i = j
            continue
        def_indent = len(def_match["indent"])
        last = j
        k = j + 1
        while k < len(lines):
            stripped = lines[k].strip()
            if stripped and not stripped.startswith("#") and _indent(lines[k]) <= def_indent:
                break
            if stripped:
                last = k
            k += 1
        start, end = _name_columns(lines[j], def_match["name"])
        kernels.append(
            KernelInfo(
                name=def_match["name"],
                first_line=first_line,
                def_line=j,
                last_line=last,
                name_start=start,
                name_end=end,
                decorator=decorator,
            )
        )
        i = k
    return kernels
