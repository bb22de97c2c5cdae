"""Modules beside a kernel file that the kernel imports (`from tiling import tile_add`).

Kernel files share helpers with the files next to them. Such an import is not a module load
in the sandbox (the policy allows only numpy, math and NKI): the trusted process reads each
sibling file, slices it the same way as the kernel's own file (`module_slice`: only what the
importer reaches, on its original lines), and the worker runs those slices as modules of their
own, under their own file names, binding the imported names itself. So a sibling's host code
never runs either, and an error inside a helper is reported in the helper's file.

A module counts as a sibling when `<the kernel's folder>/<name>.py` exists, `name` is not one
of the modules the sandbox provides, and the kernel's file *as saved on disk* imports it too. The
last condition matters in a search: candidate kernels are written by a model, and without it a
candidate could import any `.py` file beside the kernel (a `config.py` holding a key) and carry
its constants out in an error message. Candidates may use the helpers the user's file uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.module_slice import ModuleSlice, cached_slice, imported_modules, slice_module
from accelopt.profiling.policy import KERNEL_MODULES

# A kernel's helpers rarely go deeper than this; a deeper chain is most likely a cycle's cousin.
_MAX_MODULES = 32


class SiblingError(Exception):
    """A sibling module cannot be used: says which file and why."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line


@dataclass(frozen=True)
class SiblingModule:
    """One sibling as it runs: its name, its file, and the slice of it that is needed."""

    name: str
    path: str
    sliced: ModuleSlice


@dataclass(frozen=True)
class KernelProgram:
    """What runs for a kernel: the slice of its file and, dependencies first, its siblings'."""

    kernel: ModuleSlice
    modules: tuple[SiblingModule, ...] = ()

    def notes(self) -> list[str]:
        notes = [self.kernel.note()] if self.kernel.note() else []
        for module in self.modules:
            note = module.sliced.note()
            if note is not None and module.sliced.left_out:
                notes.append(f"in {Path(module.path).name}: {note}")
        return [n for n in notes if n]


def kernel_program(kernel: KernelSource) -> KernelProgram:
    """The kernel's slice and the slices of the sibling modules it reaches (read from disk).

    Raises SyntaxError for the kernel's own file and SiblingError for a sibling's problem."""
    folder = _folder(kernel)
    allowed = _user_siblings(kernel, folder)
    own = cached_slice(kernel.text, kernel.name, _siblings_of(kernel.text, folder, kernel.path) & allowed)
    if not own.sibling_names:
        return KernelProgram(own)
    assert folder is not None
    needed: dict[str, set[str]] = {m: set(names) for m, names in own.sibling_names.items()}
    texts: dict[str, str] = {}
    slices: dict[str, ModuleSlice] = {}
    changed = True
    while changed:
        changed = False
        for module in list(needed):
            if len(needed) > _MAX_MODULES:
                raise SiblingError(f"more than {_MAX_MODULES} sibling modules are imported", kernel.path)
            path = folder / f"{module}.py"
            if module not in texts:
                texts[module] = _read(path)
            siblings = _siblings_of(texts[module], folder, str(path))
            try:
                sliced = slice_module(texts[module], sorted(needed[module]), siblings)
            except SyntaxError as exc:
                raise SiblingError(f"syntax error: {exc.msg}", str(path), exc.lineno) from None
            missing = sorted(n for n in needed[module] if n not in sliced.bound_names)
            if missing:
                raise SiblingError(f"{module}.py defines no {', '.join(missing)}", str(path))
            slices[module] = sliced
            for other, names in sliced.sibling_names.items():
                if other not in needed or not names <= needed[other]:
                    needed.setdefault(other, set()).update(names)
                    changed = True
    order = _dependency_order(slices, own, folder)
    return KernelProgram(
        own, tuple(SiblingModule(name, str(folder / f"{name}.py"), slices[name]) for name in order)
    )


def _user_siblings(kernel: KernelSource, folder: Path | None) -> frozenset[str]:
    """The siblings the kernel's file on disk imports (none when it cannot be read)."""
    if folder is None or kernel.path is None:
        return frozenset()
    try:
        saved = Path(kernel.path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    return _siblings_of(saved, folder, kernel.path)


def _folder(kernel: KernelSource) -> Path | None:
    if not kernel.path or not os.path.isabs(kernel.path):
        return None
    return Path(kernel.path).parent


def _siblings_of(text: str, folder: Path | None, path: str | None) -> frozenset[str]:
    if folder is None:
        return frozenset()
    own = Path(path).stem if path else None
    try:
        modules = imported_modules(text)
    except SyntaxError:
        return frozenset()
    return frozenset(
        m
        for m in modules
        if m.split(".")[0] not in KERNEL_MODULES and m != own and "." not in m and (folder / f"{m}.py").is_file()
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SiblingError(f"cannot read {path.name}: {exc}", str(path)) from None


def _dependency_order(slices: dict[str, ModuleSlice], own: ModuleSlice, folder: Path) -> list[str]:
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(module: str, chain: list[str]) -> None:
        if state.get(module) == "done":
            return
        if state.get(module) == "visiting":
            cycle = " -> ".join([*chain[chain.index(module) :], module])
            raise SiblingError(
                f"circular imports between modules beside the kernel ({cycle}) are not supported",
                str(folder / f"{module}.py"),
            )
        state[module] = "visiting"
        for dependency in sorted(slices[module].sibling_names):
            visit(dependency, [*chain, module])
        state[module] = "done"
        order.append(module)

    for module in sorted(own.sibling_names):
        visit(module, [])
    return order
