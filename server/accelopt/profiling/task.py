"""What "correct" means for a kernel: its task.

Two kinds (DESIGN.md, CONVENTIONS.md):
- ``reference``: a reference module in the NKIBench convention (`get_inputs`, `forward`,
  `transform_to_nki_inputs`, `transform_nki_outputs`, optional `work`) gives the inputs and the
  expected outputs;
- ``baseline``: the original kernel is the oracle, on inputs declared beside it with
  ``# accelopt: inputs x=float32[256,1024] ...``.

A task is plain data. The reference module's text is read here, once, by the trusted process and
shipped to the sandboxed worker; it is never imported or executed in this process.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from accelopt.hardware.work import Work
from accelopt.nki.python_source import literal_value, parse_module
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.inputs import (
    DirectiveError,
    InputSpec,
    find_directive,
    find_grid,
    kernel_def_line,
    parse_input_specs,
    suggest_inputs_directive,
    takes_no_arguments,
)
from accelopt.profiling.worker_protocol import SizeArgument

TaskKind = Literal["reference", "baseline"]
Size = Literal["full", "small"]

DEFAULT_TOLERANCE = 2e-5
REFERENCE_FUNCTIONS = ("get_inputs", "forward", "transform_to_nki_inputs", "transform_nki_outputs")


class TaskError(Exception):
    """The task cannot be built; says why and where (file and 1-based line when known)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = (
            f"{self.path}:{self.line}: " if self.path and self.line else f"{self.path}: " if self.path else ""
        )
        return where + self.message


class Task(BaseModel):
    name: str
    kind: TaskKind
    kernel_name: str
    size: Size = Field("full", description="the input size the kernel is timed at")
    check_size: Size | None = Field(
        None,
        description="the size its outputs are checked at; None: the small size when the reference module "
        "offers one below `size` (real_size.py), else `size`",
    )
    tolerance: float = Field(DEFAULT_TOLERANCE, gt=0)
    seeds: int = Field(5, ge=1)
    work: Work | None = Field(
        None, description="roofline work; None: from the reference's work() or the trace"
    )
    reference_path: str | None = Field(None, description="where the reference module came from (messages)")
    reference_text: str | None = Field(
        None, description="the reference module's source, run only in the sandbox"
    )
    size_argument: SizeArgument = Field(
        "positional",
        description="how the reference's get_inputs takes the size ('none': its shapes are fixed)",
    )
    inputs: list[InputSpec] = Field(default_factory=list, description="baseline kind: the declared inputs")
    baseline: KernelSource | None = Field(
        None, description="baseline kind: the kernel whose outputs are the truth"
    )
    grid: str | None = Field(
        None,
        description="the SPMD launch grid declared above the original kernel (`# accelopt: grid ...`); "
        "a candidate that declares none is launched on it",
    )

    def key(self) -> str:
        """Identity of the task's contents (what the backend caches reference results under)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:24]


def task_for_kernel(kernel: KernelSource, reference: str | None = None, size: Size = "full") -> Task:
    """The task for a kernel: an explicit reference module wins, then the directive above it.
    The kernel's declared launch grid (if any) goes with the task.

    Raises TaskError (with file and line) when there is no way to get inputs or a reference is
    unusable; the message says how to declare one."""
    try:
        grid = find_grid(kernel.text, kernel.name)
    except DirectiveError as exc:
        raise TaskError(exc.message, kernel.path, exc.line) from None
    task = _task_for_kernel(kernel, reference, size)
    return task if grid is None else task.model_copy(update={"grid": grid})


def _task_for_kernel(kernel: KernelSource, reference: str | None, size: Size) -> Task:
    if reference is not None:
        return reference_task(kernel, reference, size=size)
    try:
        directive = find_directive(kernel.text, kernel.name)
    except DirectiveError as exc:
        raise TaskError(exc.message, kernel.path, exc.line) from None
    if directive is None and takes_no_arguments(kernel):
        # nothing to feed it: the kernel is its own oracle on no inputs
        return Task(
            name=kernel.name,
            kind="baseline",
            kernel_name=kernel.name,
            size=size,
            baseline=kernel.model_copy(),
        )
    if directive is None:
        raise TaskError(
            "no way to get inputs for kernel "
            f"'{kernel.name}': add a line above it, either `# accelopt: reference REF.py` (a reference "
            "module) or, to use this kernel as its own oracle, e.g. "
            f"`{suggest_inputs_directive(kernel)}`",
            kernel.path,
            kernel_def_line(kernel.text, kernel.name),
        )
    if directive.kind == "reference":
        if not directive.argument:
            raise TaskError("`# accelopt: reference` needs a file name", kernel.path, directive.line)
        base = Path(kernel.path).parent if kernel.path else Path.cwd()
        return reference_task(
            kernel, str(base / directive.argument), size=size, cited_at=(kernel.path, directive.line)
        )
    try:
        specs = parse_input_specs(directive.argument, directive.line)
    except DirectiveError as exc:
        raise TaskError(exc.message, kernel.path, exc.line) from None
    return Task(
        name=kernel.name,
        kind="baseline",
        kernel_name=kernel.name,
        size=size,
        inputs=specs,
        baseline=kernel.model_copy(),
    )


def reference_task(
    kernel: KernelSource,
    reference_path: str,
    *,
    size: Size = "full",
    tolerance: float | None = None,
    cited_at: tuple[str | None, int | None] = (None, None),
) -> Task:
    """A reference-module task; the module is checked statically (it is not run here)."""
    path = os.path.abspath(reference_path)
    cite_path, cite_line = cited_at if cited_at[1] is not None else (path, None)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskError(f"reference module not found: {path}", cite_path, cite_line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read reference module {path}: {exc}", cite_path, cite_line) from None
    declared_tolerance, size_argument = _check_reference(text, path)
    return Task(
        name=Path(path).stem.removesuffix("_ref"),
        kind="reference",
        kernel_name=kernel.name,
        size=size,
        tolerance=tolerance or declared_tolerance or DEFAULT_TOLERANCE,
        reference_path=path,
        reference_text=text,
        size_argument=size_argument,
    )


def _check_reference(text: str, path: str) -> tuple[float | None, SizeArgument]:
    """Static checks on a reference module; returns its `TOLERANCE = <number>` if it sets one
    and how its `get_inputs` takes the size."""
    try:
        tree = parse_module(text, filename=path)
    except SyntaxError as exc:
        raise TaskError(f"syntax error in reference module: {exc.msg}", path, exc.lineno) from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [f for f in REFERENCE_FUNCTIONS if f not in defined]
    if missing:
        raise TaskError(
            "reference module does not define "
            + ", ".join(f"`{m}`" for m in missing)
            + " (NKIBench convention: get_inputs, forward, transform_to_nki_inputs, transform_nki_outputs)",
            path,
            None,
        )
    tolerance = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "TOLERANCE" for t in node.targets
        ):
            try:
                value = literal_value(node.value)
            except ValueError:
                raise TaskError("TOLERANCE must be a number literal", path, node.lineno) from None
            if not isinstance(value, (int, float)) or value <= 0:
                raise TaskError("TOLERANCE must be a positive number", path, node.lineno)
            tolerance = float(value)
    get_inputs = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs")
    return tolerance, _size_argument(get_inputs, path)


def _size_argument(get_inputs: ast.FunctionDef, path: str) -> SizeArgument:
    """`get_inputs(size=...)` when it has a `size` parameter, `get_inputs(size)` when it takes
    one positional parameter, `get_inputs()` when it takes none (the published NKIBench form)."""
    args = get_inputs.args
    positional = [*args.posonlyargs, *args.args]
    if any(a.arg == "size" for a in [*args.args, *args.kwonlyargs]):
        return "keyword"
    required = len(positional) - len(args.defaults)
    if required > 1 or any(d is None for d in args.kw_defaults):
        raise TaskError(
            'get_inputs must take no argument or only the size (e.g. `def get_inputs(size="full")`)',
            path,
            get_inputs.lineno,
        )
    if positional or args.vararg:
        return "positional"
    return "none"


@functools.lru_cache(maxsize=64)
def transform_is_identity(reference_text: str) -> bool:
    """Whether the module's `transform_nki_outputs` is, read statically, the identity pairing
    ``return [np.asarray(kernel_out)], [np.asarray(ref_out)]`` (or without `np.asarray`).

    Then the backend compares single outputs directly instead of running the module's code in
    one more sandboxed worker. Nothing is executed to decide this."""
    try:
        tree = parse_module(reference_text)
    except SyntaxError:
        return False
    numpy_aliases = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "numpy"
    }
    rebound = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    numpy_aliases -= rebound
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "transform_nki_outputs"]
    if len(functions) != 1:
        return False
    fn = functions[0]
    params = [a.arg for a in fn.args.args]
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(params) != 2 or fn.args.vararg or fn.args.kwarg or len(body) != 1:
        return False
    returned = body[0].value if isinstance(body[0], ast.Return) else None
    if not isinstance(returned, (ast.Tuple, ast.List)) or len(returned.elts) != 2:
        return False

    def passes_through(node: ast.expr, name: str) -> bool:
        if not isinstance(node, ast.List) or len(node.elts) != 1:
            return False
        item = node.elts[0]
        if isinstance(item, ast.Name):
            return item.id == name
        return (
            isinstance(item, ast.Call)
            and isinstance(item.func, ast.Attribute)
            and item.func.attr == "asarray"
            and isinstance(item.func.value, ast.Name)
            and item.func.value.id in numpy_aliases
            and len(item.args) == 1
            and not item.keywords
            and isinstance(item.args[0], ast.Name)
            and item.args[0].id == name
        )

    return passes_through(returned.elts[0], params[0]) and passes_through(returned.elts[1], params[1])


# A hidden size costs one more numeric run of the candidate; past this many times the task's own
# size (the product of the shape's dimensions) it is not checked (NKIBench's "full" sizes).
HIDDEN_SIZE_MAX_RATIO = 16


def offered_sizes(reference_text: str) -> dict[str, int]:
    """The sizes a reference module offers in a literal ``SHAPES = {name: shape}`` (a dict of
    dimensions or a tuple of them), each with the product of its dimensions. Read statically."""
    try:
        tree = parse_module(reference_text)
    except SyntaxError:
        return {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "SHAPES" for t in node.targets)
        ):
            continue
        try:
            shapes = literal_value(node.value)
        except ValueError:
            return {}
        if not isinstance(shapes, dict):
            return {}
        sizes: dict[str, int] = {}
        for name, shape in shapes.items():
            dims = list(shape.values()) if isinstance(shape, dict) else shape
            if isinstance(dims, int):
                dims = [dims]
            if not isinstance(name, str) or not isinstance(dims, (list, tuple)):
                continue
            if all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
                product = 1
                for d in dims:
                    product *= d
                sizes[name] = product
        return sizes
    return {}


def hidden_sizes(reference_text: str, size: Size) -> list[Size]:
    """The other sizes of the module a candidate evaluated at `size` is also checked at (one
    drawn secretly per evaluation): those no more than HIDDEN_SIZE_MAX_RATIO times larger."""
    offered = offered_sizes(reference_text)
    own = offered.get(size)
    if own is None:
        return []
    names: tuple[Size, ...] = ("full", "small")
    return [n for n in names if n != size and n in offered and offered[n] <= own * HIDDEN_SIZE_MAX_RATIO]
