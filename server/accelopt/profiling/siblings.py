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

Kernels that live in a package (library code) import their helpers relatively:
`from ..utils.tiling import scaled_add`, and the helper `from .constants import SCALE`. Such an
import resolves as Python would, to a module file of the same package: each dot past the first
climbs one folder, and every folder climbed through must hold an `__init__.py`, so an import
never reaches above the package's top. The same rule applies: the user's saved file must import
the module too. The worker knows each module by one identifier, whatever each file spells it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
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
    allowed = set(_user_siblings(kernel, folder).values())
    kernel_map = {m: p for m, p in _siblings_of(kernel.text, folder, kernel.path).items() if p in allowed}
    own = cached_slice(kernel.text, kernel.name, frozenset(kernel_map))
    if not own.sibling_names:
        return KernelProgram(own)
    assert folder is not None
    maps: dict[Path, dict[str, Path]] = {}  # per module file: its import spellings -> files
    needed: dict[Path, set[str]] = {}
    for spelled, names in own.sibling_names.items():
        needed.setdefault(kernel_map[spelled], set()).update(names)
    texts: dict[Path, str] = {}
    slices: dict[Path, ModuleSlice] = {}
    changed = True
    while changed:
        changed = False
        for path in list(needed):
            if len(needed) > _MAX_MODULES:
                raise SiblingError(f"more than {_MAX_MODULES} sibling modules are imported", kernel.path)
            if path not in texts:
                texts[path] = _read(path)
                maps[path] = _siblings_of(texts[path], path.parent, str(path))
            try:
                sliced = slice_module(texts[path], sorted(needed[path]), frozenset(maps[path]))
            except SyntaxError as exc:
                raise SiblingError(f"syntax error: {exc.msg}", str(path), exc.lineno) from None
            missing = sorted(n for n in needed[path] if n not in sliced.bound_names)
            if missing:
                raise SiblingError(f"{path.name} defines no {', '.join(missing)}", str(path))
            slices[path] = sliced
            for spelled, names in sliced.sibling_names.items():
                other = maps[path][spelled]
                if other not in needed or not names <= needed[other]:
                    needed.setdefault(other, set()).update(names)
                    changed = True
    order = _dependency_order(slices, maps, [kernel_map[m] for m in own.sibling_names])
    module_names = _module_names(order, folder)

    def named(sliced: ModuleSlice, spellings: dict[str, Path]) -> ModuleSlice:
        # The worker knows each module by one name; a slice's imports say which, whatever the spelling.
        imports = tuple(replace(i, module=module_names[spellings[i.module]]) for i in sliced.sibling_imports)
        return replace(sliced, sibling_imports=imports)

    return KernelProgram(
        named(own, kernel_map),
        tuple(SiblingModule(module_names[path], str(path), named(slices[path], maps[path])) for path in order),
    )


def _module_names(order: list[Path], folder: Path) -> dict[Path, str]:
    """A distinct identifier per module file: its stem beside the kernel (`helpers`), else the
    last three parts of its path joined by underscores (`lib_utils_tiling`)."""
    names: dict[Path, str] = {}
    taken: set[str] = set()
    for path in order:
        if path.parent == folder:
            base = path.stem
        else:
            parts = [p for p in path.with_suffix("").parts[-3:] if p not in (os.sep, "..")]
            base = "_".join(parts)
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "module"
        if base[0].isdigit():
            base = f"m_{base}"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        names[path] = name
    return names


def _user_siblings(kernel: KernelSource, folder: Path | None) -> dict[str, Path]:
    """The siblings the kernel's file on disk imports (none when it cannot be read)."""
    if folder is None or kernel.path is None:
        return {}
    try:
        saved = Path(kernel.path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return _siblings_of(saved, folder, kernel.path)


def _folder(kernel: KernelSource) -> Path | None:
    if not kernel.path or not os.path.isabs(kernel.path):
        return None
    return Path(kernel.path).parent


def _siblings_of(text: str, folder: Path | None, path: str | None) -> dict[str, Path]:
    """The modules `text` imports that are files of the user's (spelling -> file)."""
    if folder is None:
        return {}
    own = Path(path).resolve() if path else None
    try:
        modules = imported_modules(text)
    except SyntaxError:
        return {}
    found: dict[str, Path] = {}
    for spelled in modules:
        target = _resolve(spelled, folder)
        if target is not None and target != own:
            found[spelled] = target
    return found


def _resolve(spelled: str, folder: Path) -> Path | None:
    """The file a module import names, when it is the user's: `helpers` beside the file, or a
    relative `.helpers` / `..utils.helpers` inside the package the file belongs to. As in Python,
    each dot past the first climbs one package, and a folder is a package only with an
    `__init__.py`: an import never reaches above the top of the package."""
    level = len(spelled) - len(spelled.lstrip("."))
    rest = spelled[level:]
    if level == 0:
        if rest.split(".")[0] in KERNEL_MODULES or "." in rest:
            return None
        target = folder / f"{rest}.py"
        return target.resolve() if target.is_file() else None
    base = folder
    for climbed in range(level):
        if not (base / "__init__.py").is_file():
            return None  # not inside a package this deep
        if climbed < level - 1:
            base = base.parent
    parts = rest.split(".")
    if not rest or not all(p.isidentifier() for p in parts):
        return None
    target = base.joinpath(*parts[:-1], f"{parts[-1]}.py")
    return target.resolve() if target.is_file() else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SiblingError(f"cannot read {path.name}: {exc}", str(path)) from None


def _dependency_order(
    slices: dict[Path, ModuleSlice], maps: dict[Path, dict[str, Path]], roots: list[Path]
) -> list[Path]:
    order: list[Path] = []
    state: dict[Path, str] = {}

    def visit(module: Path, chain: list[Path]) -> None:
        if state.get(module) == "done":
            return
        if state.get(module) == "visiting":
            cycle = " -> ".join(p.name for p in [*chain[chain.index(module) :], module])
            raise SiblingError(
                f"circular imports between modules beside the kernel ({cycle}) are not supported", str(module)
            )
        state[module] = "visiting"
        for dependency in sorted({maps[module][spelled] for spelled in slices[module].sibling_names}):
            visit(dependency, [*chain, module])
        state[module] = "done"
        order.append(module)

    for module in sorted(set(roots)):
        visit(module, [])
    return order
