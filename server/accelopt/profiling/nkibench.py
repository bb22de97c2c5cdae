"""NKIBench: the suite's index (`nkibench/index.json`) and, for one task, the kernel to profile
with the `Task` that says how to feed and judge it.

The suite lives beside the package in the repository (`<repo>/nkibench`); set
`ACCELOPT_NKIBENCH=/path/to/nkibench` to use another copy. Nothing here runs task code: the
reference modules are only ever executed by a backend, inside its sandboxed worker.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, ValidationError

from accelopt.nki.python_source import parse_module
from accelopt.profiling.evaluation import KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.task import Size, Task

SUITE_ENV = "ACCELOPT_NKIBENCH"
SIZES = ("full", "small")
Style = Literal["hand-written", "compiler-generated"]


class NkiBenchError(Exception):
    """The suite (or a kernel given for one of its tasks) cannot be used; says where and why."""


class BenchTask(BaseModel):
    """One entry of `nkibench/index.json`; paths are relative to the suite folder."""

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    kernel: str
    kernel_name: str
    reference: str
    shapes: dict[str, dict[str, int]]
    tolerance: float = Field(2e-5, gt=0)
    style: Style


class BenchIndex(BaseModel):
    tasks: list[BenchTask]


def suite_root() -> Path:
    """The nkibench folder: `$ACCELOPT_NKIBENCH`, else the one in the repository holding this package."""
    override = os.environ.get(SUITE_ENV)
    if override:
        root = Path(override).expanduser().resolve()
        if not (root / "index.json").is_file():
            raise NkiBenchError(f"{SUITE_ENV}={override}: no index.json there")
        return root
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "nkibench" / "index.json"
        if candidate.is_file():
            return candidate.parent
    raise NkiBenchError(
        f"NKIBench suite not found next to the accelopt package; set {SUITE_ENV}=/path/to/nkibench"
    )


def load_index(root: Path | None = None) -> list[BenchTask]:
    """Every task of the suite, in index order, with its files checked to exist."""
    root = suite_root() if root is None else Path(root)
    path = root / "index.json"
    try:
        index = BenchIndex.model_validate_json(path.read_text())
    except OSError as exc:
        raise NkiBenchError(f"{path}: {exc.strerror}") from None
    except ValidationError as exc:
        raise NkiBenchError(f"{path}: not a valid NKIBench index:\n{exc}") from None
    seen: set[str] = set()
    for entry in index.tasks:
        if entry.name in seen:
            raise NkiBenchError(f"{path}: task {entry.name!r} is listed twice")
        seen.add(entry.name)
        for rel in (entry.kernel, entry.reference):
            if not (root / rel).is_file():
                raise NkiBenchError(f"{path}: task {entry.name!r} names {rel}, which does not exist")
        missing = [s for s in SIZES if s not in entry.shapes]
        if missing:
            raise NkiBenchError(f"{path}: task {entry.name!r} has no shapes for size {', '.join(missing)}")
    return index.tasks


def find_task(name: str, root: Path | None = None) -> BenchTask:
    tasks = load_index(root)
    for entry in tasks:
        if entry.name == name:
            return entry
    raise NkiBenchError(f"no NKIBench task {name!r}; the tasks are: {', '.join(t.name for t in tasks)}")


def bench_task(
    name: str,
    size: str = "full",
    *,
    root: Path | None = None,
    kernel_path: Path | None = None,
) -> tuple[KernelSource, Task]:
    """The kernel to profile for task `name` (its baseline, or the file `kernel_path`, e.g. an
    optimized kernel) and the task built from the suite's reference module at `size`."""
    from accelopt.profiling.task import task_for_kernel

    if size not in SIZES:
        raise NkiBenchError(f"size must be one of {', '.join(SIZES)}, not {size!r}")
    root = suite_root() if root is None else Path(root)
    entry = find_task(name, root)
    path = (root / entry.kernel) if kernel_path is None else Path(kernel_path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise NkiBenchError(f"{path}: {exc.strerror}") from None
    kernel = KernelSource(text=text, name=kernel_function(text, entry.kernel_name, path), path=str(path))
    checked: Size = "small" if size == "small" else "full"  # one of SIZES, checked above
    task = task_for_kernel(kernel, reference=str((root / entry.reference).resolve()), size=checked)
    return kernel, task.model_copy(update={"name": entry.name, "tolerance": entry.tolerance})


# The name the conventions give this entry point.
task = bench_task


def kernel_function(text: str, preferred: str, path: Path) -> str:
    """The kernel function in `text`: `preferred` if defined, else the file's only `@nki.jit`
    (or otherwise decorated) top-level function. Read from the syntax tree, nothing is run."""
    try:
        tree = parse_module(text, filename=str(path))
    except SyntaxError as exc:
        raise NkiBenchError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if any(fn.name == preferred for fn in functions):
        return preferred
    decorated = [fn.name for fn in functions if fn.decorator_list]
    if len(decorated) == 1:
        return decorated[0]
    found = ", ".join(fn.name for fn in functions) or "none"
    raise NkiBenchError(f"{path}: no kernel function {preferred!r} (top-level functions: {found})")


def optimized_kernel_path(kernels_dir: Path, name: str) -> Path | None:
    """Where `accelopt bench --kernels DIR` looks for task `name`: DIR/<name>.py or DIR/<name>/kernel.py."""
    for candidate in (kernels_dir / f"{name}.py", kernels_dir / name / "kernel.py"):
        if candidate.is_file():
            return candidate
    return None
