"""SPMD launch grids: ``kernel[g]``, ``kernel[g1, g2]``, ``nl.nc(k)``, ``nl.spmd_dim(...)`` and
what a running instance asks of them (``nl.program_id``, ``nl.num_programs``,
``nl.program_ndim``).

A grid is a tuple of dimensions. Every program instance (one point of the grid) runs the kernel
once; all instances share the kernel's inputs and its ``shared_hbm`` outputs. Each instance runs on
one physical NeuronCore of the logical core the grid is launched on:

- a dimension marked ``nl.nc(k)`` spreads its indices over k physical cores, index i on core i
  (the ``nl.nc`` reference page: ``kernel[nl.nc(2), 2]`` runs ``kernel[0, *]`` on core 0 and
  ``kernel[1, *]`` on core 1);
- ``nl.spmd_dim(a, b, ...)`` is one dimension of size a*b*... whose index is split row-major over
  its sub-dimensions; the sub-dimension marked ``nl.nc(k)`` picks the core (the ``nl.spmd_dim``
  reference page: ``spmd_dim(nl.nc(2), 2)`` puts indices 0, 1 on core 0 and 2, 3 on core 1);
- an unannotated one-dimensional grid of 2 on a target whose logical core has two physical cores
  (trn2, trn3: the "Using Logical NeuronCores" guide, where ``kernel[2]`` launches on two cores);
- every other grid runs on one physical core, its instances one after another (LNC=1).

Sources: Neuron SDK docs, NKI API reference pages ``nki.language.nc``, ``nki.language.spmd_dim``,
``nki.language.program_id`` / ``num_programs`` / ``program_ndim`` and the LNC guide (v2.33).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelopt.nki.context import KernelContext, current
from accelopt.nki.errors import NkiError, kernel_location
from accelopt.nki.python_source import parse_python

if TYPE_CHECKING:
    from accelopt.nki.tensor import Tensor

# Physical NeuronCores in one logical core, most a target allows (LNC guide: degree 1 or 2; Trainium1
# has no LNC=2).
_MAX_LNC = {"trn1": 1, "trn2": 2, "trn3": 2}


@dataclass(frozen=True, slots=True)
class nc:
    """``nl.nc(k)``: a launch-grid dimension of size k spread over k physical NeuronCores."""

    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
            path, line = kernel_location()
            raise NkiError("err_invalid_launch_grid", f"nl.nc needs a positive core count, got {self.size!r}", path, line)


class spmd_dim:
    """``nl.spmd_dim(a, b, ...)``: one grid dimension of size a*b*..., split row-major into the
    sub-dimensions; the one given as ``nl.nc(k)`` picks the physical core."""

    __slots__ = ("parts",)

    def __init__(self, *parts: Any) -> None:
        if not parts:
            path, line = kernel_location()
            raise NkiError("err_invalid_launch_grid", "nl.spmd_dim needs at least one sub-dimension", path, line)
        self.parts = tuple(_part(p) for p in parts)

    @property
    def size(self) -> int:
        total = 1
        for p in self.parts:
            total *= p.size if isinstance(p, nc) else p
        return total

    def __repr__(self) -> str:
        return f"spmd_dim({', '.join(map(repr, self.parts))})"


def _part(value: Any) -> int | nc:
    if isinstance(value, nc):
        return value
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size < 1 or isinstance(value, bool):
        path, line = kernel_location()
        raise NkiError("err_invalid_launch_grid", f"a launch-grid dimension must be a positive integer, got {value!r}", path, line)
    return size


@dataclass(frozen=True, slots=True)
class Grid:
    """A launch grid as the emulator runs it: the sizes of its dimensions and, per dimension, how
    its index picks a physical core."""

    dims: tuple[Any, ...]  # int | nc | spmd_dim, as the kernel wrote them

    @staticmethod
    def of(value: Any) -> Grid:
        if isinstance(value, Grid):
            return value
        dims = value if isinstance(value, tuple) else (value,)
        return Grid(tuple(d if isinstance(d, (nc, spmd_dim)) else _part(d) for d in dims))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else d.size for d in self.dims)

    @property
    def count(self) -> int:
        total = 1
        for s in self.sizes:
            total *= s
        return total

    def annotated_cores(self) -> int:
        """Physical cores the grid names with nl.nc (1 if none)."""
        cores = 1
        for d in self.dims:
            if isinstance(d, nc):
                cores *= d.size
            elif isinstance(d, spmd_dim):
                for p in d.parts:
                    if isinstance(p, nc):
                        cores *= p.size
        return cores

    def cores(self, target: str) -> int:
        annotated = self.annotated_cores()
        if annotated > 1:
            return annotated
        if len(self.dims) == 1 and self.sizes == (2,) and _MAX_LNC.get(target, 1) >= 2:
            return 2
        return 1

    def instances(self, target: str) -> Iterator[tuple[tuple[int, ...], int]]:
        """Every program instance in launch order: (program ids, physical core)."""
        cores = self.cores(target)
        annotated = self.annotated_cores() > 1
        for ids in itertools.product(*(range(s) for s in self.sizes)):
            if annotated:
                core = 0
                for d, i in zip(self.dims, ids):
                    core = core * _core_span(d) + _core_of(d, i)
            elif cores > 1:
                core = ids[0]
            else:
                core = 0
            yield ids, core


def _core_span(dim: Any) -> int:
    if isinstance(dim, nc):
        return dim.size
    if isinstance(dim, spmd_dim):
        span = 1
        for p in dim.parts:
            if isinstance(p, nc):
                span *= p.size
        return span
    return 1


def _core_of(dim: Any, index: int) -> int:
    if isinstance(dim, nc):
        return index
    if not isinstance(dim, spmd_dim):
        return 0
    core = 0
    rest = index
    digits = []
    for p in reversed(dim.parts):
        size = p.size if isinstance(p, nc) else p
        digits.append((rest % size, p))
        rest //= size
    for digit, p in reversed(digits):
        if isinstance(p, nc):
            core = core * p.size + digit
    return core


def check_cores(grid: Grid, target: str, path: str, line: int) -> None:
    """Refuse a grid naming more physical cores than a logical core of `target` has."""
    cores = grid.annotated_cores()
    limit = _MAX_LNC.get(target, 1)
    if cores > max(limit, 1):
        raise NkiError(
            "err_invalid_launch_grid",
            f"the launch grid spreads over {cores} physical NeuronCores but a logical core of {target} "
            f"has at most {limit}",
            path,
            line,
        )


# --- what a running instance sees ------------------------------------------------------------


def program_id(axis: int = 0) -> int:
    """The running instance's index along `axis` of the launch grid (0 without a grid)."""
    ctx = current()
    ids = ctx.program_ids
    axis = int(axis)
    if axis < 0 or (ids and axis >= len(ids)):
        raise ctx.error(
            "err_invalid_program_axis",
            f"nl.program_id({axis}): the launch grid has {len(ids)} dimension(s)",
        )
    return ids[axis] if axis < len(ids) else 0


def num_programs(axes: Any = None) -> int:
    """Instances along `axes` (an int or a tuple of them); all instances when None."""
    ctx = current()
    sizes = ctx.grid_sizes
    chosen: list[int]
    if axes is None:
        chosen = list(range(len(sizes)))
    elif isinstance(axes, (tuple, list)):
        chosen = [int(a) for a in axes]
    else:
        chosen = [int(axes)]
    total = 1
    for a in chosen:
        if a < 0 or (sizes and a >= len(sizes)):
            raise ctx.error(
                "err_invalid_program_axis", f"nl.num_programs({axes}): the launch grid has {len(sizes)} dimension(s)"
            )
        total *= sizes[a] if a < len(sizes) else 1
    return total


def program_ndim() -> int:
    """Dimensions of the launch grid (0 when the kernel was launched without one)."""
    return len(current().grid_sizes)


# --- shared outputs ----------------------------------------------------------------------------


def shared_output(ctx: KernelContext, shape: tuple[int, ...], dtype: Any, line: int) -> Tensor | None:
    """A ``shared_hbm`` allocation inside a grid of several instances: None in the first instance
    (it allocates, and the caller remembers the tensor), else the tensor the first instance
    allocated at the same place in allocation order; every instance writes into it."""
    if ctx.recorder is not None:
        ctx.recorder.refuse()  # never replayed: which tensor it returns depends on the instance
    if ctx.program_index == 0:
        return None
    outputs = ctx.shared_outputs or []
    cursor = ctx.shared_cursor
    ctx.shared_cursor = cursor + 1
    if cursor >= len(outputs) or outputs[cursor].shape != shape or outputs[cursor].dtype != dtype:
        raise ctx.error(
            "err_spmd_outputs_differ",
            f"program instance {ctx.program_ids} allocates shared_hbm tensor #{cursor + 1} of shape "
            f"{shape}, which the first instance did not; every instance must allocate the same outputs",
            line,
        )
    return outputs[cursor]


# --- a grid written as text (`# accelopt: grid nc(2), 2`) --------------------------------------


def parse_grid(text: str) -> Grid:
    """The grid of a text such as ``2``, ``2, 2``, ``nc(2), 2`` or ``spmd_dim(nc(2), 2), 2``
    (read with `ast`, never evaluated). Raises ValueError when it is not one."""
    try:
        tree = parse_python(f"({text},)", mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read launch grid {text!r}") from None
    if not isinstance(tree.body, ast.Tuple) or not tree.body.elts:
        raise ValueError(f"cannot read launch grid {text!r}")
    return Grid(tuple(_grid_dim(node, text) for node in tree.body.elts))


def _grid_dim(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        if node.value < 1:
            raise ValueError(f"launch grid {text!r}: sizes must be positive")
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "nc" and len(node.args) == 1:
            size = _grid_dim(node.args[0], text)
            if isinstance(size, int):
                return nc(size)
        if node.func.id == "spmd_dim" and node.args:
            parts = [_grid_dim(a, text) for a in node.args]
            if all(isinstance(p, (int, nc)) for p in parts):
                return spmd_dim(*parts)
    raise ValueError(f"cannot read launch grid {text!r}: use sizes, nc(k) and spmd_dim(...)")
