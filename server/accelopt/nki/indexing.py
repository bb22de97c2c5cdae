"""Index expressions (``nl.arange`` grids with affine offsets) and mask predicates.

An `IndexExpr` is kept *symbolic* as ``offset + sum(coef[a] * t[a])`` where ``t[a]`` runs over
``range(sizes[a])`` along broadcast axis ``a``. That makes index boxes and mask ranges cheap to
compute analytically (trace-only runs never materialise index arrays). Anything non-affine
(``//``, ``%``, products of aranges) falls back to a materialised integer array.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from accelopt.nki import context as _context

_INT_TYPES = (int, np.integer)


def _broadcast_sizes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    elif len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"index grids of shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def _pad_left(values: tuple[int, ...], ndim: int, fill: int) -> tuple[int, ...]:
    return (fill,) * (ndim - len(values)) + values


class IndexExpr:
    """An affine index grid: ``offset + sum(coefs[a] * t_a)``, ``t_a in range(sizes[a])``."""

    __slots__ = ("_column", "_expanded", "_negated", "_row", "coefs", "offset", "sizes", "values")
    __array_ufunc__ = None  # make numpy defer to our reflected operators

    def __init__(
        self,
        sizes: tuple[int, ...],
        coefs: tuple[int, ...],
        offset: int,
        values: np.ndarray | None = None,
    ) -> None:
        self.sizes = sizes
        self.coefs = coefs
        self.offset = offset
        self.values = values  # materialised grid for non-affine expressions
        # 1-D grids remember their placements (`[:, None]`, `[None, :]`): grids are immutable
        self._expanded: dict[tuple[bool, ...], IndexExpr] | None = None
        self._column: IndexExpr | None = None  # self[:, None], once made
        self._row: IndexExpr | None = None  # self[None, :], once made
        # coefficients of -self, kept because tail masks write `n - i*128 - nl.arange(128)[:, None]`
        self._negated: tuple[int, ...] | None = None

    # --- shape -----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.sizes

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        if self.values is not None:
            return f"IndexExpr(values shape={self.values.shape})"
        return f"IndexExpr(sizes={self.sizes}, coefs={self.coefs}, offset={self.offset})"

    def materialize(self) -> np.ndarray:
        if self.values is not None:
            return self.values
        grid = np.full(self.sizes, self.offset, dtype=np.int64)
        ndim = len(self.sizes)
        for axis, (size, coef) in enumerate(zip(self.sizes, self.coefs)):
            if coef and size > 1:
                shape = [1] * ndim
                shape[axis] = size
                grid = grid + (coef * np.arange(size, dtype=np.int64)).reshape(shape)
        return grid

    def bounds(self) -> tuple[int, int]:
        """Inclusive min and max of the grid."""
        if self.values is not None:
            if self.values.size == 0:
                return 0, -1
            return int(self.values.min()), int(self.values.max())
        lo = hi = self.offset
        for size, coef in zip(self.sizes, self.coefs):
            span = coef * (size - 1)
            if span > 0:
                hi += span
            else:
                lo += span
        return lo, hi

    # --- arithmetic --------------------------------------------------------------------------

    @staticmethod
    def _materialized(values: np.ndarray) -> IndexExpr:
        values = np.asarray(values, dtype=np.int64)
        return IndexExpr(tuple(values.shape), (0,) * values.ndim, 0, values)

    def _combine(self, other: IndexExpr, sign: int) -> IndexExpr:
        if self.values is not None or other.values is not None:
            return IndexExpr._materialized(self.materialize() + sign * other.materialize())
        sizes = _broadcast_sizes(self.sizes, other.sizes)
        ndim = len(sizes)
        a = _pad_left(self.coefs, ndim, 0)
        b = _pad_left(other.coefs, ndim, 0)
        coefs = tuple(x + sign * y for x, y in zip(a, b))
        return IndexExpr(sizes, coefs, self.offset + sign * other.offset)

    def __add__(self, other: Any) -> IndexExpr:
        cls = other.__class__
        if cls is IndexExpr:
            return self._combine(other, 1)
        if cls is int or isinstance(other, _INT_TYPES):
            if self.values is not None:
                return IndexExpr._materialized(self.values + int(other))
            return IndexExpr(self.sizes, self.coefs, self.offset + int(other))
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexExpr:
        if isinstance(other, IndexExpr):
            return self._combine(other, -1)
        if isinstance(other, _INT_TYPES):
            return self + (-int(other))
        return NotImplemented

    def __rsub__(self, other: Any) -> IndexExpr:
        if isinstance(other, _INT_TYPES):
            if self.values is not None:
                return (-self) + int(other)
            negated = self._negated
            if negated is None:
                negated = self._negated = tuple(-c for c in self.coefs)
            return IndexExpr(self.sizes, negated, int(other) - self.offset)
        return NotImplemented

    def __neg__(self) -> IndexExpr:
        return self * -1

    def __pos__(self) -> IndexExpr:
        return self

    def __mul__(self, other: Any) -> IndexExpr:
        if isinstance(other, _INT_TYPES):
            k = int(other)
            if self.values is not None:
                return IndexExpr._materialized(self.values * k)
            return IndexExpr(self.sizes, tuple(c * k for c in self.coefs), self.offset * k)
        if isinstance(other, IndexExpr):
            return IndexExpr._materialized(self.materialize() * other.materialize())
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> IndexExpr:
        if isinstance(other, (*_INT_TYPES, IndexExpr)):
            return IndexExpr._materialized(self.materialize() // _grid(other))
        return NotImplemented

    def __mod__(self, other: Any) -> IndexExpr:
        if isinstance(other, (*_INT_TYPES, IndexExpr)):
            return IndexExpr._materialized(self.materialize() % _grid(other))
        return NotImplemented

    # --- reshaping ---------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> IndexExpr:
        if key.__class__ is not tuple:
            key = (key,)
        elif len(key) == 2:
            # the two placements of nearly every index: [:, None] and [None, :]
            a, b = key
            if b is None:
                if self._column is not None and a.__class__ is slice and a == _FULL:
                    return self._column
            elif a is None and self._row is not None and b.__class__ is slice and b == _FULL:
                return self._row
        if len(self.sizes) == 1 and self.values is None:
            # fast path for the ubiquitous nl.arange(n)[:, None] / [None, :] / [None, :, None]
            pattern = all_none_or_full(key)
            cache = self._expanded
            if cache is not None and pattern is not None:
                hit = cache.get(pattern)
                if hit is not None:
                    return hit
            fast = _expand_1d(self, key)
            if fast is not None:
                if pattern is not None:
                    if cache is None:
                        cache = self._expanded = {}
                    cache[pattern] = fast
                    if pattern == _COLUMN:
                        self._column = fast
                    elif pattern == _ROW:
                        self._row = fast
                return fast
        if self.values is not None:
            return IndexExpr._materialized(self.values[key])
        sizes: list[int] = []
        coefs: list[int] = []
        offset = self.offset
        axis = 0
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        for k in key:
            if k is None:
                sizes.append(1)
                coefs.append(0)
            elif k is Ellipsis:
                take = len(self.sizes) - n_real
                for _ in range(take):
                    sizes.append(self.sizes[axis])
                    coefs.append(self.coefs[axis])
                    axis += 1
            elif isinstance(k, slice):
                start, stop, step = k.indices(self.sizes[axis])
                coef = self.coefs[axis]
                offset += coef * start
                sizes.append(len(range(start, stop, step)))
                coefs.append(coef * step)
                axis += 1
            elif isinstance(k, _INT_TYPES):
                offset += self.coefs[axis] * int(k)
                axis += 1
            else:
                raise TypeError(f"cannot index an arange with {k!r}")
        while axis < len(self.sizes):
            sizes.append(self.sizes[axis])
            coefs.append(self.coefs[axis])
            axis += 1
        return IndexExpr(tuple(sizes), tuple(coefs), offset)

    # --- comparisons make mask predicates ---------------------------------------------------

    def _compare(self, other: Any, op: str) -> Predicate:
        if other.__class__ is int and other == 0:
            condition = (self, op)
        else:
            diff = self - other if isinstance(other, (*_INT_TYPES, IndexExpr)) else None
            if diff is None:
                return NotImplemented
            condition = (diff, op)
        ctx = _context._ACTIVE
        if ctx is not None and ctx.condition_log is not None:
            ctx.condition_log.append(condition)  # a loop learning its iterations (fastforward.py)
        return Predicate((condition,))

    def __ge__(self, other: Any) -> Predicate:
        return self._compare(other, ">=")

    def __gt__(self, other: Any) -> Predicate:
        return self._compare(other, ">")

    def __le__(self, other: Any) -> Predicate:
        return self._compare(other, "<=")

    def __lt__(self, other: Any) -> Predicate:
        return self._compare(other, "<")

    def __eq__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._compare(other, "==")

    def __ne__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._compare(other, "!=")

    __hash__ = object.__hash__


_FULL = slice(None)
_COLUMN = (False, True)  # all_none_or_full((slice(None), None))
_ROW = (True, False)  # all_none_or_full((None, slice(None)))


def all_none_or_full(key: tuple[Any, ...]) -> tuple[bool, ...] | None:
    """The placement pattern of a key made only of None and full slices (else None)."""
    pattern = []
    for k in key:
        if k is None:
            pattern.append(True)
        elif k.__class__ is slice and k.start is None and k.stop is None and k.step is None:
            pattern.append(False)
        else:
            return None
    return tuple(pattern)


def _expand_1d(expr: IndexExpr, key: tuple[Any, ...]) -> IndexExpr | None:
    """Place a 1-D grid on one axis of a higher-rank grid (key: one full slice, the rest None)."""
    axis = -1
    for i, k in enumerate(key):
        if k is None:
            continue
        if axis < 0 and k.__class__ is slice and k == _FULL:
            axis = i
            continue
        return None
    if axis < 0:
        return None
    n = len(key)
    sizes = [1] * n
    coefs = [0] * n
    sizes[axis] = expr.sizes[0]
    coefs[axis] = expr.coefs[0]
    return IndexExpr(tuple(sizes), tuple(coefs), expr.offset)


def _grid(value: Any) -> Any:
    return value.materialize() if isinstance(value, IndexExpr) else int(value)


_NP_COMPARE = {
    ">=": np.greater_equal,
    ">": np.greater,
    "<=": np.less_equal,
    "<": np.less,
    "==": np.equal,
    "!=": np.not_equal,
}


class Predicate:
    """A mask: a conjunction of ``expr OP 0`` conditions, or a materialised boolean grid."""

    __slots__ = ("_replay_key", "conds", "values")
    __array_ufunc__ = None

    def __init__(self, conds: tuple[tuple[IndexExpr, str], ...], values: np.ndarray | None = None) -> None:
        self.conds = conds
        self.values = values
        self._replay_key: Any = None  # what trace-only replay keys the mask by (replay.py)

    @property
    def shape(self) -> tuple[int, ...]:
        if self.values is not None:
            return tuple(self.values.shape)
        sizes: tuple[int, ...] = ()
        for expr, _ in self.conds:
            sizes = _broadcast_sizes(sizes, expr.sizes)
        return sizes

    def materialize(self) -> np.ndarray:
        if self.values is not None:
            return self.values
        result: np.ndarray | bool = True
        for expr, op in self.conds:
            result = np.logical_and(result, _NP_COMPARE[op](expr.materialize(), 0))
        return np.asarray(result, dtype=bool)

    def __and__(self, other: Any) -> Predicate:
        if isinstance(other, Predicate):
            if self.values is None and other.values is None:
                return Predicate(self.conds + other.conds)
            return Predicate((), np.logical_and(self.materialize(), other.materialize()))
        return NotImplemented

    __rand__ = __and__

    def __or__(self, other: Any) -> Predicate:
        if isinstance(other, Predicate):
            return Predicate((), np.logical_or(self.materialize(), other.materialize()))
        return NotImplemented

    __ror__ = __or__

    def __invert__(self) -> Predicate:
        return Predicate((), np.logical_not(self.materialize()))

    def axis_ranges(self, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
        """Per-axis [lo, hi) ranges of `shape` (mask right-aligned to it) that contain every true
        element, derived analytically from single-axis conditions. None if nothing could be derived
        that way (the caller may materialise)."""
        ndim = len(shape)
        ranges = [(0, n) for n in shape]
        if self.values is not None:
            grid = np.broadcast_to(self.values, _broadcast_sizes(self.values.shape, shape))
            return _ranges_from_grid(grid, shape)
        for expr, op in self.conds:
            if expr.values is not None:
                continue
            live = [a for a, (c, n) in enumerate(zip(expr.coefs, expr.sizes)) if c and n > 1]
            if len(live) > 1:
                continue
            shift = ndim - len(expr.sizes)
            if not live:  # a condition on constants only: all or nothing
                if not _NP_COMPARE[op](expr.offset, 0):
                    return [(0, 0)] * ndim
                continue
            a = live[0]
            axis = a + shift
            if axis < 0 or shape[axis] != expr.sizes[a]:
                continue
            lo, hi = _solve(expr.offset, expr.coefs[a], op, expr.sizes[a])
            cur_lo, cur_hi = ranges[axis]
            ranges[axis] = (max(cur_lo, lo), max(max(cur_lo, lo), min(cur_hi, hi)))
        return ranges

    def exact_axis_ranges(self, shape: tuple[int, ...]) -> list[tuple[int, int]]:
        grid = self.materialize()
        grid = np.broadcast_to(grid, _broadcast_sizes(grid.shape, shape))
        return _ranges_from_grid(grid, shape)

    def is_single_axis(self) -> bool:
        if self.values is not None:
            return False
        for expr, _ in self.conds:
            if expr.values is not None:
                return False
            if sum(1 for c, n in zip(expr.coefs, expr.sizes) if c and n > 1) > 1:
                return False
        return True


def _ranges_from_grid(grid: np.ndarray, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    ndim = len(shape)
    extra = grid.ndim - ndim
    ranges: list[tuple[int, int]] = []
    for axis in range(ndim):
        other = tuple(i for i in range(grid.ndim) if i != axis + extra)
        hits = np.flatnonzero(grid.any(axis=other)) if other else np.flatnonzero(grid)
        if hits.size == 0:
            return [(0, 0)] * ndim
        if grid.shape[axis + extra] == 1 and shape[axis] != 1:
            ranges.append((0, shape[axis]))
        else:
            ranges.append((int(hits[0]), int(hits[-1]) + 1))
    return ranges


def kept_by(expr: IndexExpr, op: str, offset: int | None = None) -> tuple[int, int] | bool | None:
    """What the mask condition ``expr OP 0`` keeps (with the expression's offset replaced by
    `offset` if given): the range of its one varying axis, or its truth if no axis varies; None
    for a condition across several axes or a materialised grid (it keeps no single range)."""
    if expr.values is not None:
        return None
    live = [a for a, (c, n) in enumerate(zip(expr.coefs, expr.sizes)) if c and n > 1]
    if len(live) > 1:
        return None
    at = expr.offset if offset is None else offset
    if live:
        return _solve(at, expr.coefs[live[0]], op, expr.sizes[live[0]])
    return bool(_NP_COMPARE[op](at, 0))


def _solve(offset: int, coef: int, op: str, size: int) -> tuple[int, int]:
    """Range [lo, hi) of t in [0, size) with ``offset + coef*t OP 0`` (coef != 0)."""
    # Rewrite everything as (o + c t >= 0) conditions.
    conds: list[tuple[int, int]]
    if op == ">=":
        conds = [(offset, coef)]
    elif op == ">":
        conds = [(offset - 1, coef)]
    elif op == "<=":
        conds = [(-offset, -coef)]
    elif op == "<":
        conds = [(-offset - 1, -coef)]
    elif op == "==":
        conds = [(offset, coef), (-offset, -coef)]
    else:  # "!=" excludes a single point: no useful bounding restriction
        return 0, size
    lo, hi = 0, size
    for o, c in conds:
        if c > 0:  # t >= ceil(-o / c)
            lo = max(lo, -((o) // c))
        else:  # t <= floor(o / -c)
            hi = min(hi, o // (-c) + 1)
    return lo, max(lo, hi)


# --- constructors used by nl.* -------------------------------------------------------------


_ARANGES: dict[tuple[int, int, int], IndexExpr] = {}


def _arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    if stop is None:
        start, stop = 0, start
    key = (int(start), int(stop), int(step))
    expr = _ARANGES.get(key)
    if expr is None:  # grids are immutable, so one object per range serves every call
        expr = _ARANGES[key] = IndexExpr((len(range(*key)),), (key[2],), key[0])
    return expr


# Generated kernels call ``nl.arange`` several times in every statement: a C-level cache of its
# calls (arguments are ints or int-like scalars) answers without running Python code.
_cached_arange = functools.lru_cache(maxsize=None)(_arange)


def arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    """``nl.arange``: one shared grid object per range."""
    try:
        return _cached_arange(start, stop, step)
    except TypeError:  # an unhashable int-like bound (a 0-d numpy array) skips the call cache
        return _arange(start, stop, step)


class _MGrid:
    """``nl.mgrid[0:128, 0:512]`` → a grid object with ``.p`` / ``.x`` that also unpacks."""

    def __getitem__(self, key: Any) -> MGridResult:
        if not isinstance(key, tuple):
            key = (key,)
        exprs: list[IndexExpr] = []
        ndim = len(key)
        sizes: list[int] = []
        for k in key:
            if not isinstance(k, slice):
                raise TypeError("nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
            start, stop, step = k.start or 0, k.stop, k.step or 1
            sizes.append(len(range(start, stop, step)))
        for axis, k in enumerate(key):
            coefs = [0] * ndim
            coefs[axis] = k.step or 1
            grid_sizes = [1] * ndim
            grid_sizes[axis] = sizes[axis]
            exprs.append(IndexExpr(tuple(grid_sizes), tuple(coefs), k.start or 0))
        return MGridResult(exprs)


class MGridResult:
    """``nl.mgrid[...]`` as one object: its grids by position, or by name: ``.p`` the partition
    axis, then ``.x``, ``.y``, ``.z`` the free axes in order (a rank-3 grid indexes a
    ``[P, X, Y]`` tile as ``t[g.p, g.x, g.y]``, as the SDK's ``nc_matmul`` double-row example
    does)."""

    def __init__(self, exprs: list[IndexExpr]) -> None:
        self._exprs = exprs

    def _axis(self, axis: int, name: str) -> IndexExpr:
        if axis >= len(self._exprs):
            from accelopt.nki.context import current

            raise current().error(
                "err_invalid_dimension", f"nl.mgrid result has {len(self._exprs)} grids: no field '.{name}'"
            )
        return self._exprs[axis]

    @property
    def p(self) -> IndexExpr:
        return self._exprs[0]

    @property
    def x(self) -> IndexExpr:
        return self._axis(1, "x")

    @property
    def y(self) -> IndexExpr:
        return self._axis(2, "y")

    @property
    def z(self) -> IndexExpr:
        return self._axis(3, "z")

    def __iter__(self) -> Iterator[IndexExpr]:
        return iter(self._exprs)

    def __len__(self) -> int:
        return len(self._exprs)

    def __getitem__(self, i: int) -> IndexExpr:
        return self._exprs[i]


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """``nl.ds(start, size)``: a dynamic slice of `size` elements."""
    return slice(start, start + size, None)
