"""Tensors (HBM, SBUF, PSUM buffers), views of them, and how an index becomes a view.

A `Tensor` is one declared buffer: shape (block dimensions, then the partition dimension, then
free dimensions), dtype, memory, and — in numeric runs — a numpy array (NaN-initialised unless
the API says otherwise). A `View` is an access pattern into a tensor: for every declared
dimension an affine form ``offset + sum(coef * t_axis)`` over the view's axes. The same form
serves basic indexing (ints, slices) and advanced indexing (``nl.arange`` grids), gives the
exact index box for the trace without touching data, and turns into a numpy index only when
numerics are on.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from accelopt.nki import context as _context
from accelopt.nki.context import current
from accelopt.nki.dtypes import nan_fill
from accelopt.nki.dynamic_index import DynamicIndex
from accelopt.nki.fast.siteindex import SITE_FORMS, learn
from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.trace import Memory, Region

if TYPE_CHECKING:
    from accelopt.nki.context import LoopScope
    from accelopt.nki.trace import TraceRecord

_INT_TYPES = (int, np.integer)
PMAX = 128  # partitions per NeuronCore


class Buffer:
    """A memory a tensor can live in (``nl.sbuf``, ``nl.psum``, ``nl.shared_hbm``, ...)."""

    __slots__ = ("memory", "name")

    def __init__(self, name: str, memory: Memory) -> None:
        self.name = name
        self.memory = memory

    def __repr__(self) -> str:
        return f"nl.{self.name}"


class par_dim:
    """Marks the partition dimension in a shape: ``(4, nl.par_dim(128), 512)``."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


def normalize_shape(shape: Any) -> tuple[tuple[int, ...], int]:
    """A declared shape (ints and at most one par_dim) → (plain shape, number of block dims)."""
    if isinstance(shape, (_INT_TYPES, par_dim)):
        shape = (shape,)
    dims: list[int] = []
    block_dims = 0
    for i, d in enumerate(shape):
        if isinstance(d, par_dim):
            block_dims = i
            dims.append(d.size)
        else:
            dims.append(int(d))
    return tuple(dims), block_dims


def _lang() -> Any:
    # resolved late (language imports this module); sys.modules is cheaper than an import
    return sys.modules["accelopt.nki.language"]


def _instr() -> Any:
    return sys.modules["accelopt.nki.instructions"]


def _views() -> Any:
    from accelopt.nki import views  # imports this module

    return views


# NkiTensor's documented methods and attributes the emulator does not implement (NKI 0.7
# reference, class NkiTensor): refused as not supported yet rather than unknown
_NKI_TENSOR_METHODS = frozenset(
    {
        "rearrange",
        "reinterpret_cast",
        "vector_select",
    }
)


class TileOps:
    """Python operators and numpy protocols on tensors and views dispatch to ``nl.*``."""

    __slots__ = ()
    __array_priority__ = 1000

    def __add__(self, other: Any) -> Any:
        if other.__class__ is IndexExpr:  # a run-time offset plus an index grid (dynamic_index.py)
            return DynamicIndex(self, other)
        return _lang().add(self, other)

    def __radd__(self, other: Any) -> Any:
        if other.__class__ is IndexExpr:
            return DynamicIndex(self, other)
        return _lang().add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _lang().subtract(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _lang().subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _lang().multiply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _lang().multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _lang().divide(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _lang().divide(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _lang().power(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _lang().power(other, self)

    def __neg__(self) -> Tensor:
        return _lang().negative(self)

    def __abs__(self) -> Tensor:
        return _lang().abs(self)

    def __gt__(self, other: Any) -> Tensor:
        return _lang().greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _lang().greater_equal(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _lang().less(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _lang().less_equal(self, other)

    # `tile != sentinel`, `tile == 0`: elementwise against a number, as in NKI. Between two
    # tiles `==` stays identity (the emulator keeps tiles in lists and dicts); kernels compare
    # two tiles with nl.equal / nl.not_equal.
    def __eq__(self, other: Any) -> Any:
        if isinstance(other, (int, float, np.number)):
            return _lang().equal(self, other)
        return NotImplemented

    def __ne__(self, other: Any) -> Any:
        if isinstance(other, (int, float, np.number)):
            return _lang().not_equal(self, other)
        return NotImplemented

    __hash__ = object.__hash__

    def __and__(self, other: Any) -> Tensor:
        return _lang().logical_and(self, other)

    def __or__(self, other: Any) -> Tensor:
        return _lang().logical_or(self, other)

    def __iadd__(self, other: Any) -> Any:
        caller = sys._getframe(1)  # the statement: trace-only runs know its line by it
        return _instr().augmented_assign(self, other, "add", (id(caller.f_code), caller.f_lasti))

    def __isub__(self, other: Any) -> Any:
        return _instr().augmented_assign(self, other, "subtract")

    def __imul__(self, other: Any) -> Any:
        return _instr().augmented_assign(self, other, "multiply")

    def __itruediv__(self, other: Any) -> Any:
        return _instr().augmented_assign(self, other, "divide")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or kwargs.get("out") is not None:
            return NotImplemented
        return _lang()._apply_op(ufunc, *inputs)

    # numpy's reductions (np.max(t, axis=1), np.sum(...)) call these methods on non-arrays
    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, **_: Any) -> Tensor:
        return _lang().sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False, **_: Any) -> Tensor:
        return _lang().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False, **_: Any) -> Tensor:
        return _lang().min(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, **_: Any) -> Tensor:
        return _lang().mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, **_: Any) -> Tensor:
        return _lang().prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def broadcast_to(self, shape: Any) -> Tensor:
        return _lang().broadcast_to(self, shape)

    def astype(self, dtype: Any) -> Tensor:
        return _lang().copy(self, dtype=dtype)

    # NkiTensor views of the nki.* language (views.py)
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> View:
        return _views().slice_view(self, dim, start, end, step)

    def select(self, dim: int, index: Any) -> View:
        return _views().select_view(self, dim, index)

    def permute(self, dims: Any) -> View:
        return _views().permute_view(self, dims)

    def expand_dim(self, dim: int) -> View:
        return _views().expand_dim_view(self, dim)

    def squeeze_dim(self, dim: int) -> View:
        return _views().squeeze_dim_view(self, dim)

    def broadcast(self, dim: int, size: int) -> View:
        return _views().broadcast_view(self, dim, size)

    def view(self, dtype: Any) -> Tensor:
        return _views().dtype_view(self, dtype)

    def ap(self, pattern: Any, offset: Any = None, **kwargs: Any) -> View:
        return _views().ap_view(self, pattern, offset, **kwargs)

    @property
    def size(self) -> int:
        return _prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        return _views().view_strides(self)

    @property
    def offset(self) -> int:
        return _views().view_offset(self)

    def get_pattern(self) -> list[list[int]]:
        return _views().view_pattern(self)

    def is_contiguous(self) -> bool:
        return _views().view_is_contiguous(self)

    def is_indirect(self) -> bool:
        return _views().view_is_indirect(self)

    def indirect(self, index: Any, num_elem: int | None = None, **kwargs: Any) -> View:
        return _views().tensor_indirection_view(self, index, num_elem, **kwargs)

    def reshape_dim(self, dim: int, shape: Any) -> View:
        return _views().reshape_dim_view(self, dim, shape)

    def flatten_dims(self, start_dim: int, end_dim: int) -> Any:
        return _views().flatten_dims_view(self, start_dim, end_dim)

    def __getattr__(self, name: str) -> Any:
        # only for names the class does not define: NkiTensor methods the emulator lacks are
        # refused NKI-style, anything else is an attribute error at the kernel line
        if name.startswith("_"):
            raise AttributeError(name)
        from accelopt.nki.unsupported import NkiAttributeError, refuse

        if name in _NKI_TENSOR_METHODS:
            refuse(f"NkiTensor.{name}")
        ctx = current()
        raise NkiAttributeError(
            "err_unknown_api", f"a tensor has no attribute '{name}'", ctx.kernel_path, ctx.line()
        )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]


class Tensor(TileOps):
    """A declared buffer in HBM, SBUF or PSUM."""

    __slots__ = (
        "_alias",
        "_alloc_scopes",
        "_data",
        "_exact",
        "_fresh",
        "_pmask",
        "_producer",
        "_root",
        "_tid",
        "_written",
        "block_dims",
        "buffer",
        "dtype",
        "memory",
        "shape",
    )

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        buffer: Buffer,
        block_dims: int = 0,
        data: np.ndarray | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.buffer = buffer
        self.memory = buffer.memory
        self.block_dims = block_dims
        self._data = data
        self._tid = -1
        self._alloc_scopes: tuple[LoopScope, ...] = ()
        self._written = False
        # An op result not yet read by anything: assigning it into another tile makes the
        # producing instruction write there directly (the compiler does the same).
        self._producer: TraceRecord | None = None
        self._fresh = False
        self._alias: View | None = None
        # fp32 result of the producing op before rounding to `dtype` (kept while fresh, so a
        # retargeted write rounds once, straight to the destination's dtype)
        self._exact: np.ndarray | None = None
        # the producing op's mask (axis ranges, numeric grid), applied again when retargeted
        self._pmask: Any = None  # instructions.MaskInfo
        # the tensor whose memory this one reshapes (None: its own)
        self._root: Tensor | None = None

    def __repr__(self) -> str:
        return f"Tensor(id={self._tid}, shape={self.shape}, dtype={self.dtype.name}, {self.memory.value})"

    def _full_view(self) -> View:
        layout = _full_layout(self.shape)
        view = View(self, self.shape, layout[0], layout[1], None, layout[2])
        if self._data is not None:
            # Numeric runs use a tile through its full view over and over: its numpy index
            # depends on the shape alone, so it is computed once per shape. (A view kept on the
            # tile would be a reference cycle: the tile's data would wait for the collector.)
            index = _FULL_INDEX.get(self.shape)
            if index is None:
                _FULL_INDEX[self.shape] = (view._index(), view._np_shape)
            else:
                view._np_index, view._np_shape = index
        return view

    def _full_region(self) -> Region:
        return new_region(self._tid, _full_layout(self.shape)[2])

    def __getitem__(self, key: Any) -> View:
        if key is Ellipsis:
            return self._full_view()
        ctx = _context._ACTIVE
        if ctx is not None and not ctx.fast_paths:
            return _index_tensor(self, key)
        caller = sys._getframe(1)
        site = (id(caller.f_code), caller.f_lasti)
        builders = SITE_FORMS.get(site)
        if builders is not None:
            for build in builders:  # the site's compiled forms (siteindex.py)
                view = build(self, key)
                if view is not None:
                    return view
        return _index_learning(self, key, site)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key is Ellipsis:
            view = self._full_view()
        else:
            if value.__class__ is View and value._tensor is self:
                ctx = _context._ACTIVE
                if ctx is not None and value._assigned_at == len(ctx.trace.records):
                    # the second half of `self[key] += x`, already done: `assign` would return
                    # at once, so the view of `key` (the one `value` already is) is not rebuilt
                    value._assigned_at = -1
                    return
            caller = sys._getframe(1)
            site = (id(caller.f_code), caller.f_lasti)
            ctx = _context._ACTIVE
            fast = ctx is None or ctx.fast_paths
            builders = SITE_FORMS.get(site) if fast else None
            view = None
            if builders is not None:
                for build in builders:
                    view = build(self, key)
                    if view is not None:
                        break
            if view is None:
                view = _index_learning(self, key, site) if fast else _index_tensor(self, key)
            if value.__class__ is Tensor:
                if (
                    ctx is not None
                    and ctx.fast_paths
                    and not ctx.numerics
                    and ctx.recorder is None
                    and not ctx.api_depth
                    and _instr().retarget_traced(ctx, site, view, value)
                ):
                    return
        _instr().assign(view, value)

    def reshape(self, *shape: Any, **kwargs: Any) -> Tensor:
        if "shape" in kwargs:  # t.reshape(shape=(...))
            shape = (kwargs.pop("shape"),)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _lang().reshape(self, shape)


class View(TileOps):
    """An access pattern into a tensor (see the module docstring)."""

    __slots__ = (
        "_arrays",
        "_assigned_at",
        "_box_cache",
        "_np_index",
        "_np_shape",
        "_offsets",
        "_oob",
        "_region_cache",
        "_tensor",
        "_terms",
        "shape",
    )

    def __init__(
        self,
        tensor: Tensor,
        shape: tuple[int, ...],
        offsets: tuple[int, ...],
        terms: tuple[tuple[tuple[int, int], ...], ...],
        arrays: dict[int, np.ndarray] | None,
        box: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        self._tensor = tensor
        self._box_cache = box
        self.shape = shape
        self._offsets = offsets
        self._terms = terms  # per tensor dim: ((view axis, coef), ...) over axes of size > 1
        self._arrays = arrays  # per tensor dim: a materialised index grid (non-affine indices)
        self._np_index: Any = None
        self._np_shape: tuple[int, ...] = ()
        self._region_cache: Region | None = None
        # trace length right after `view += x` wrote through this view (makes the implicit
        # `tensor[key] = view` that Python performs next a no-op)
        self._assigned_at = -1
        # Reaches outside the tensor: legal only if every access through it is masked to the
        # in-bounds part (checked when an instruction uses it).
        self._oob = False

    @property
    def dtype(self) -> np.dtype:
        return self._tensor.dtype

    @property
    def memory(self) -> Memory:
        return self._tensor.memory

    @property
    def buffer(self) -> Buffer:
        return self._tensor.buffer

    def __repr__(self) -> str:
        return f"View(tensor={self._tensor._tid}, shape={self.shape}, box={self._box()})"

    # --- geometry ----------------------------------------------------------------------------

    def _box(self, ranges: list[tuple[int, int]] | None = None) -> tuple[tuple[int, int], ...]:
        """Bounding box over the tensor's declared dims, optionally restricted to axis ranges."""
        if ranges is None:
            if self._box_cache is not None:
                return self._box_cache
        else:
            for lo, hi in ranges:
                if hi <= lo:
                    return tuple((0, 0) for _ in self._offsets)  # nothing selected
        shape = self.shape
        out = []
        arrays = self._arrays
        for d, (offset, terms) in enumerate(zip(self._offsets, self._terms)):
            if arrays is not None and d in arrays:
                grid = arrays[d]
                out.append((int(grid.min()), int(grid.max()) + 1) if grid.size else (0, 0))
                continue
            lo = hi = offset
            for axis, coef in terms:
                if ranges is None:
                    a_lo, a_hi = 0, shape[axis]
                else:
                    a_lo, a_hi = ranges[axis]
                if a_hi <= a_lo:
                    return tuple((0, 0) for _ in self._offsets)
                if coef > 0:
                    lo += coef * a_lo
                    hi += coef * (a_hi - 1)
                else:
                    lo += coef * (a_hi - 1)
                    hi += coef * a_lo
            out.append((lo, hi + 1))
        if ranges is None:
            self._box_cache = tuple(out)
        return tuple(out)

    def _region(self, ranges: list[tuple[int, int]] | None = None) -> Region:
        if ranges is None:
            region = self._region_cache
            if region is None:
                if self._oob:
                    _check_box(self, self._box())
                region = new_region(self._tensor._tid, self._box())
                self._region_cache = region
            return region
        box = self._box(ranges)
        if self._oob:
            _check_box(self, box)
        return new_region(self._tensor._tid, box)

    def _contiguous_run(self, partition_axis: int = 0) -> int:
        """Elements per contiguous chunk of the tensor's row-major memory that this view touches
        without crossing a partition of the tile on the other side of the DMA."""
        key = (self._tensor.shape, self._terms, self.shape, partition_axis, self._arrays is None)
        run = _RUN_CACHE.get(key)
        if run is None:
            run = _RUN_CACHE[key] = self._compute_run(partition_axis)
        return run

    def _compute_run(self, partition_axis: int) -> int:
        tshape = self._tensor.shape
        run = 1
        for d in range(len(tshape) - 1, -1, -1):
            if self._arrays is not None and d in self._arrays:
                break
            terms = self._terms[d]
            if not terms:
                # a fixed index: the run cannot extend across this dim unless it has size 1
                if tshape[d] == 1:
                    continue
                break
            if any(axis == partition_axis for axis, _ in terms) and len(self.shape) > 1:
                break
            extent = _dense_extent(terms, self.shape)
            if extent is None:
                break
            run *= extent
            if extent != tshape[d]:
                break
        return run

    def _restrict(self, ranges: list[tuple[int, int]]) -> View:
        """The sub-view over axis ranges [lo, hi) (same tensor, a box of this view's axes)."""
        if all(lo == 0 and hi == n for (lo, hi), n in zip(ranges, self.shape)):
            return self
        offsets = list(self._offsets)
        for d, terms in enumerate(self._terms):
            for axis, coef in terms:
                offsets[d] += coef * ranges[axis][0]
        arrays = None
        if self._arrays is not None:
            sl = tuple(slice(lo, hi) for lo, hi in ranges)
            arrays = {d: np.broadcast_to(g, self.shape)[sl] for d, g in self._arrays.items()}
        view = View(self._tensor, tuple(hi - lo for lo, hi in ranges), tuple(offsets), self._terms, arrays)
        _check_bounds(view)
        return view

    # --- numerics ----------------------------------------------------------------------------

    def _index(self) -> Any:
        if self._np_index is not None:
            return self._np_index
        idx: list[Any] = []
        np_shape: list[int] = []
        last_axis = -1
        basic = self._arrays is None
        if basic:
            for offset, terms in zip(self._offsets, self._terms):
                if not terms:
                    idx.append(offset)
                    continue
                if len(terms) == 1 and terms[0][1] > 0 and terms[0][0] > last_axis:
                    axis, coef = terms[0]
                    n = self.shape[axis]
                    idx.append(slice(offset, offset + coef * (n - 1) + 1, coef))
                    np_shape.append(n)
                    last_axis = axis
                    continue
                basic = False
                break
        if basic:
            self._np_index = tuple(idx)
            self._np_shape = tuple(np_shape)
        else:
            self._np_index = self._fancy_index(clip=False)
            self._np_shape = self.shape
        return self._np_index

    def _fancy_index(self, clip: bool) -> tuple[Any, ...]:
        ndim = len(self.shape)
        idx: list[Any] = []
        for d, (offset, terms) in enumerate(zip(self._offsets, self._terms)):
            if self._arrays is not None and d in self._arrays:
                grid = self._arrays[d]
            else:
                grid = np.asarray(offset, dtype=np.int64)
                for axis, coef in terms:
                    shape = [1] * ndim
                    shape[axis] = self.shape[axis]
                    grid = grid + (coef * np.arange(self.shape[axis], dtype=np.int64)).reshape(shape)
                grid = np.broadcast_to(grid, (1,) * (ndim - grid.ndim) + grid.shape) if ndim else grid
            if clip:
                grid = np.clip(grid, 0, self._tensor.shape[d] - 1)
            idx.append(grid)
        return tuple(idx)

    def _read(self, clip: bool = False) -> np.ndarray:
        """The viewed elements in the tensor's dtype, shaped like the view."""
        data = self._tensor._data
        assert data is not None
        if 0 in self.shape:
            return np.empty(self.shape, dtype=data.dtype)
        if self._oob and not clip:
            self._region()  # raises: an unmasked access outside the tensor
        if clip:
            return np.broadcast_to(data[self._fancy_index(clip=True)], self.shape)
        values = data[self._index()]
        if values.shape != self.shape:
            values = (
                values.reshape(self.shape)
                if values.size == _prod(self.shape)
                else np.broadcast_to(values, self.shape)
            )
        return values

    def _write(self, values: Any, mask: np.ndarray | None = None, accumulate: bool = False) -> None:
        """Store `values` (any float/int array broadcastable to the view) with rounding to dtype."""
        tensor = self._tensor
        data = tensor._data
        if data is None:
            return
        dtype = tensor.dtype
        if 0 in self.shape:
            return
        if not data.flags.writeable:  # a kernel input written in place: copy on first write
            data = tensor._data = data.copy()
        values = np.asarray(values)
        if values.shape != self.shape:
            values = (
                values.reshape(self.shape)
                if values.size == _prod(self.shape)
                else np.broadcast_to(values, self.shape)
            )
        if mask is not None:
            mask = np.broadcast_to(mask, self.shape)
            grids = [np.broadcast_to(g, self.shape)[mask] for g in self._fancy_index(clip=False)]
            selected = values[mask]
            target = tuple(grids)
            if accumulate:
                selected = data[target].astype(np.float32) + selected
            data[target] = selected.astype(dtype, copy=False)
            return
        if self._oob:
            self._region()  # raises: an unmasked access outside the tensor
        idx = self._index()
        if self._np_shape != self.shape:
            values = values.reshape(self._np_shape) if values.ndim else values
        if accumulate:
            current = data[idx]
            if (
                dtype == np.float32
                and values.dtype == np.float32
                and current.base is not None
                and (idx.__class__ is tuple and all(i.__class__ is int or i.__class__ is slice for i in idx))
            ):
                # a basic index: `current` is the tile's memory itself; fp32 + fp32 in place
                # rounds exactly as the sum of copies did (no temporaries: 8x faster per tile)
                np.add(current, values, out=current)
                return
            data[idx] = (current.astype(np.float32) + values).astype(dtype, copy=False)
        else:
            data[idx] = values.astype(dtype, copy=False) if values.dtype != dtype else values

    def reshape(self, *shape: Any, **kwargs: Any) -> Any:
        if "shape" in kwargs:
            shape = (kwargs.pop("shape"),)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _views().reshape_view(self, shape)

    # --- indexing a view again (basic views only) --------------------------------------------

    def __getitem__(self, key: Any) -> View:
        if key is Ellipsis:
            return self
        return make_view(self._tensor, self.shape, key, base=self)

    def __setitem__(self, key: Any, value: Any) -> None:
        view = self if key is Ellipsis else make_view(self._tensor, self.shape, key, base=self)
        _instr().assign(view, value)


# A Region without the frozen dataclass's __setattr__ detour (same class, same slots): the
# emulator makes one or more per instruction.
_new_object = object.__new__
_set_region_tid = Region.__dict__["tensor_id"].__set__
_set_region_box = Region.__dict__["box"].__set__


def new_region(tid: int, box: tuple[tuple[int, int], ...]) -> Region:
    region = _new_object(Region)
    _set_region_tid(region, tid)
    _set_region_box(region, box)
    return region


_RUN_CACHE: dict[tuple[Any, ...], int] = {}
# per shape: the offsets, terms and box of a whole-tensor view
_FULL_LAYOUT: dict[tuple[int, ...], tuple[Any, Any, Any]] = {}


# shape -> (numpy index, numpy shape) of the whole-tensor view (numeric runs)
_FULL_INDEX: dict[tuple[int, ...], tuple[Any, tuple[int, ...]]] = {}


def _full_layout(shape: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """The offsets, terms and box of a whole-tensor view of `shape`."""
    layout = _FULL_LAYOUT.get(shape)
    if layout is None:
        terms = tuple((((d, 1),) if n > 1 else ()) for d, n in enumerate(shape))
        layout = _FULL_LAYOUT[shape] = ((0,) * len(shape), terms, tuple((0, n) for n in shape))
    return layout


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _dense_extent(terms: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> int | None:
    """Extent of a dim whose terms cover a contiguous range (e.g. 128*a + b with |b| = 128)."""
    ordered = sorted((abs(c), shape[a]) for a, c in terms)
    expected = 1
    extent = 1
    for coef, n in ordered:
        if coef != expected:
            return None
        expected = coef * n
        extent *= n
    return extent


# --- building views -----------------------------------------------------------------------


def _error(code: str, message: str) -> Exception:
    return current().error(code, message)


def make_view(tensor: Tensor, shape: tuple[int, ...], key: Any, base: View | None) -> View:
    """Index `shape` (the tensor's shape, or `base`'s) with `key`; compose with `base` if given."""
    if not isinstance(key, tuple):
        key = (key,)
    advanced = False
    basic = False
    for k in key:
        cls = k.__class__
        if cls is IndexExpr:
            advanced = True
        elif cls is slice or k is Ellipsis:
            basic = True
        elif cls is int or cls is LoopVar:
            continue
        elif isinstance(k, TileOps) and k is key[0] and base is None and tensor.memory is Memory.HBM:
            # legacy indirect DMA: `tensor[index_tile, ...]` gathers/scatters the rows it lists
            return _views().tile_indexed_view(tensor, key)
        elif (cls is DynamicIndex or isinstance(k, TileOps)) and base is None:
            # a run-time offset on one dimension (legacy tensor_copy_dynamic_src/dst)
            return _views().dynamic_offset_view(tensor, key)
        elif isinstance(k, (TileOps, Predicate, list, np.ndarray)):
            raise _error(
                "err_unsupported_indexing",
                f"cannot index a tensor with a {type(k).__name__}; use ints, slices or nl.arange grids",
            )
    if advanced and basic:
        raise _error(
            "err_unsupported_mixing_basic_advanced_tensor_indexing",
            "an index mixes slices with nl.arange grids; use only aranges (with ints) or only slices",
        )
    if advanced:
        if base is None:
            view = _advanced_from_template(tensor, shape, key)
            if view is not None:
                return view
        offsets, terms, arrays, vshape, abox, oob = _advanced(shape, key)
        if base is None:
            view = View(tensor, vshape, offsets, terms, arrays, abox)
            view._oob = oob
            return view
    else:
        offsets, terms, vshape, box = _basic(shape, key)
        if base is None:
            return View(tensor, vshape, offsets, terms, None, box)  # bounds checked while parsing
        arrays = None
    if base is not None:
        return _compose(base, offsets, terms, arrays, vshape)
    view = View(tensor, vshape, offsets, terms, arrays)
    _check_bounds(view)
    return view


def _index_learning(tensor: Tensor, key: Any, site: tuple[int, int]) -> View:
    """`tensor[key]` by the parser, teaching the kernel call site the key's form."""
    view = _index_tensor(tensor, key)
    learn(tensor, key, view, site)
    return view


def _index_tensor(tensor: Tensor, key: Any) -> View:
    """`tensor[key]`, trying the two common forms first: slices/ints on every dim (hand-written
    kernels) and an index form seen before (the ints and `nl.arange` grids of generated kernels)."""
    if key.__class__ is tuple:
        if key[-1].__class__ is IndexExpr:
            view = _advanced_from_template(tensor, tensor.shape, key)
        elif len(key) == len(tensor.shape):
            view = _slices_view(tensor, key)
        else:
            view = None
        if view is not None:
            return view
    return make_view(tensor, tensor.shape, key, base=None)


def _slices_view(tensor: Tensor, key: tuple[Any, ...]) -> View | None:
    """Fast path for the most common index: one in-bounds slice (step 1) or int per dimension.
    Returns None for anything else (the general parser handles it and reports errors)."""
    shape = tensor.shape
    offsets = []
    terms = []
    vshape: list[int] = []
    box = []
    for d, k in enumerate(key):
        size = shape[d]
        if k.__class__ is slice:
            if k.step is not None and k.step != 1:
                return None
            start = 0 if k.start is None else k.start
            stop = size if k.stop is None else k.stop
            if not (0 <= start < stop <= size) or (start.__class__ is not int and not isinstance(start, int)):
                return None
            n = stop - start
            offsets.append(int(start))
            terms.append(((len(vshape), 1),) if n > 1 else ())
            vshape.append(n)
            box.append((int(start), int(stop)))
        elif isinstance(k, int) and 0 <= k < size:
            offsets.append(int(k))
            terms.append(())
            box.append((int(k), int(k) + 1))
        else:
            return None
    if not vshape:
        return None
    return View(tensor, tuple(vshape), tuple(offsets), tuple(terms), None, tuple(box))


def _check_bounds(view: View) -> None:
    """Mark a view reaching outside its tensor; instructions reject it unless masked in bounds."""
    tshape = view._tensor.shape
    for d, (lo, hi) in enumerate(view._box()):
        if hi > lo and (lo < 0 or hi > tshape[d]):
            view._oob = True
            return


def _check_box(view: View, box: tuple[tuple[int, int], ...]) -> None:
    tshape = view._tensor.shape
    for d, (lo, hi) in enumerate(box):
        if hi > lo and (lo < 0 or hi > tshape[d]):
            raise _error(
                "err_tensor_access_out_of_bound",
                f"index [{lo}, {hi}) is out of bounds for dimension {d} of size {tshape[d]} "
                f"(tensor shape {tshape})",
            )


def check_bounds_under_mask(view: View, ranges: list[tuple[int, int]], grid: Any = None) -> None:
    """Raise unless every element the mask selects is inside the tensor. The axis `ranges` bound
    the selection; a mask coupling axes (``stride*i + k - pad >= 0``, a padded pooling window)
    selects less than their box, so when the box reaches outside, the mask's boolean `grid`
    (a callable giving it, built only then) decides element by element."""
    box = view._box(ranges)
    tshape = view._tensor.shape
    if (
        grid is None
        or view._arrays is not None
        or all(hi <= lo or (lo >= 0 and hi <= tshape[d]) for d, (lo, hi) in enumerate(box))
    ):
        _check_box(view, box)
        return
    selected = np.broadcast_to(grid(), view.shape)
    axes = [
        np.arange(n).reshape([-1 if a == i else 1 for a in range(len(view.shape))])
        for i, n in enumerate(view.shape)
    ]
    for d, (offset, terms) in enumerate(zip(view._offsets, view._terms, strict=True)):
        index = np.full(view.shape, offset, dtype=np.int64)
        for axis, coef in terms:
            index = index + coef * axes[axis]
        reached = index[selected]
        if reached.size and (reached.min() < 0 or reached.max() >= tshape[d]):
            lo, hi = int(reached.min()), int(reached.max()) + 1
            raise _error(
                "err_tensor_access_out_of_bound",
                f"index [{lo}, {hi}) is out of bounds for dimension {d} of size {tshape[d]} "
                f"(tensor shape {tshape}), in elements the mask selects",
            )


def _basic(shape: tuple[int, ...], key: tuple[Any, ...]):
    ndim = len(shape)
    n_given = sum(1 for k in key if k is not Ellipsis and k is not None)
    if n_given > ndim:
        raise _error(
            "err_tensor_access_out_of_bound", f"{n_given} indices for a tensor with {ndim} dimensions"
        )
    expanded: list[Any] = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (ndim - n_given))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (ndim - len(expanded)))
    offsets: list[int] = []
    terms: list[tuple[tuple[int, int], ...]] = []
    vshape: list[int] = []
    box: list[tuple[int, int]] = []
    for d, k in enumerate(expanded):
        size = shape[d]
        if isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            step = 1 if step is None else int(step)
            if step <= 0:
                raise _error("err_unsupported_indexing", "slices must have a positive step")
            start = 0 if start is None else int(start)
            stop = size if stop is None else int(stop)
            if start < 0:
                start += size
            if stop < 0:
                stop += size
            if start < 0 or stop > size or start > stop:
                raise _error(
                    "err_tensor_access_out_of_bound",
                    f"slice [{start}:{stop}] is out of bounds for dimension {d} of size {size}",
                )
            n = len(range(start, stop, step))
            axis = len(vshape)
            vshape.append(n)
            offsets.append(start)
            terms.append(((axis, step),) if n > 1 else ())
            box.append((start, start + step * (n - 1) + 1) if n else (start, start))
        elif isinstance(k, _INT_TYPES):
            i = int(k)
            if i < 0:
                i += size
            if not 0 <= i < size:
                raise _error(
                    "err_tensor_access_out_of_bound",
                    f"index {int(k)} is out of bounds for dimension {d} of size {size}",
                )
            offsets.append(i)
            terms.append(())
            box.append((i, i + 1))
        elif k is None:
            raise _error("err_unsupported_indexing", "None (newaxis) is not supported in a tensor index")
        else:
            raise _error("err_unsupported_indexing", f"cannot index a tensor with {k!r}")
    return tuple(offsets), tuple(terms), tuple(vshape), tuple(box)


# An advanced index's structure (grid shapes and coefficients per dim) → the view's terms and
# shape plus each dim's box relative to its offset. Loop iterations differ only in offsets, so
# generated kernels parse each distinct index form once.
_ADV_TEMPLATES: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _advanced_from_template(tensor: Tensor, shape: tuple[int, ...], key: tuple[Any, ...]) -> View | None:
    if len(key) > len(shape):
        return None
    sig: list[Any] = [shape]
    offs: list[int] = []
    for d, k in enumerate(key):
        if k.__class__ is IndexExpr:
            if k.values is not None:
                return None
            sig.append((k.sizes, k.coefs))
            offs.append(k.offset)
        elif isinstance(k, _INT_TYPES):
            i = int(k)
            sig.append(None)
            offs.append(i + shape[d] if i < 0 else i)
        else:
            return None
    signature = tuple(sig)
    template = _ADV_TEMPLATES.get(signature)
    if template is None:
        offsets, terms, arrays, vshape, box, _ = _advanced(shape, key)
        if arrays is not None:
            return None
        deltas = tuple((lo - off, hi - off) for (lo, hi), off in zip(box, offsets))
        template = _ADV_TEMPLATES[signature] = (terms, vshape, deltas, offsets[len(key) :])
    terms, vshape, deltas, trailing = template
    box = []
    oob = False
    for d, off in enumerate(offs):
        lo_d, hi_d = deltas[d]
        lo, hi = off + lo_d, off + hi_d
        if hi > lo and (lo < 0 or hi > shape[d]):
            oob = True
        box.append((lo, hi))
    offsets = (*offs, *trailing)
    box.extend(deltas[len(offs) :])  # trailing dims: offset 0
    view = View(tensor, vshape, offsets, terms, None, tuple(box))
    view._oob = oob
    return view


def _is_zero_index(k: Any) -> bool:
    if isinstance(k, _INT_TYPES):
        return int(k) == 0
    return isinstance(k, IndexExpr) and k.bounds() == (0, 0)


def _advanced(shape: tuple[int, ...], key: tuple[Any, ...]):
    ndim = len(shape)
    # Generated kernels address a 1-D vector as [P, 1] with a trailing `nl.arange(1)` grid:
    # indices past the last dimension are accepted when they can only be 0 (size-1 axes).
    if len(key) > ndim and not all(_is_zero_index(k) for k in key[ndim:]):
        raise _error(
            "err_tensor_access_out_of_bound", f"{len(key)} indices for a tensor with {ndim} dimensions"
        )
    grid_ndim = 0
    for k in key:
        if k.__class__ is IndexExpr:
            kn = len(k.sizes)
            if kn == 1:
                raise _error(
                    "err_1d_arange_not_supported",
                    "indexing with a 1-D nl.arange is not supported; add an axis, e.g. nl.arange(n)[:, None]",
                )
            if kn > grid_ndim:
                grid_ndim = kn
    # broadcast shape of every grid (right-aligned, numpy rules)
    sizes = [1] * grid_ndim
    for k in key:
        if k.__class__ is IndexExpr:
            shift = grid_ndim - len(k.sizes)
            for a, n in enumerate(k.sizes):
                if n != 1:
                    cur = sizes[a + shift]
                    if cur != 1 and n != cur:
                        raise _error(
                            "err_unsupported_indexing",
                            f"index grids of shapes {k.sizes} and {tuple(sizes)} do not broadcast",
                        )
                    sizes[a + shift] = n
    # trailing dims left out of the index become extra axes (numpy semantics)
    trailing = shape[len(key) :]
    vshape = (*sizes, *trailing)
    offsets: list[int] = []
    terms: list[tuple[tuple[int, int], ...]] = []
    box: list[tuple[int, int]] = []
    arrays: dict[int, np.ndarray] | None = None
    oob = False
    for d, k in enumerate(key[:ndim]):
        if k.__class__ is IndexExpr:
            shift = grid_ndim - len(k.sizes)
            if k.values is not None:
                arrays = arrays or {}
                arrays[d] = np.broadcast_to(k.values, (1,) * shift + k.values.shape)
                offsets.append(0)
                terms.append(())
                lo, hi = k.bounds()
                box.append((lo, hi + 1))
            else:
                lo = hi = off = k.offset
                dim_terms = []
                for a, (c, n) in enumerate(zip(k.coefs, k.sizes)):
                    if c and n > 1:
                        dim_terms.append((a + shift, c))
                        if c > 0:
                            hi += c * (n - 1)
                        else:
                            lo += c * (n - 1)
                offsets.append(off)
                terms.append(tuple(dim_terms))
                box.append((lo, hi + 1))
        elif isinstance(k, _INT_TYPES):
            i = int(k)
            if i < 0:
                i += shape[d]
            offsets.append(i)
            terms.append(())
            box.append((i, i + 1))
        else:
            raise _error("err_unsupported_indexing", f"cannot index a tensor with {k!r}")
        b_lo, b_hi = box[-1]
        if b_hi > b_lo and (b_lo < 0 or b_hi > shape[d]):
            oob = True
    for j, n in enumerate(trailing):
        offsets.append(0)
        terms.append(((grid_ndim + j, 1),) if n > 1 else ())
        box.append((0, n))
    if arrays is not None and len(vshape) > grid_ndim:
        raise _error("err_unsupported_indexing", "non-affine index grids must index every dimension")
    if arrays is None:
        kept = _mesh_axes_kept(key[:ndim], sizes)
        if kept is not None:
            terms, vshape = _keep_axes(terms, sizes, trailing, kept)
    return tuple(offsets), tuple(terms), arrays, vshape, tuple(box), oob


def _mesh_axes_kept(key: tuple[Any, ...], sizes: list[int]) -> list[int] | None:
    """The grid axes a tile keeps when its index grids come from a larger `nl.mgrid` than the
    key uses (None: all of them, in order). `i, j, k = nl.mgrid[0:128, 0:1, 0:N]` makes grids
    of rank 3; `x[i, k]` reads a [128, N] tile and `x[j, k]` a [1, N] one (the NKI tutorials'
    RMSNorm and LayerNorm kernels index this way and reduce along axis 1). Read as: axes of size 1
    that no expression of the key varies along are not tile axes, down to one axis per
    expression (at least two), and the axes left are in the order of the expressions that own
    them. Only grids with more axes than that are touched: every other key keeps numpy's
    broadcast shape."""
    exprs = [k for k in key if k.__class__ is IndexExpr]
    rank = max(2, len(exprs))
    grid_ndim = len(sizes)
    if grid_ndim <= rank:
        return None
    owner: dict[int, int] = {}
    for position, k in enumerate(exprs):
        shift = grid_ndim - len(k.sizes)
        for a, c in enumerate(k.coefs):
            if c and owner.setdefault(a + shift, position) != position:
                return None  # two expressions vary along one axis: a folded index, left as it is
    droppable = [a for a in range(grid_ndim) if sizes[a] == 1 and a not in owner]
    excess = grid_ndim - rank
    if len(droppable) < excess:
        return None
    dropped = set(droppable[:excess])
    kept = [a for a in range(grid_ndim) if a not in dropped]
    if all(a in owner for a in kept):
        kept.sort(key=lambda a: owner[a])
    return kept


def _keep_axes(
    terms: list[tuple[tuple[int, int], ...]], sizes: list[int], trailing: tuple[int, ...], kept: list[int]
) -> tuple[list[tuple[tuple[int, int], ...]], tuple[int, ...]]:
    grid_ndim = len(sizes)
    new_axis = {a: i for i, a in enumerate(kept)}
    for j in range(len(trailing)):
        new_axis[grid_ndim + j] = len(kept) + j
    remapped = [tuple((new_axis[axis], coef) for axis, coef in dim_terms) for dim_terms in terms]
    return remapped, (*(sizes[a] for a in kept), *trailing)


def _compose(base: View, offsets, terms, arrays, vshape) -> View:
    """Index a view again: `offsets/terms` address the base view's axes; map them to the tensor."""
    if base._arrays is not None or arrays is not None:
        raise _error("err_unsupported_indexing", "re-indexing a view built from non-affine index grids")
    new_offsets: list[int] = []
    new_terms: list[tuple[tuple[int, int], ...]] = []
    for b_off, b_terms in zip(base._offsets, base._terms):
        off = b_off
        acc: dict[int, int] = {}
        for b_axis, b_coef in b_terms:
            # base axis b_axis is indexed by (offsets[b_axis], terms[b_axis]) of the new key
            off += b_coef * offsets[b_axis]
            for axis, coef in terms[b_axis]:
                acc[axis] = acc.get(axis, 0) + b_coef * coef
        new_offsets.append(off)
        new_terms.append(tuple((a, c) for a, c in sorted(acc.items()) if c and vshape[a] > 1))
    view = View(base._tensor, vshape, tuple(new_offsets), tuple(new_terms), None)
    _check_bounds(view)
    return view


def new_data(shape: tuple[int, ...], dtype: np.dtype, fill: Any = None, blocks: int = 0) -> np.ndarray:
    """Backing storage for a new tensor; uninitialised memory reads as NaN. A re-run may keep a
    tensor with `blocks` block dimensions one block at a time (blockstore.py)."""
    ctx = _context._ACTIVE
    if blocks and ctx is not None and ctx._block_storage is not None:
        store = ctx._block_storage(ctx._next_tensor_id, shape, dtype, fill, blocks)
        if store is not None:
            return store  # indexed like the array (duck-typed)
    if ctx is not None and ctx._alloc_budget is not None:  # a re-run of an untrusted log
        charge(ctx, _prod(shape) * dtype.itemsize)
        data = np.empty(shape, dtype=dtype)
        keep_charged(ctx, data)
    else:
        data = np.empty(shape, dtype=dtype)
    data.fill(nan_fill(dtype) if fill is None else fill)
    return data


def new_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Storage that the caller writes in full at once (no NaN fill), charged like new_data's."""
    ctx = _context._ACTIVE
    data = np.empty(shape, dtype=dtype)
    if ctx is not None and ctx._alloc_budget is not None:
        charge(ctx, data.nbytes)
        keep_charged(ctx, data)
    return data


def charge(ctx: _context.KernelContext, nbytes: int) -> None:
    """Count `nbytes` of new storage against a re-run's budget (raises past it)."""
    assert ctx._alloc_budget is not None
    ctx._alloc_budget -= nbytes
    if ctx._alloc_budget < 0:
        raise MemoryError("the call log allocates more tensor memory than a re-run may use")
    ctx._alloc_live += nbytes
    ctx._alloc_peak = max(ctx._alloc_peak, ctx._alloc_live)


def keep_charged(ctx: _context.KernelContext, data: np.ndarray) -> None:
    """The budget bounds the storage alive at once: `data`'s bytes come back when it is freed."""
    weakref.finalize(data, ctx.refund, data.nbytes)
