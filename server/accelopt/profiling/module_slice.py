"""The part of a kernel file that the kernel needs: a static slice of the module.

Kernel files, as people keep them, carry host code next to the kernels: an
``if __name__ == "__main__":`` harness, imports of torch, torch_xla, argparse or os, test
helpers, other kernels. None of it runs when the kernel is traced on a device, and none of it
may run in the sandbox. So before the sandbox policy sees the file, it is cut down to what the
kernel reaches, read from the syntax tree (nothing runs):

- the top-level statements that bind a name the kernel uses, and recursively the names *they*
  use (as the compiler resolves them: `symtable`, so a local `args` never pulls in a host
  `args = parser.parse_args()`): constants, helper functions and classes, other kernels it
  calls, undecorated functions its `@nki.jit` wrapper calls;
- imports of numpy, math and the NKI names (harmless, and what kernels are made of), and
  ``from __future__`` imports (they change how the rest compiles);
- imports of modules beside the file are not run but recorded (`SiblingImport`): the worker
  binds those names to the siblings' own slices (`accelopt.profiling.siblings`).

Everything else (the ``__main__`` block, top-level calls, imports and functions nothing reaches)
is left out, and `ModuleSlice.note` says what, with lines. The slice keeps every kept statement
on its original line (removed lines are blank), so errors, traces and per-line costs still
point into the user's file. If a reached statement needs something the policy forbids (a helper
using `os`), that statement stays in the slice and the policy refuses it, at its own line.
"""

from __future__ import annotations

import ast
import functools
import symtable
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from accelopt.nki.python_source import parse_module
from accelopt.profiling.policy import KERNEL_MODULES

# How many left-out statements the note lists by line before summarising the rest.
_NOTE_ITEMS = 8


@dataclass(frozen=True)
class LeftOut:
    """A top-level statement the slice does not run (1-based lines in the original file)."""

    line: int
    end_line: int
    what: str

    def text(self) -> str:
        where = f"line {self.line}" if self.end_line == self.line else f"lines {self.line}-{self.end_line}"
        return f"{where} ({self.what})"


@dataclass(frozen=True)
class SiblingImport:
    """A kept import of a module beside the file (`from helpers import tile_add as add`): the
    slice leaves the statement out and the worker binds `target` itself, to the sibling's own
    slice (`attribute` of it, or the module when None)."""

    target: str
    module: str
    attribute: str | None
    line: int


@dataclass(frozen=True)
class ModuleSlice:
    text: str
    left_out: list[LeftOut] = field(default_factory=list)
    # the top-level functions of the original file (for "kernel X is not defined" messages)
    functions: tuple[str, ...] = ()
    sibling_imports: tuple[SiblingImport, ...] = ()
    # per sibling module, the names this slice reads from it (what its own slice must keep)
    sibling_names: dict[str, frozenset[str]] = field(default_factory=dict)
    # the module-level names the kept statements bind
    bound_names: frozenset[str] = frozenset()

    def defines(self, name: str) -> bool:
        return name in self.functions

    def note(self) -> str | None:
        """One sentence for the evaluation: what host code was left out, or None."""
        if not self.left_out:
            return None
        shown = ", ".join(item.text() for item in self.left_out[:_NOTE_ITEMS])
        more = len(self.left_out) - _NOTE_ITEMS
        rest = f" and {more} more" if more > 0 else ""
        return "ran only what the kernel reaches; left out of the sandboxed run: " + shown + rest


@functools.lru_cache(maxsize=256)
def cached_slice(text: str, entry: str, siblings: frozenset[str] = frozenset()) -> ModuleSlice:
    """`slice_module`, remembered: a search slices the same kernels many times."""
    return slice_module(text, entry, siblings)


def slice_module(text: str, entry: str | Iterable[str], siblings: Collection[str] = ()) -> ModuleSlice:
    """The statements of `text` that `entry` (a name, or several) needs, at their original lines.

    `siblings` are the modules, as this file spells them (`helpers`, `..utils.tiling`), that
    resolve to files of the user's (`accelopt.profiling.siblings`): imports of them are
    bound by the worker instead of run (`SiblingImport`). Raises SyntaxError when `text` does
    not parse (callers report it with its line)."""
    tree = parse_module(text)
    statements = tree.body
    scopes = {
        (t.get_name(), t.get_lineno()): t for t in symtable.symtable(text, "<kernel>", "exec").get_children()
    }
    lazy_annotations = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in statements
    )
    facts = [_Statement.of(node, scopes, lazy_annotations) for node in statements]
    keep = [f.always for f in facts]
    entries = [entry] if isinstance(entry, str) else list(entry)
    wanted = [*entries, *(name for f in facts if f.always for name in f.uses)]
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        for i, fact in enumerate(facts):
            if name in fact.binds and not fact.host_only and not keep[i]:
                keep[i] = True
                wanted.extend(fact.uses - seen)
    imports, names = _sibling_imports(statements, keep, siblings)
    rendered = [k and not _is_sibling_import(node, siblings) for node, k in zip(statements, keep)]
    return ModuleSlice(
        text=_render(text, statements, rendered),
        left_out=[
            LeftOut(_first_line(node), node.end_lineno or node.lineno, facts[i].label)
            for i, node in enumerate(statements)
            if not keep[i] and not facts[i].docstring
        ],
        functions=tuple(_module_functions(statements)),
        sibling_imports=tuple(imports),
        sibling_names=names,
        bound_names=frozenset(name for fact, k in zip(facts, keep) if k for name in fact.binds),
    )


def _module_functions(statements: list[ast.stmt]) -> list[str]:
    """The functions a module defines at its top level, including inside top-level `if`, `try`
    and `with` blocks (`if nki is not None:` around the kernels of a file that also runs
    without NKI); not the functions nested in other functions or classes."""
    names: list[str] = []
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", [])]
            if isinstance(node, ast.Try):
                blocks += [node.finalbody, *(h.body for h in node.handlers)]
            for block in blocks:
                names.extend(_module_functions(block))
    return names


def spelled_module(node: ast.ImportFrom) -> str:
    """The module of `from <module> import ...` as written, relative dots included ('..utils.x')."""
    return "." * node.level + (node.module or "")


def imported_modules(text: str) -> set[str]:
    """The modules a file imports at its top level (`import a`, `from b import c`,
    `from .d import e`: a, b and .d)."""
    modules: set[str] = set()
    for node in parse_module(text).body:
        if isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(spelled_module(node))
    return modules


def _is_sibling_import(node: ast.stmt, siblings: Collection[str]) -> bool:
    """An import made only of sibling modules (one that mixes in others is left to the policy)."""
    if isinstance(node, ast.Import):
        return all(a.name in siblings for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return (
            node.module is not None
            and spelled_module(node) in siblings
            and all(a.name != "*" for a in node.names)
        )
    return False


def _sibling_imports(
    statements: list[ast.stmt], keep: list[bool], siblings: Collection[str]
) -> tuple[list[SiblingImport], dict[str, frozenset[str]]]:
    imports: list[SiblingImport] = []
    names: dict[str, set[str]] = {}
    modules_as: dict[str, str] = {}  # local name -> sibling module bound to it whole
    for node, kept in zip(statements, keep):
        if not kept or not _is_sibling_import(node, siblings):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.asname or alias.name
                imports.append(SiblingImport(target, alias.name, None, node.lineno))
                modules_as[target] = alias.name
                names.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            module = spelled_module(node)
            for alias in node.names:
                imports.append(SiblingImport(alias.asname or alias.name, module, alias.name, node.lineno))
                names.setdefault(module, set()).add(alias.name)
    if modules_as:  # `helpers.tile_add(...)`: the attributes read from a whole-module import
        for node, kept in zip(statements, keep):
            if kept:
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in modules_as
                    ):
                        names[modules_as[sub.value.id]].add(sub.attr)
    return imports, {module: frozenset(attrs) for module, attrs in names.items()}


@dataclass(frozen=True)
class _Statement:
    binds: frozenset[str]
    uses: frozenset[str]
    label: str
    always: bool = False  # `from __future__ import ...`
    host_only: bool = False  # the `if __name__ == "__main__":` block
    docstring: bool = False  # a bare string: dropped without a mention

    @classmethod
    def of(cls, node: ast.stmt, scopes: dict[tuple[str, int], Any], lazy_annotations: bool) -> _Statement:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            return cls(frozenset(), frozenset(), "from __future__ import", always=True)
        if _imports_only_kernel_modules(node):  # numpy, math, NKI: harmless, and not host code
            return cls(frozenset(_bound_names(node)), frozenset(), _label(node), always=True)
        if _is_main_guard(node):
            return cls(frozenset(), frozenset(), 'the `if __name__ == "__main__":` block', host_only=True)
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return cls(frozenset(), frozenset(), "docstring", docstring=True)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return cls(
                frozenset({node.name}),
                frozenset(_definition_uses(node, scopes, lazy_annotations)),
                _label(node),
            )
        loaded = frozenset(_loaded_names(node))
        if isinstance(node, ast.Expr):  # a top-level call (`main()`, `print(...)`): host code
            return cls(frozenset(), loaded, f"`{_one_line(node)}`")
        return cls(frozenset(_bound_names(node)), loaded, _label(node))


def _imports_only_kernel_modules(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in KERNEL_MODULES for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").split(".")[0] in KERNEL_MODULES
    return False


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _definition_uses(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
    scopes: dict[tuple[str, int], Any],
    lazy_annotations: bool,
) -> set[str]:
    """The module-level names a def or class reads: the globals its body (and nested scopes)
    refer to, exactly as the compiler resolves them (`symtable`), plus what its header
    evaluates at definition time (decorators, defaults, bases, eager annotations)."""
    header: list[ast.AST] = list(node.decorator_list)
    if isinstance(node, ast.ClassDef):
        header += [*node.bases, *node.keywords]
    else:
        header += [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        if not lazy_annotations:
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            arguments += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            header += [a.annotation for a in arguments if a.annotation is not None]
            header += [node.returns] if node.returns is not None else []
    uses: set[str] = set()
    for part in header:
        uses |= _loaded_names(part)
    scope = scopes.get((node.name, node.lineno))
    if scope is None:  # not found (should not happen): read every name in the body
        return uses | _loaded_names(node)
    return uses | _referenced_globals(scope)


def _referenced_globals(scope: Any) -> set[str]:
    names = {s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced()}
    for child in scope.get_children():
        names |= _referenced_globals(child)
    return names


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)


def _bound_names(node: ast.stmt) -> set[str]:
    """Every name a top-level statement binds (or changes in place: `CONFIG["k"] = 1`)."""
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
            if sub is not node:
                continue
        if isinstance(sub, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, ast.ImportFrom):
            names.update(a.asname or a.name for a in sub.names)
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            base = sub.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # Names bound inside a function or class body are its own, not the module's.
        return {node.name}
    return names


def _label(node: ast.stmt) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {node.name}"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}"
    return f"`{_one_line(node)}`"


def _one_line(node: ast.stmt) -> str:
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _render(text: str, statements: list[ast.stmt], keep: list[bool]) -> str:
    """The kept statements, each on its original lines; every other line is blank.

    Statements joined with `;` on one line are cut apart by column, so a kept one never carries
    a removed neighbour along."""
    source = text.splitlines()
    out = [""] * len(source)
    for node, kept in zip(statements, keep):
        if not kept:
            continue
        first, last = _first_line(node), node.end_lineno or node.lineno
        # A decorated def starts at its first decorator, at the start of that line.
        start_col = node.col_offset if first == node.lineno else 0
        end_col = node.end_col_offset if node.end_col_offset is not None else len(source[last - 1])
        for number in range(first, last + 1):
            line = source[number - 1]
            begin = start_col if number == first else 0
            finish = end_col if number == last else len(line)
            piece = line[begin:finish]
            if number == first and out[number - 1].strip():
                out[number - 1] = out[number - 1] + "; " + piece
            else:
                out[number - 1] = piece
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
