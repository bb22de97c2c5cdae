"""How a kernel says where its inputs come from: one comment line above it.

    # accelopt: reference silu_ref.py
    # accelopt: inputs x=float32[256,1024] w=float32[1024,512]~uniform(-1,1)

Directives are read from comments, so nothing has to run to find them. The nearest directive
before the kernel's `def` (or its first decorator) wins. Declared inputs are drawn from numpy's
legacy `RandomState(seed)` in declaration order: the same stream `np.random.seed(seed)` gives a
reference module's `get_inputs`, so both kinds of task are reproducible from a seed alone.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from accelopt.nki.python_source import parse_module
from accelopt.profiling.arrays import resolve_dtype
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.worker_protocol import TupleArgument

DirectiveKind = Literal["reference", "inputs"]
_DIRECTIVE_KINDS: dict[str, DirectiveKind] = {"reference": "reference", "inputs": "inputs"}

_DIRECTIVE = re.compile(r"#\s*accelopt\s*:\s*(?P<kind>[A-Za-z_]+)\s*(?P<rest>.*?)\s*$")
_SPEC = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)=(?P<dtype>[A-Za-z0-9_]+)\[(?P<shape>[^\]]*)\]"
    r"(?:~(?P<dist>[a-z]+)\((?P<args>[^)]*)\))?$"
)
# a scalar argument (an epsilon, a pool size, a flag): `eps=1e-5`, `pool=2`, `causal=True`
_CONSTANT = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)=(?P<value>True|False|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)$"
)
# a tuple argument (a shape, a permutation): `shape2D=(3,4)`, `perm=(0,2,1)`, `one=(5,)`, `none=()`
_NUMBER = r"(?:True|False|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_TUPLE = re.compile(rf"^(?P<name>[A-Za-z_]\w*)=\((?P<items>(?:{_NUMBER}(?:,{_NUMBER})*,?)?)\)$")
_DISTRIBUTIONS = {"normal": 2, "uniform": 2}
_INTEGER_DEFAULT_RANGE = (0, 100)


class DirectiveError(ValueError):
    """A malformed directive, with the 1-based line it is on."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class Directive(BaseModel):
    kind: DirectiveKind
    argument: str
    line: int = Field(description="1-based line of the directive in the kernel file")


class InputSpec(BaseModel):
    """One declared kernel input: `name=dtype[d0,d1,...]` with an optional `~dist(a,b)`, or a
    scalar argument `name=value` (a number or True/False, the same on every seed; the kernel
    gets it as that Python value), or a tuple of such values `name=(3,4)`."""

    name: str
    dtype: str = "float32"
    shape: tuple[int, ...]
    distribution: Literal["normal", "uniform"] = "normal"
    params: tuple[float, float] = (0.0, 1.0)
    value: bool | int | float | tuple[bool | int | float, ...] | None = None

    def constant(self) -> np.ndarray:
        """A scalar argument as the 0-d array the sandbox passes (float64/int64/bool: the kernel
        receives the Python number back). A tuple argument travels as a 0-d int64 placeholder
        (every array path treats it as a scalar) and its items in the job
        (`WorkerJob.tuple_arguments`), which the worker puts in its place."""
        assert self.value is not None
        if isinstance(self.value, tuple):
            return np.asarray(len(self.value), dtype=np.int64)
        return np.asarray(self.value, dtype=np.dtype(self.dtype))

    def text(self) -> str:
        if isinstance(self.value, tuple):
            items = ",".join(repr(v) for v in self.value)
            return f"{self.name}=({items}{',' if len(self.value) == 1 else ''})"
        if self.value is not None:
            return f"{self.name}={self.value!r}"
        dims = ",".join(str(d) for d in self.shape)
        spec = f"{self.name}={self.dtype}[{dims}]"
        if (self.distribution, self.params) != ("normal", (0.0, 1.0)):
            spec += f"~{self.distribution}({self.params[0]:g},{self.params[1]:g})"
        return spec


def kernel_def_line(text: str, kernel_name: str) -> int | None:
    """1-based line where the kernel's definition starts (its first decorator, if any)."""
    try:
        tree = parse_module(text)
    except SyntaxError:
        match = re.search(rf"^[ \t]*def[ \t]+{re.escape(kernel_name)}[ \t]*\(", text, re.MULTILINE)
        return text.count("\n", 0, match.start()) + 1 if match else None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == kernel_name:
            return min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return None


def _comments(text: str) -> list[tuple[int, str]]:
    """(line, comment text) of every comment; falls back to a line scan for unfinished code."""
    try:
        return [
            (tok.start[0], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        found = []
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.lstrip()
            if stripped.startswith("#"):
                found.append((number, stripped))
        return found


def find_directive(text: str, kernel_name: str) -> Directive | None:
    """The nearest `# accelopt: ...` directive above the kernel (None if there is none).

    Raises DirectiveError for an unknown directive kind, so a typo is reported, not ignored."""
    limit = kernel_def_line(text, kernel_name)
    best: Directive | None = None
    for line, comment in _comments(text):
        if limit is not None and line >= limit:
            break
        match = _DIRECTIVE.match(comment)
        if match is None:
            continue
        if match["kind"].lower() == "grid":
            continue  # how the kernel is launched, not where its inputs come from (find_grid)
        kind = _DIRECTIVE_KINDS.get(match["kind"].lower())
        if kind is None:
            raise DirectiveError(
                f"unknown accelopt directive '{match['kind']}': expected `# accelopt: reference FILE.py`, "
                "`# accelopt: inputs name=dtype[shape] ...` or `# accelopt: grid 2,2`",
                line,
            )
        best = Directive(kind=kind, argument=match["rest"], line=line)
    return best


def point_reference_directive(
    text: str, kernel_name: str, reference_path: str, folder: os.PathLike | str
) -> str:
    """`text` with the kernel's `# accelopt: reference` directive naming `reference_path` as
    seen from `folder` (where the text is about to be written, e.g. `best.py` in an output
    folder): a directive is resolved against the kernel file's own folder, so a copy elsewhere
    would otherwise name a file that is not there. Without a directive, one is added above the
    kernel (its task came from `--reference`). An `inputs` directive is left alone."""
    try:
        target = os.path.relpath(os.path.abspath(reference_path), os.path.abspath(folder))
    except ValueError:  # another drive (Windows): only an absolute path resolves
        target = os.path.abspath(reference_path)
    target = target.replace(os.sep, "/")
    lines = text.splitlines(keepends=True)
    try:
        directive = find_directive(text, kernel_name)
    except DirectiveError:
        directive = None
    if directive is not None and directive.kind == "inputs":
        return text
    if directive is not None:
        old = lines[directive.line - 1]
        indent = old[: len(old) - len(old.lstrip())]
        ending = "\n" if old.endswith("\n") else ""
        lines[directive.line - 1] = f"{indent}# accelopt: reference {target}{ending}"
        return "".join(lines)
    first = kernel_def_line(text, kernel_name)
    if first is None:
        return text
    lines.insert(first - 1, f"# accelopt: reference {target}\n")
    return "".join(lines)


_GRID = re.compile(r"^(?:\s*(?:\d+|nc\(\s*\d+\s*\)|spmd_dim\([^()]*(?:\([^()]*\)[^()]*)*\))\s*,?)+$")


def find_grid(text: str, kernel_name: str) -> str | None:
    """The SPMD launch grid declared above the kernel, e.g. `# accelopt: grid nc(2), 2` (None
    without one): the grid the kernel is launched on, as `kernel[nl.nc(2), 2]` would."""
    limit = kernel_def_line(text, kernel_name)
    found: str | None = None
    for line, comment in _comments(text):
        if limit is not None and line >= limit:
            break
        match = _DIRECTIVE.match(comment)
        if match is None or match["kind"].lower() != "grid":
            continue
        argument = match["rest"].strip()
        if not argument or _GRID.match(argument) is None:
            raise DirectiveError(
                f"cannot read launch grid '{argument}': expected sizes such as `2`, `2,2`, `nc(2),2` "
                "or `spmd_dim(nc(2),2),2`",
                line,
            )
        found = argument
    return found


def parse_input_specs(argument: str, line: int | None = None) -> list[InputSpec]:
    """Parse the argument of `# accelopt: inputs` (space-separated specs)."""
    specs: list[InputSpec] = []
    if not argument.strip():
        raise DirectiveError("`# accelopt: inputs` needs at least one `name=dtype[shape]`", line)
    for token in argument.split():
        match = _SPEC.match(token)
        constant = _CONSTANT.match(token) if match is None else None
        items = _TUPLE.match(token) if match is None and constant is None else None
        if items is not None:
            if any(s.name == items["name"] for s in specs):
                raise DirectiveError(f"input '{items['name']}' is declared twice", line)
            values = tuple(_scalar_value(t) for t in items["items"].split(",") if t)
            specs.append(InputSpec(name=items["name"], dtype="int64", shape=(), value=values))
            continue
        if constant is not None:
            if any(s.name == constant["name"] for s in specs):
                raise DirectiveError(f"input '{constant['name']}' is declared twice", line)
            specs.append(_constant_spec(constant["name"], constant["value"]))
            continue
        if match is None:
            raise DirectiveError(
                f"cannot read input spec '{token}': expected name=dtype[d0,d1,...] "
                "optionally followed by ~normal(mean,std) or ~uniform(low,high), a scalar "
                "name=number (or True/False), or a tuple of them name=(3,4)",
                line,
            )
        try:
            resolve_dtype(match["dtype"])
        except (TypeError, ValueError):
            raise DirectiveError(f"unknown dtype '{match['dtype']}' in '{token}'", line) from None
        try:
            shape = tuple(int(d) for d in match["shape"].split(",") if d.strip())
        except ValueError:
            raise DirectiveError(
                f"shape of '{match['name']}' must be whole numbers: [{match['shape']}]", line
            ) from None
        if not shape or any(d <= 0 for d in shape):
            raise DirectiveError(f"shape of '{match['name']}' must have positive dimensions", line)
        spec = InputSpec(name=match["name"], dtype=match["dtype"], shape=shape)
        if match["dist"]:
            spec = _with_distribution(spec, match["dist"], match["args"], token, line)
        elif np.dtype(resolve_dtype(spec.dtype)).kind in "iub":
            spec = spec.model_copy(update={"distribution": "uniform", "params": _INTEGER_DEFAULT_RANGE})
        if any(s.name == spec.name for s in specs):
            raise DirectiveError(f"input '{spec.name}' is declared twice", line)
        specs.append(spec)
    return specs


def _scalar_value(text: str) -> bool | int | float:
    if text in ("True", "False"):
        return text == "True"
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return float(text)


def _constant_spec(name: str, text: str) -> InputSpec:
    value = _scalar_value(text)
    dtype = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float64"
    return InputSpec(name=name, dtype=dtype, shape=(), value=value)


def tuple_arguments(specs: list[InputSpec]) -> list[TupleArgument]:
    """The tuple arguments of a declared input list, by position, as the worker job carries them."""
    return [
        TupleArgument(position=i, items=list(spec.value))
        for i, spec in enumerate(specs)
        if isinstance(spec.value, tuple)
    ]


def _with_distribution(spec: InputSpec, dist: str, args: str, token: str, line: int | None) -> InputSpec:
    if dist not in _DISTRIBUTIONS:
        raise DirectiveError(
            f"unknown distribution '{dist}' in '{token}': use normal(mean,std) or uniform(low,high)", line
        )
    try:
        values = tuple(float(a) for a in args.split(","))
    except ValueError:
        raise DirectiveError(f"distribution parameters must be numbers in '{token}'", line) from None
    if len(values) != _DISTRIBUTIONS[dist]:
        raise DirectiveError(f"{dist} takes {_DISTRIBUTIONS[dist]} parameters in '{token}'", line)
    if dist == "uniform" and not values[0] < values[1]:
        raise DirectiveError(f"uniform(low,high) needs low < high in '{token}'", line)
    if dist == "normal" and values[1] < 0:
        raise DirectiveError(f"normal(mean,std) needs std >= 0 in '{token}'", line)
    return spec.model_copy(update={"distribution": dist, "params": values})


def generate_inputs(specs: list[InputSpec], seed: int) -> list[np.ndarray]:
    """The declared inputs for one seed (deterministic; no global RNG state is touched)."""
    rng = np.random.RandomState(seed)
    arrays: list[np.ndarray] = []
    for spec in specs:
        if spec.value is not None:
            arrays.append(spec.constant())
            continue
        dtype = resolve_dtype(spec.dtype)
        a, b = spec.params
        integer = np.dtype(dtype).kind in "iub"
        if spec.distribution == "uniform":
            values = (
                rng.randint(int(a), int(b), size=spec.shape)
                if integer
                else rng.uniform(a, b, size=spec.shape)
            )
        else:  # normal(0, 1) draws exactly what np.random.randn draws after np.random.seed(seed)
            values = rng.normal(a, b, size=spec.shape)
            values = np.rint(values) if integer else values
        arrays.append(np.asarray(values).astype(dtype))
    return arrays


def suggest_inputs_directive(kernel: KernelSource) -> str:
    """A best-effort `# accelopt: inputs ...` line for a kernel that declares none.

    The guess reads the kernel's parameters (those without defaults are the tensors) and any
    `a, b = param.shape` unpacking in its body: unpacked names become shared dimensions, so
    `K, M = lhsT.shape` and `K, N = rhs.shape` give both the same K. A dimension is 128 in
    the first (partition) position and 512 elsewhere; a parameter with no unpacking is
    `float32[128,512]`. The user is expected to adjust the numbers; the LSP offers this line as
    a quick fix.
    """
    params, unpacked = _kernel_signature(kernel)
    sizes: dict[str, int] = {}
    specs = []
    for name in params:
        dims = unpacked.get(name)
        if dims is None:
            shape: list[int] = [128, 512]
        else:
            shape = []
            for position, dim in enumerate(dims):
                if dim not in sizes:
                    sizes[dim] = 128 if position == 0 else 512
                shape.append(sizes[dim])
        specs.append(f"{name}=float32[{','.join(str(d) for d in shape)}]")
    return "# accelopt: inputs " + " ".join(specs)


def takes_no_arguments(kernel: KernelSource) -> bool:
    """Whether the kernel's `def` has no parameters without defaults (`def k():`, as the
    examples that make their data with nl.rand / nisa.iota are): it needs no declared inputs."""
    try:
        tree = parse_module(kernel.text)
    except SyntaxError:
        return False
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel.name), None)
    if fn is None:
        return False
    positional = [*fn.args.posonlyargs, *fn.args.args]
    required_keywords = [a for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is None]
    return len(positional) == len(fn.args.defaults) and not required_keywords


def _kernel_signature(kernel: KernelSource) -> tuple[list[str], dict[str, list[str]]]:
    try:
        tree = parse_module(kernel.text)
    except SyntaxError:
        return [], {}
    fn = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel.name),
        None,
    )
    if fn is None:
        return [], {}
    positional = [*fn.args.posonlyargs, *fn.args.args]
    without_default = positional[: len(positional) - len(fn.args.defaults)]
    params = [a.arg for a in without_default]
    unpacked: dict[str, list[str]] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in params
            and node.value.value.id not in unpacked
        ):
            param = node.value.value.id
            unpacked[param] = [
                e.id if isinstance(e, ast.Name) and e.id != "_" else f"_{param}{i}"  # unnamed: not shared
                for i, e in enumerate(node.targets[0].elts)
            ]
    return params, unpacked
