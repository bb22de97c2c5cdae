"""``NkiTensor`` view methods of the ``nki.*`` language (NKI 0.7 API reference, class
NkiTensor): ``slice``, ``select``, ``permute``, ``reshape``, ``expand_dim``, ``squeeze_dim``,
``view`` and the access-pattern escape hatch ``ap`` (with ``vector_offset``: indirect,
tensor-indexed DMA gather and scatter).

Each returns a view sharing the tensor's storage, built on the emulator's affine views
(tensor.py): a view axis is a term ``coef * t`` on one or more tensor dimensions, so permuting
or inserting axes only renumbers terms, and an ``ap`` pattern ``[[stride, count], ...]`` over
the tensor's row-major storage becomes one term per pattern axis on the dimension whose stride
divides it. ``vector_offset`` replaces the pattern's first (partition) axis by per-partition row
indices read from an SBUF tile: a materialised index grid on ``indirect_dim``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accelopt.nki.context import current
from accelopt.nki.tensor import Tensor, TileOps, View, make_view
from accelopt.nki.trace import Memory, Region
from accelopt.nki.unsupported import refuse

# How an indirect view's index tile selects elements (IndirectView._index_kind):
ROWS = "rows"  # one row of `_index_dim` per partition: index[p, 0] (indirect DMA)
OFFSET = "offset"  # one run-time value moves the view's static grid along `_index_dim`
GROUPS = "groups"  # tensor indirection: free-dim offsets shared by each 16-partition group
INDEX_KINDS = (ROWS, OFFSET, GROUPS)

# partitions that share one list of offsets under tensor indirection (the deep dive "NKI Tensor
# Indirection": a partition group is 16 adjacent partitions)
_PARTITION_GROUP = 16


class IndirectView(View):
    """A view whose elements on one dimension come from an index tile's data (``ap(
    vector_offset=...)``, ``tensor[index_tile, ...]``, a run-time offset, ``t.indirect(...)``):
    the instruction using it also reads the index tile, and its trace region is every element
    the index could reach (the values are data)."""

    __slots__ = (
        "_index_add",
        "_index_dim",
        "_index_kind",
        "_index_limit",
        "_index_view",
        "_row_fault",
        "_row_faulty",
    )
    _index_view: View
    _index_dim: int  # the dimension whose positions the index tile gives
    _index_add: int  # added to every index (the view's start on that dimension)
    _index_kind: str  # one of INDEX_KINDS
    _index_limit: int  # indices must be below this (before `_index_add`): the reachable extent
    # partitions whose listed row is outside the tensor (their rows read as row 0), and the
    # error an instruction using the view raises unless it masks them all out
    _row_faulty: np.ndarray | None
    _row_fault: str

    def _region(self, ranges: list[tuple[int, int]] | None = None) -> Region:
        if self._row_faulty is not None:
            raise current().error("err_tensor_access_out_of_bound", self._row_fault)
        return View._region(self, ranges)

    def _excuse_rows(self, kept: np.ndarray) -> None:
        """An instruction that updates only the partitions `kept` lists (a run-time mask) does
        not touch the faulty rows it leaves out."""
        if self._row_faulty is not None and not np.any(self._row_faulty & kept):
            self._row_faulty = None


def _indirect(
    tensor: Tensor,
    shape: tuple[int, ...],
    offsets: tuple[int, ...],
    terms: tuple[tuple[tuple[int, int], ...], ...],
    arrays: dict[int, np.ndarray],
    index_view: View,
    dim: int,
    add: int,
    kind: str,
    limit: int,
) -> IndirectView:
    view = IndirectView(tensor, shape, offsets, terms, arrays)
    view._index_view = index_view
    view._index_dim = dim
    view._index_add = add
    view._index_kind = kind
    view._index_limit = limit
    view._row_faulty = None
    view._row_fault = ""
    box = list(view._box())
    box[dim] = (add, add + limit) if kind == GROUPS else (0, tensor.shape[dim])
    view._box_cache = tuple(box)
    return view


def _as_view(x: Any) -> View:
    return x._full_view() if isinstance(x, Tensor) else x


def _tensor_of(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else x._tensor


def _check_dim(x: Any, dim: int, api: str) -> int:
    ndim = len(x.shape)
    if not isinstance(dim, (int, np.integer)) or not -ndim <= int(dim) < ndim:
        raise current().error(
            "err_invalid_dimension", f"{api}: dimension {dim} is not one of a {ndim}-D tensor"
        )
    return int(dim) % ndim


def _on_chip(x: Any) -> bool:
    return _tensor_of(x).memory is not Memory.HBM


def slice_view(x: Any, dim: int, start: int, end: int, step: int = 1) -> View:
    """``t.slice(dim, start, end, step)``: ``t[..., start:end:step, ...]`` on `dim`."""
    d = _check_dim(x, dim, "NkiTensor.slice")
    key = [slice(None)] * len(x.shape)
    key[d] = slice(int(start), int(end), int(step))
    return _index(x, tuple(key))


def select_view(x: Any, dim: int, index: Any) -> View:
    """``t.select(dim, index)``: fix `dim` at `index` and drop it."""
    d = _check_dim(x, dim, "NkiTensor.select")
    if not isinstance(index, (int, np.integer)):
        refuse("NkiTensor.select", "a dynamic index (a tile or register); use an int")
    key: list[Any] = [slice(None)] * len(x.shape)
    key[d] = int(index)
    return _index(x, tuple(key))


def _index(x: Any, key: tuple[Any, ...]) -> View:
    if isinstance(x, Tensor):
        return make_view(x, x.shape, key, base=None)
    return make_view(x._tensor, x.shape, key, base=x)


def _renumbered(view: View, shape: tuple[int, ...], new_axis: dict[int, int]) -> View:
    terms = tuple(tuple((new_axis[a], c) for a, c in dim_terms) for dim_terms in view._terms)
    out = View(view._tensor, shape, view._offsets, terms, view._arrays)
    out._oob = view._oob
    return out


def permute_view(x: Any, dims: Any) -> View:
    """``t.permute(dims)``: reorder the view's axes (the partition axis stays first on chip)."""
    order = tuple(int(d) for d in dims)
    ndim = len(x.shape)
    ctx = current()
    if sorted(order) != list(range(ndim)):
        raise ctx.error(
            "err_invalid_dimension", f"NkiTensor.permute: {order} is not a permutation of {ndim} axes"
        )
    if _on_chip(x) and order[0] != 0:
        raise ctx.error(
            "err_unsupported_permute",
            "NkiTensor.permute: on-chip tensors keep the partition axis (dims[0] must be 0)",
        )
    view = _as_view(x)
    if view._arrays is not None:
        refuse("NkiTensor.permute", "of an indirect view")
    return _renumbered(view, tuple(view.shape[d] for d in order), {old: new for new, old in enumerate(order)})


def expand_dim_view(x: Any, dim: int) -> View:
    """``t.expand_dim(dim)``: a new axis of size 1 at `dim`."""
    ndim = len(x.shape)
    d = int(dim) % (ndim + 1)
    if _on_chip(x) and d == 0:
        raise current().error(
            "err_invalid_dimension", "NkiTensor.expand_dim: on-chip tensors keep the partition axis first"
        )
    view = _as_view(x)
    shape = (*view.shape[:d], 1, *view.shape[d:])
    return _renumbered(view, shape, {a: a + (1 if a >= d else 0) for a in range(ndim)})


def broadcast_view(x: Any, dim: int, size: int) -> View:
    """``t.broadcast(dim, size)``: a size-1 dimension read `size` times (stride 0, no copy).
    On chip the partition dimension cannot be broadcast this way (NKI 0.7 reference, NkiTensor:
    views keep dimension 0 of SBUF/PSUM tensors); an HBM source can, as a DMA reads it."""
    d = _check_dim(x, dim, "NkiTensor.broadcast")
    ctx = current()
    if x.shape[d] != 1:
        raise ctx.error(
            "err_invalid_dimension",
            f"NkiTensor.broadcast: dimension {d} has size {x.shape[d]}; only a size-1 one expands",
        )
    if not isinstance(size, (int, np.integer)) or int(size) < 1:
        raise ctx.error(
            "err_invalid_argument", f"NkiTensor.broadcast: size must be a positive int, got {size!r}"
        )
    if _on_chip(x) and d == 0:
        raise ctx.error(
            "err_invalid_dimension",
            "NkiTensor.broadcast: the partition dimension of an on-chip tensor cannot be broadcast",
        )
    view = _as_view(x)
    if view._arrays is not None:
        refuse("NkiTensor.broadcast", "of an indirect view")
    # the axis reads the same element every time: a stride-0 term on a tensor dimension the
    # view already addresses (its own, when the size-1 axis had one)
    terms = [[(a, c) for a, c in dim_terms if a != d] for dim_terms in view._terms]
    home = next((t for t, dim_terms in enumerate(view._terms) if any(a == d for a, _ in dim_terms)), None)
    terms[home if home is not None else 0].append((d, 0))
    shape = (*view.shape[:d], int(size), *view.shape[d + 1 :])
    out = View(view._tensor, shape, view._offsets, tuple(tuple(t) for t in terms), None)
    out._oob = view._oob
    return out


def squeeze_dim_view(x: Any, dim: int) -> View:
    """``t.squeeze_dim(dim)``: drop an axis of size 1."""
    d = _check_dim(x, dim, "NkiTensor.squeeze_dim")
    if x.shape[d] != 1:
        raise current().error(
            "err_invalid_dimension", f"NkiTensor.squeeze_dim: dimension {d} has size {x.shape[d]}, not 1"
        )
    view = _as_view(x)
    shape = (*view.shape[:d], *view.shape[d + 1 :])
    return _renumbered(view, shape, {a: a - (1 if a > d else 0) for a in range(len(view.shape)) if a != d})


def reshape_view(x: Any, shape: Any) -> Any:
    """``t.reshape(shape)``: whole tensors (and views covering one in order) get a new shape."""
    from accelopt.nki import language

    dims = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if isinstance(x, Tensor):
        return language.reshape(x, dims)
    tensor = x._tensor
    full = tensor._full_view()
    if (
        x.shape == tensor.shape
        and x._offsets == full._offsets
        and x._terms == full._terms
        and x._arrays is None
    ):
        return language.reshape(tensor, dims)
    refuse("NkiTensor.reshape", "of a strided or partial view; reshape the whole tensor")


def dtype_view(x: Any, dtype: Any) -> Tensor:
    """``t.view(dtype)``: the same bytes read as another dtype (whole tensors); the last
    dimension scales by the ratio of the element sizes."""
    from accelopt.nki.dtypes import as_dtype

    ctx = current()
    if not isinstance(x, Tensor):
        refuse("NkiTensor.view", "of a sliced view; reinterpret the whole tensor")
    new = as_dtype(dtype)
    old = x.dtype
    last = x.shape[-1] * old.itemsize
    if last % new.itemsize:
        raise ctx.error(
            "err_shape_mismatch",
            f"NkiTensor.view: {last} bytes in the last dimension do not divide into {new.name}",
        )
    shape = (*x.shape[:-1], last // new.itemsize)
    data = None
    if x._data is not None:
        source = x._data if x._data.flags.c_contiguous else np.ascontiguousarray(x._data)
        data = source.view(new).reshape(shape)
    root = x if x._root is None else x._root
    out = Tensor(shape, new, x.buffer, 0, data)
    out._root = root
    out._written = x._written
    line = ctx.line()
    ctx.register_tensor(out, ctx.name_at(line, "view"), line)
    return out


def _row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def ap_view(
    x: Any,
    pattern: Any,
    offset: Any = None,
    scalar_offset: Any = None,
    vector_offset: Any = None,
    indirect_dim: int = 0,
    dtype: Any = None,
) -> View:
    """``t.ap(pattern, offset=, vector_offset=, indirect_dim=)``: address the tensor's storage
    with ``[[stride, count], ...]`` (row-major elements), optionally gathering the first axis's
    rows by an index tile."""
    ctx = current()
    if dtype is not None:
        refuse("NkiTensor.ap", "dtype= (reinterpreting storage)")
    if scalar_offset is not None:
        refuse("NkiTensor.ap", "scalar_offset= (a dynamic start address)")
    tensor = _tensor_of(x)
    if offset is None:
        offset = _storage_offset(x)
    steps = [(int(s), int(n)) for s, n in pattern]
    shape = tuple(n for _, n in steps)
    strides = _row_major_strides(tensor.shape)
    offsets = _split_offset(int(offset), tensor.shape, strides)
    if offsets is None:
        raise ctx.error(
            "err_tensor_access_out_of_bound",
            f"NkiTensor.ap: offset {offset} is outside tensor {tensor.shape}",
        )
    terms: list[list[tuple[int, int]]] = [[] for _ in tensor.shape]
    indirect = vector_offset is not None
    for axis, (stride, count) in enumerate(steps):
        if count <= 1 or (indirect and axis == 0):
            continue
        dim = _dim_for(stride, count, offsets, tensor.shape, strides)
        if dim is None:
            if not indirect and tensor.memory is Memory.HBM:
                # the axis walks across dimensions (e.g. the rows of [H, P, N] as H*P rows):
                # an access pattern addresses flat storage, so index each dimension explicitly
                return _flat_pattern_view(ctx, tensor, shape, steps, int(offset))
            refuse(
                "NkiTensor.ap",
                f"a pattern axis [{stride}, {count}] that does not stay within one dimension of {tensor.shape}",
            )
        terms[dim].append((axis, stride // strides[dim]))
    arrays = None
    index_view = None
    if indirect:
        arrays, index_view, faulty, fault = _indirect_rows(
            ctx, tensor, shape, vector_offset, int(indirect_dim), offsets
        )
    view: View
    if arrays is not None and index_view is not None:
        d = int(indirect_dim)
        view = _indirect(
            tensor,
            shape,
            tuple(offsets),
            tuple(tuple(t) for t in terms),
            arrays,
            index_view,
            d,
            offsets[d],
            ROWS,
            tensor.shape[d] - offsets[d],
        )
        view._row_faulty, view._row_fault = faulty, fault
    else:
        view = View(tensor, shape, tuple(offsets), tuple(tuple(t) for t in terms), None)
    box = view._box()
    for d, (lo, hi) in enumerate(box):
        if hi > lo and (lo < 0 or hi > tensor.shape[d]):
            raise ctx.error(
                "err_tensor_access_out_of_bound",
                f"NkiTensor.ap: the pattern reaches [{lo}, {hi}) of dimension {d} of size {tensor.shape[d]}",
            )
    return view


def _flat_pattern_view(
    ctx: Any, tensor: Tensor, shape: tuple[int, ...], steps: list[tuple[int, int]], offset: int
) -> View:
    """An HBM access pattern as materialised per-dimension indices: element ``offset + sum(stride
    * i)`` of the tensor's row-major storage, for every position ``i`` of the pattern."""
    flat = np.full(shape, offset, dtype=np.int64)
    for axis, (stride, count) in enumerate(steps):
        along = [1] * len(shape)
        along[axis] = count
        flat = flat + (stride * np.arange(count, dtype=np.int64)).reshape(along)
    total = int(np.prod(tensor.shape))
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= total):
        raise ctx.error(
            "err_tensor_access_out_of_bound",
            f"NkiTensor.ap: the pattern reaches element {int(flat.max())} of tensor {tensor.shape} "
            f"({total} elements)",
        )
    per_dim = np.unravel_index(flat, tensor.shape)
    arrays = {d: np.asarray(g) for d, g in enumerate(per_dim)}
    return View(tensor, shape, tuple(0 for _ in tensor.shape), tuple(() for _ in tensor.shape), arrays)


def _storage_offset(x: Any) -> int:
    if isinstance(x, Tensor):
        return 0
    strides = _row_major_strides(x._tensor.shape)
    return sum(o * s for o, s in zip(x._offsets, strides))


def _split_offset(offset: int, shape: tuple[int, ...], strides: list[int]) -> list[int] | None:
    total = 1
    for n in shape:
        total *= n
    if not 0 <= offset < max(total, 1):
        return None
    out = []
    for s in strides:
        q, offset = divmod(offset, s)
        out.append(q)
    return out


def _dim_for(
    stride: int, count: int, offsets: list[int], shape: tuple[int, ...], strides: list[int]
) -> int | None:
    """The dimension a pattern axis walks along: the innermost whose stride divides the axis
    stride and which holds all `count` steps from its offset."""
    for d in range(len(shape) - 1, -1, -1):
        if stride % strides[d]:
            continue
        coef = stride // strides[d]
        if offsets[d] + coef * (count - 1) < shape[d]:
            return d
    return None


def _indirect_rows(
    ctx: Any, tensor: Tensor, shape: tuple[int, ...], vector_offset: Any, dim: int, offsets: list[int]
) -> tuple[dict[int, np.ndarray], View, np.ndarray | None, str]:
    from accelopt.nki.instructions import to_view

    if tensor.memory is not Memory.HBM:
        refuse("NkiTensor.ap", "vector_offset= on an on-chip tensor (the indexed tensor must be in HBM)")
    index_view = to_view(ctx, vector_offset, ctx.line())
    if index_view._tensor.memory is not Memory.SBUF or index_view.shape[0] != shape[0]:
        raise ctx.error(
            "err_unsupported_indirect_access",
            f"NkiTensor.ap: vector_offset must be an SBUF tile of shape ({shape[0]}, 1), got "
            f"{index_view.shape} in {index_view._tensor.memory.value.upper()}",
        )
    rows = shape[0]
    grid_shape = (rows,) + (1,) * (len(shape) - 1)
    faulty: np.ndarray | None = None
    fault = ""
    if index_view._tensor._data is not None:
        values = np.asarray(index_view._read(), dtype=np.int64).reshape(rows, -1)[:, 0] + offsets[dim]
        if values.size and (values.min() < 0 or values.max() >= tensor.shape[dim]):
            # raised when an instruction uses the view (IndirectView._region), unless it masks
            # those partitions out (nl.atomic_rmw with a run-time mask: sentinel indices)
            faulty = (values < 0) | (values >= tensor.shape[dim])
            fault = (
                f"an indirect index reaches row {int(values[faulty][0])} of dimension {dim} of size "
                f"{tensor.shape[dim]}"
            )
            values = np.where(faulty, 0, values)
    else:
        # trace-only run: the rows are unknown; the access may touch any row of the dimension
        values = np.zeros(rows, dtype=np.int64)
        values[-1] = tensor.shape[dim] - 1
    return {dim: values.reshape(grid_shape)}, index_view, faulty, fault


def tile_indexed_view(tensor: Tensor, key: tuple[Any, ...]) -> View:
    """``tensor[index_tile, rest...]`` (legacy indirect DMA): row ``index_tile[p, 0]`` of the
    tensor's first dimension for partition p, the rest of the key indexing the other
    dimensions."""
    ctx = current()
    index = key[0]
    rows = index.shape[0]
    if len(index.shape) != 2 or index.shape[1] != 1:
        raise ctx.error(
            "err_unsupported_indirect_access",
            f"an index tile must have shape (P, 1), one row index per partition; got {index.shape}",
        )
    rest = make_view(tensor, tensor.shape, (0, *key[1:]), base=None)
    if rest._arrays is not None:
        refuse("indirect DMA", "an index tile together with non-affine index grids")
    shape = (rows, *rest.shape)
    terms = tuple(tuple((a + 1, c) for a, c in dim_terms) for dim_terms in rest._terms)
    arrays, index_view, faulty, fault = _indirect_rows(ctx, tensor, shape, index, 0, [0] * len(tensor.shape))
    view = _indirect(tensor, shape, rest._offsets, terms, arrays, index_view, 0, 0, ROWS, tensor.shape[0])
    view._row_faulty, view._row_fault = faulty, fault
    return view


def dynamic_offset_view(tensor: Tensor, key: tuple[Any, ...]) -> View:
    """``tile[ix, offsets[0, i] + iy]`` or ``tile[ix, offsets[0, i], iz]`` (legacy
    tensor_copy_dynamic_src/dst): the static grid of the key, moved along one dimension by the
    value an SBUF tile holds when the instruction runs. The pages say the offset is "a scalar
    value resided in SBUF"; a one-element tile is required (inferred: the examples index one
    element of an offsets tile per instruction)."""
    from accelopt.nki.dynamic_index import DynamicIndex

    ctx = current()
    if any(k is Ellipsis for k in key):
        refuse("a run-time offset", "together with '...' in the index")
    dynamic = [d for d, k in enumerate(key) if k.__class__ is DynamicIndex or isinstance(k, TileOps)]
    if len(dynamic) != 1:
        refuse("a run-time offset", "on more than one dimension of an index")
    dim = dynamic[0]
    if tensor.memory is Memory.HBM:
        refuse("a run-time offset", "into an HBM tensor (index an SBUF/PSUM tile; DMA uses index tiles)")
    if dim == 0:
        raise ctx.error(
            "err_unsupported_indirect_access",
            "a run-time offset moves along a free dimension; the partition index must be static",
        )
    item = key[dim]
    tile, static = (item.tile, item.static) if item.__class__ is DynamicIndex else (item, 0)
    static_key = (*key[:dim], static, *key[dim + 1 :])
    base = make_view(tensor, tensor.shape, static_key, base=None)
    return rebuilt_indirect_view(base, _offset_tile(ctx, tile), dim, 0, OFFSET, tensor.shape[dim])


def _offset_tile(ctx: Any, tile: Any) -> View:
    from accelopt.nki.instructions import to_view

    view = to_view(ctx, tile, ctx.line())
    if view._tensor.memory is not Memory.SBUF or _prod(view.shape) != 1:
        raise ctx.error(
            "err_unsupported_indirect_access",
            f"a run-time offset must be one element of an SBUF tile, got shape {view.shape} in "
            f"{view._tensor.memory.value.upper()}",
        )
    if view._tensor.dtype.kind not in "iu":
        raise ctx.error(
            "err_unsupported_indirect_access",
            f"a run-time offset must be an integer tile, got {view._tensor.dtype.name}",
        )
    return view


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def tensor_indirection_view(x: Any, index: Any, num_elem: Any = None, **kwargs: Any) -> View:
    """``t.indirect(index, num_elem=)`` (NKI 0.7, NkiTensor.indirect; deep dive "NKI Tensor
    Indirection"): a gather/scatter view of an on-chip [P, F] tensor whose element k of
    partition p is column ``offsets_g[k]`` of row p, where ``offsets_g`` is the index tile's
    rows of p's 16-partition group g read partition-first (column-major), first `num_elem`.
    The read order is *inferred* from the tutorial's index layout (offsets reshaped to
    [n/16, 16], transposed onto 16 partitions, replicated per group), the same order
    nisa.local_gather's published NumPy reference uses; the page does not spell it out."""
    from accelopt.nki.target import require_generation

    ctx = current()
    # "Tensor indirection is available on NeuronCore-v4+ (Trainium3)" (the deep dive)
    require_generation("NkiTensor.indirect", 4)
    if kwargs:
        refuse("NkiTensor.indirect", f"argument(s) {', '.join(sorted(kwargs))}")
    view = _as_view(x)
    tensor = view._tensor
    if tensor.memory is Memory.HBM:
        raise ctx.error(
            "err_unsupported_indirect_access",
            "NkiTensor.indirect: the data tensor must be in SBUF or PSUM (use ap(vector_offset=) for HBM)",
        )
    if (
        len(tensor.shape) != 2
        or len(view.shape) != 2
        or view._arrays is not None
        or view._terms[0] != ((0, 1),)
        or view._terms[1] not in (((1, 1),), ())
    ):
        refuse("NkiTensor.indirect", "of a view that is not a [P, F] box of a 2-D tensor")
    from accelopt.nki.instructions import to_view

    index_view = to_view(ctx, index, ctx.line())
    partitions, free = view.shape
    if index_view._tensor.memory is not Memory.SBUF or index_view._tensor.dtype.kind not in "iu":
        raise ctx.error(
            "err_unsupported_indirect_access",
            f"NkiTensor.indirect: the index must be an integer (uint16) SBUF tile, got "
            f"{index_view._tensor.dtype.name} in {index_view._tensor.memory.value.upper()}",
        )
    if len(index_view.shape) != 2 or index_view.shape[0] != partitions or partitions % _PARTITION_GROUP:
        raise ctx.error(
            "err_num_partition_mismatch",
            f"NkiTensor.indirect: the index tile needs the data's {partitions} partitions (a multiple "
            f"of {_PARTITION_GROUP}) and 2 dimensions, got {index_view.shape}",
        )
    available = _PARTITION_GROUP * index_view.shape[1]
    count = available if num_elem is None else int(num_elem)
    if not 0 < count <= available:
        raise ctx.error(
            "err_invalid_argument",
            f"NkiTensor.indirect: num_elem must be in 1..{available} (16 x the index tile's free size), got {count}",
        )
    base = View(tensor, (partitions, count), view._offsets, (((0, 1),), ()), None)
    return rebuilt_indirect_view(base, index_view, 1, view._offsets[1], GROUPS, free)


def _group_offsets(index: np.ndarray, count: int) -> np.ndarray:
    """[P, count]: each partition's offsets, its 16-partition group's index rows read
    partition-first."""
    partitions = index.shape[0]
    groups = index.reshape(partitions // _PARTITION_GROUP, _PARTITION_GROUP, -1)
    flat = np.swapaxes(groups, 1, 2).reshape(groups.shape[0], -1)[:, :count]
    return np.repeat(flat, _PARTITION_GROUP, axis=0)


def rebuilt_indirect_view(
    base: View, index_view: View, dim: int, add: int, kind: str, limit: int
) -> IndirectView:
    """`base` (the static part of the access) with its positions on `dim` taken from the values
    `index_view` holds now: how an indirect view is built, and how the verified re-run
    rebuilds one from the index tile's values in that run, never from the values the logged
    run saw."""
    ctx = current()
    tensor = base._tensor
    if (
        kind not in INDEX_KINDS
        or not 0 <= dim < len(tensor.shape)
        or not 0 < limit <= tensor.shape[dim] - add
    ):
        raise ctx.error("err_unsupported_indirect_access", "an indirect view outside its tensor")
    if kind == ROWS:
        offsets = [0] * len(tensor.shape)
        offsets[dim] = add
        arrays, index, faulty, fault = _indirect_rows(ctx, tensor, base.shape, index_view, dim, offsets)
        view = _indirect(tensor, base.shape, base._offsets, base._terms, arrays, index, dim, add, kind, limit)
        view._row_faulty, view._row_fault = faulty, fault
        return view
    known = index_view._tensor._data is not None
    values: np.ndarray | None = None
    if known:
        raw = np.asarray(index_view._read(), dtype=np.int64)
        if kind == OFFSET:
            static = np.asarray(base._fancy_index(clip=False)[dim], dtype=np.int64)
            values = static + int(raw.ravel()[0])
        else:
            values = _group_offsets(raw.reshape(index_view.shape), base.shape[1])
        if values.size and (int(values.min()) < 0 or int(values.max()) >= limit):
            reached = int(values.max()) if int(values.max()) >= limit else int(values.min())
            raise ctx.error(
                "err_tensor_access_out_of_bound",
                f"a run-time index reaches position {reached} of dimension {dim} of size {limit}",
            )
        if kind == GROUPS:
            values = values + add
    else:
        # trace-only run: the positions are unknown; the records name the reachable extent
        values = np.full(base.shape, add, dtype=np.int64)
    grid = np.broadcast_to(values, base.shape) if values.shape != base.shape else values
    arrays = {dim: grid}
    return _indirect(
        tensor, base.shape, base._offsets, base._terms, arrays, index_view, dim, add, kind, limit
    )


def indirect_view(base: View, index_view: View, dim: int, add: int) -> IndirectView:
    """The re-run's rebuild of a row-gathering view (see rebuilt_indirect_view)."""
    return rebuilt_indirect_view(base, index_view, dim, add, ROWS, base._tensor.shape[dim] - add)


def view_strides(x: Any) -> tuple[int, ...]:
    """``t.strides``: the element step of each view axis in the tensor's row-major storage
    (0 for a broadcast axis)."""
    view = _as_view(x)
    strides = _row_major_strides(view._tensor.shape)
    out = [0] * len(view.shape)
    for d, dim_terms in enumerate(view._terms):
        for axis, coef in dim_terms:
            out[axis] += coef * strides[d]
    return tuple(out)


def view_offset(x: Any) -> int:
    """``t.offset``: the element offset of the view's first element in the storage."""
    return _storage_offset(x)


def view_pattern(x: Any) -> list[list[int]]:
    """``t.get_pattern()``: ``[[stride, count], ...]`` per view axis (an ``ap`` pattern)."""
    return [[s, n] for s, n in zip(view_strides(x), x.shape)]


def view_is_contiguous(x: Any) -> bool:
    """``t.is_contiguous()``: every axis of size > 1 steps by the size of the axes inside it."""
    expected = 1
    for stride, size in reversed(list(zip(view_strides(x), x.shape))):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def view_is_indirect(x: Any) -> bool:
    return isinstance(x, View) and x._arrays is not None


def reshape_dim_view(x: Any, dim: int, shape: Any) -> View:
    """``t.reshape_dim(dim, shape)``: split one axis into several (one size may be -1)."""
    ctx = current()
    d = _check_dim(x, dim, "NkiTensor.reshape_dim")
    sizes = [int(s) for s in shape]
    if sizes.count(-1) > 1:
        raise ctx.error("err_shape_mismatch", "NkiTensor.reshape_dim: at most one size may be -1")
    known = 1
    for s in sizes:
        known *= s if s != -1 else 1
    if -1 in sizes and known and x.shape[d] % known == 0:
        sizes[sizes.index(-1)] = x.shape[d] // known
    total = 1
    for s in sizes:
        total *= s
    if total != x.shape[d]:
        raise ctx.error(
            "err_shape_mismatch",
            f"NkiTensor.reshape_dim: {tuple(sizes)} does not split a dimension of {x.shape[d]}",
        )
    if _on_chip(x) and d == 0 and len(sizes) > 1:
        raise ctx.error(
            "err_invalid_dimension", "NkiTensor.reshape_dim: on-chip tensors keep the partition axis"
        )
    view = _as_view(x)
    if view._arrays is not None:
        refuse("NkiTensor.reshape_dim", "of an indirect view")
    k = len(sizes)
    inner = [1] * k
    for i in range(k - 2, -1, -1):
        inner[i] = inner[i + 1] * sizes[i + 1]
    terms = []
    for dim_terms in view._terms:
        new: list[tuple[int, int]] = []
        for axis, coef in dim_terms:
            if axis < d:
                new.append((axis, coef))
            elif axis > d:
                new.append((axis + k - 1, coef))
            else:
                new.extend((d + i, coef * inner[i]) for i in range(k) if sizes[i] > 1)
        terms.append(tuple(new))
    out_shape = (*view.shape[:d], *sizes, *view.shape[d + 1 :])
    out = View(view._tensor, out_shape, view._offsets, tuple(terms), None)
    out._oob = view._oob
    return out


def flatten_dims_view(x: Any, start_dim: int, end_dim: int) -> Any:
    """``t.flatten_dims(start, end)``: merge axes start..end (inclusive). A whole tensor is
    reshaped; a view merges axes that step along one tensor dimension, one inside the other."""
    ctx = current()
    a = _check_dim(x, start_dim, "NkiTensor.flatten_dims")
    b = _check_dim(x, end_dim, "NkiTensor.flatten_dims")
    if b < a or (_on_chip(x) and a == 0):
        raise ctx.error("err_invalid_dimension", f"NkiTensor.flatten_dims: cannot merge dimensions {a}..{b}")
    merged = 1
    for axis in range(a, b + 1):
        merged *= x.shape[axis]
    shape = (*x.shape[:a], merged, *x.shape[b + 1 :])
    if isinstance(x, Tensor):
        return reshape_view(x, shape)
    view = x
    dims = {d for d, dim_terms in enumerate(view._terms) for axis, _ in dim_terms if a <= axis <= b}
    coefs = {axis: coef for dim_terms in view._terms for axis, coef in dim_terms if a <= axis <= b}
    inner = 1
    consistent = len(dims) <= 1 and view._arrays is None
    step = 0
    for axis in range(b, a - 1, -1):
        if view.shape[axis] > 1:
            if not step:
                step = coefs.get(axis, 0) // inner if inner else 0
            consistent = consistent and coefs.get(axis, 0) == step * inner
        inner *= view.shape[axis]
    if not consistent:
        refuse("NkiTensor.flatten_dims", "of axes that do not step along one dimension of the tensor")
    terms = []
    for dim_terms in view._terms:
        new = [(axis if axis < a else axis - (b - a), coef) for axis, coef in dim_terms if not a <= axis <= b]
        terms.append(new)
    if dims and merged > 1:
        terms[dims.pop()].append((a, step))
    out = View(view._tensor, shape, view._offsets, tuple(tuple(sorted(t)) for t in terms), None)
    out._oob = view._oob
    return out


# `t.view(dtype)` makes a tensor (the re-run must make it too): logged like an API call
from accelopt.nki import calllog as _calllog  # noqa: E402 - calllog must not import this module

_calllog.logged(globals(), ("dtype_view",))
