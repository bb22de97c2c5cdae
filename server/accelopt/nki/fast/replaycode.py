"""Straight-line Python for replaying one logged API call (see replay.py).

A replay runs for every iteration of a kernel loop, so it is compiled once per call site and
argument structure into a function without loops or dispatch:

    def replay(ctx, args, kwargs):
        # the arguments have the logged structure, else MISS (the caller falls back)
        ...
        # the logged effects, with regions shifted by the arguments' offsets
        ...

The generated checks accept exactly the arguments whose `replay._structure` equals the logged
one (keyword order aside, which no API depends on); the generated effects are the logged events
in order: tiles read (fresh state cleared, scope checked), tiles made and registered, records
emitted with the current loop frames, writes noted (affine-loop conflicts checked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki.fast.codecache import define
from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.tensor import Tensor, View, _new_object, _set_region_box, _set_region_tid, par_dim
from accelopt.nki.trace import Region, TraceRecord

MISS = object()  # the arguments do not have the logged structure


class Unsupported(Exception):
    """The log cannot be expressed as straight-line code (the call stays unreplayable)."""


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {
            "MISS": MISS,
            "View": View,
            "Tensor": Tensor,
            "TraceRecord": TraceRecord,
            "LoopVar": LoopVar,
            "IndexExpr": IndexExpr,
            "Predicate": Predicate,
            "par_dim": par_dim,
            "Region": Region,
            "_new": _new_object,
            "_set_tid": _set_region_tid,
            "_set_box": _set_region_box,
        }

    def const(self, value: Any) -> str:
        """A name for `value` in the generated function's globals (source lines and names are
        constants too: sites of one structure then generate one text, compiled once)."""
        name = f"C{len(self.consts)}"
        self.consts[name] = value
        return name

    def add(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)

    def reject_if(self, condition: str) -> None:
        self.add(f"if {condition}:")
        self.add("return MISS", 2)


def generate(
    args_structure: tuple[Any, ...],
    kwargs_structure: tuple[tuple[str, Any], ...],
    mask_key: Callable[[Any], Any],
    plain_key: Callable[[Any], Any],
    events: list[tuple[Any, ...]],
    tiles: list[Any],
    result: Any,
) -> Callable[..., Any]:
    """The replay function for a call whose arguments had the given structures (from
    replay._structure, before the call) and whose effects are `events` over argument `tiles`."""
    src = _Source()
    src.consts["_mask_key"] = mask_key
    src.consts["_plain_key"] = plain_key
    src.add("def replay(ctx, args, kwargs):", 0)
    src.reject_if(f"len(args) != {len(args_structure)} or len(kwargs) != {len(kwargs_structure)}")
    tile_exprs: list[str] = []
    fresh: list[bool] = []  # each argument tile's `_fresh`, as the checks require it
    if args_structure:
        names = [f"a{p}" for p in range(len(args_structure))]
        src.add(f"{', '.join(names)}{',' if len(names) == 1 else ''} = args")
        for name, structure in zip(names, args_structure):
            _check(src, name, structure, tile_exprs, fresh)
    for k, (key, structure) in enumerate(kwargs_structure):
        name = f"k{k}"
        src.add(f"{name} = kwargs.get({key!r}, MISS)")
        _check(src, name, structure, tile_exprs, fresh)
    if len(tile_exprs) != len(tiles):
        raise Unsupported  # tiles nested in lists
    _effects(src, events, tiles, tile_exprs, fresh, result)
    namespace = dict(src.consts)
    return define("\n".join(src.lines), "<accelopt.nki.replay>", namespace, "replay")


# --- argument checks --------------------------------------------------------------------------


def _check(src: _Source, e: str, structure: Any, tile_exprs: list[str], fresh: list[bool]) -> None:
    if structure.__class__ is not tuple:  # an op, dtype, buffer, engine...: by identity or value
        v = src.const(structure)
        src.reject_if(f"{e} is not {v} and ({e}.__class__ is not {v}.__class__ or {e} != {v})")
        return
    kind = structure[0]
    if kind is View:
        _, shape, terms, tshape, dtype, buffer, block_dims, is_fresh, no_producer = structure
        i = len(tile_exprs)
        tile_exprs.append(e)
        fresh.append(is_fresh)
        src.reject_if(
            f"{e}.__class__ is not View or {e}.shape != {shape!r} or {e}._terms != {src.const(terms)} "
            f"or {e}._arrays is not None or {e}._oob"
        )
        src.add(f"t{i} = {e}._tensor")
        _check_tensor(src, f"t{i}", tshape, dtype, buffer, block_dims, is_fresh, no_producer)
    elif kind is Tensor:
        _, shape, dtype, buffer, block_dims, is_fresh, no_producer = structure
        i = len(tile_exprs)
        tile_exprs.append(e)
        fresh.append(is_fresh)
        src.reject_if(f"{e}.__class__ is not Tensor or {e}._root is not None")
        src.add(f"t{i} = {e}")
        _check_tensor(src, f"t{i}", shape, dtype, buffer, block_dims, is_fresh, no_producer)
    elif kind is LoopVar:
        src.reject_if(
            f"{e}.__class__ is not LoopVar or {e} != {structure[1]!r} or {e}.loop_id != {structure[2]!r}"
        )
    elif kind is IndexExpr:
        _, sizes, coefs, offset = structure
        src.reject_if(
            f"{e}.__class__ is not IndexExpr or {e}.values is not None or {e}.sizes != {sizes!r} "
            f"or {e}.coefs != {coefs!r} or {e}.offset != {offset!r}"
        )
    elif kind is Predicate:
        src.reject_if(f"{e}.__class__ is not Predicate or _mask_key({e}) != {src.const(structure)}")
    elif kind is tuple or kind is list:
        if _has_tiles(structure):
            raise Unsupported
        src.reject_if(f"{e}.__class__ is not {src.const(kind)} or _plain_key({e}) != {src.const(structure)}")
    elif kind is par_dim:
        src.reject_if(f"{e}.__class__ is not par_dim or {e}.size != {structure[1]!r}")
    elif isinstance(kind, type) and issubclass(kind, np.generic):
        src.reject_if(f"{e}.__class__ is not {src.const(kind)} or {e}.item() != {src.const(structure[1])}")
    elif kind is type(None):
        src.reject_if(f"{e} is not None")
    elif isinstance(kind, type):  # a Python scalar
        src.reject_if(f"{e}.__class__ is not {src.const(kind)} or {e} != {src.const(structure[1])}")
    else:
        raise Unsupported


def _check_tensor(
    src: _Source, t: str, shape: Any, dtype: Any, buffer: Any, block_dims: int, fresh: bool, no_producer: bool
) -> None:
    d = src.const(dtype)
    src.reject_if(
        f"{t}._alias is not None or {t}.shape != {shape!r} or ({t}.dtype is not {d} and {t}.dtype != {d}) "
        f"or {t}.buffer is not {src.const(buffer)} or {t}.block_dims != {block_dims!r} "
        f"or {t}._fresh is not {fresh!r} or ({t}._producer is None) is not {no_producer!r}"
    )


def _has_tiles(structure: Any) -> bool:
    if structure.__class__ is not tuple or not structure:
        return False
    if structure[0] is View or structure[0] is Tensor:
        return True
    return any(_has_tiles(s) for s in structure[1:] if s.__class__ is tuple)


# --- effects ------------------------------------------------------------------------------------

# Slots of a new tile that the registration after `_new_tensor` sets.
_REGISTERED_SLOTS = frozenset({"_tid", "_alloc_scopes"})
# Slots `_new_tensor` stores. A slot added to Tensor without teaching `_new_tensor` would make
# every trace-only replay fall back to the slow path without a word, so importing fails instead.
_GENERATED_SLOTS = frozenset(
    {"shape", "dtype", "buffer", "memory", "block_dims", "_data", "_written", "_producer", "_fresh", "_alias",
     "_exact", "_pmask", "_root"}
)
if _GENERATED_SLOTS | _REGISTERED_SLOTS != set(Tensor.__slots__):
    raise TypeError("Tensor gained or lost a slot: update fast.replaycode._new_tensor")


def _new_tensor(src: _Source, var: str, tensor: Tensor, produced: bool) -> None:
    """Lines making a tile like the logged one (a new trace-only tile: no data, alias or root),
    every slot stored in place: a `Tensor(...)` call costs more than the stores. `produced`: its
    `_producer` is stored once the record exists (nothing reads it before)."""
    values = {
        "shape": repr(tensor.shape),
        "dtype": src.const(tensor.dtype),
        "buffer": src.const(tensor.buffer),
        "memory": src.const(tensor.memory),
        "block_dims": repr(tensor.block_dims),
        "_data": "None",
        "_written": repr(tensor._written),
        "_producer": "None",
        "_fresh": repr(tensor._fresh),
        "_alias": "None",
        "_exact": "None",
        "_pmask": "None" if tensor._pmask is None else src.const(tensor._pmask),
        "_root": "None",
    }
    assert values.keys() == _GENERATED_SLOTS
    if produced:
        del values["_producer"]
    src.add(f"{var} = _new(Tensor)")
    for name, expr in values.items():
        src.add(f"{var}.{name} = {expr}")


def _effects(
    src: _Source,
    events: list[tuple[Any, ...]],
    tiles: list[Any],
    tile_exprs: list[str],
    fresh: list[bool],
    result: Any,
) -> None:
    tensor_var: dict[int, str] = {}  # id(tensor) -> variable
    # tid -> (tensor variable, offsets of an argument view or None, argument position or -1)
    by_tid: dict[int, tuple[str, tuple[int, ...] | None, int]] = {}
    for i, tile in enumerate(tiles):
        tensor = tile._tensor if tile.__class__ is View else tile
        if id(tensor) in tensor_var:
            raise Unsupported  # which argument a region came from would be ambiguous
        tensor_var[id(tensor)] = f"t{i}"
        by_tid[tensor._tid] = (f"t{i}", tile._offsets if tile.__class__ is View else None, i)
    unpacked: set[int] = set()
    # tile variable -> its `_fresh` where the checks settle it (argument tiles, until read)
    fresh_of: dict[str, bool] = {f"t{i}": f for i, f in enumerate(fresh)}
    boxed: set[int] = set()  # argument views whose box is in variable b{i}
    record_var: dict[int, str] = {}
    region_expr: dict[int, str] = {}  # id(region object in an emitted record) -> expression
    new_tensors: list[Tensor] = []
    regions: list[str] = []

    def tensor_of(tensor: Tensor) -> str:
        var = tensor_var.get(id(tensor))
        if var is None:
            raise Unsupported
        return var

    def region(r: Region) -> str:
        source = by_tid.get(r.tensor_id)
        if source is None:
            raise Unsupported
        var, offsets, i = source
        if offsets is None or any(lo >= hi for lo, hi in r.box):
            # a new tile's box, or an access its mask empties: an empty region is the same
            # (all-zero) box wherever the view sits
            box = src.const(r.box)
        elif r.box == tiles[i]._box():
            # the whole argument view: its box (built when the kernel indexed) serves as is
            box = f"b{i}"
            if i not in boxed:
                src.add(f"b{i} = x{i}._box_cache")
                src.add(f"if b{i} is None:")
                src.add(f"b{i} = x{i}._box()", 2)
                boxed.add(i)
        else:
            if len(offsets) != len(r.box):
                raise Unsupported
            if i not in unpacked:
                names = [f"o{i}_{d}" for d in range(len(offsets))]
                src.add(f"{', '.join(names)}{',' if len(names) == 1 else ''} = x{i}._offsets")
                unpacked.add(i)
            parts = [
                f"(o{i}_{d} + {lo - o}, o{i}_{d} + {hi - o})"
                for d, ((lo, hi), o) in enumerate(zip(r.box, offsets))
            ]
            box = f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        # tensor.new_region inlined (no Python call per region)
        name = f"g{len(regions)}"
        regions.append(name)
        src.add(f"{name} = _new(Region)")
        src.add(f"_set_tid({name}, {var}._tid)")
        src.add(f"_set_box({name}, {box})")
        return name

    src.add("records = ctx.trace.records")
    for i, expr in enumerate(tile_exprs):
        src.add(f"x{i} = {expr}")
    for event in events:
        kind = event[0]
        if kind == "view":
            _, tensor, line = event
            t = tensor_of(tensor)
            state = fresh_of.get(t)
            if state is None:
                src.add(f"if {t}._fresh:")
                src.add(f"{t}._fresh = False", 2)
                src.add(f"{t}._exact = None", 2)
            elif state:  # the checks required a fresh tile: reading it ends that
                src.add(f"{t}._fresh = False")
                src.add(f"{t}._exact = None")
            fresh_of[t] = False
            # while a tile's innermost loop scope is active, so are the outer ones (they nest):
            # only a tile whose innermost allocation scope ended can be out of scope
            src.add(f"if {t}._alloc_scopes and not {t}._alloc_scopes[-1].active:")
            src.add(f"ctx.check_in_scope({t}, {src.const(line)})", 2)
        elif kind == "tensor":
            _, tensor, name, line = event
            var = f"n{len(new_tensors)}"
            new_tensors.append(tensor)
            tensor_var[id(tensor)] = var
            by_tid[tensor._tid] = (var, None, -1)
            if tensor._alias is not None or tensor._root is not None or tensor._exact is not None:
                raise Unsupported
            if tensor._data is not None:
                raise Unsupported
            _new_tensor(src, var, tensor, tensor._producer is not None)
            # ctx.register_tensor inlined (no recorder is active while a replay runs)
            src.add("tid = ctx._next_tensor_id")
            src.add("ctx._next_tensor_id = tid + 1")
            src.add(f"{var}._tid = tid")
            src.add(f"{var}._alloc_scopes = ctx.scope_tuple")
            src.add(f"ctx._pending[tid] = ({var}, {src.const(name)}, {src.const(line)}, False, ctx.frames)")
        elif kind == "emit":
            record = event[1]
            var = f"r{len(record_var)}"
            record_var[id(record)] = var
            reads = [region(r) for r in record.reads]
            writes = [region(r) for r in record.writes]
            for k, r in enumerate(record.writes):
                region_expr[id(r)] = f"{var}.writes[{k}]"
            fields = {
                "index": "len(records)",
                "engine": src.const(record.engine),
                "opcode": repr(record.opcode),
                "partitions": repr(record.partitions),
                "free_size": repr(record.free_size),
                "dtype": repr(record.dtype),
                "out_dtype": repr(record.out_dtype),
                "reads": f"({', '.join(reads)}{',' if len(reads) == 1 else ''})",
                "writes": f"({', '.join(writes)}{',' if len(writes) == 1 else ''})",
                "src_memory": src.const(record.src_memory),
                "dst_memory": src.const(record.dst_memory),
                "line": src.const(record.line),
                "loops": "ctx.frames",
                "bytes": repr(record.bytes),
                "flops": repr(record.flops),
                "vector_ops": repr(record.vector_ops),
                "is_transpose": repr(record.is_transpose),
                "accumulate": repr(record.accumulate),
                "matmul_kmn": repr(record.matmul_kmn),
                "dma_chunk_bytes": repr(record.dma_chunk_bytes),
                "dma_chunks": repr(record.dma_chunks),
                "extra": f"{src.const(dict(record.extra))}.copy()",
            }
            if set(fields) != set(TraceRecord.__slots__):
                raise Unsupported  # the record gained a field this generator does not know
            # every field assigned in place: the dataclass __init__ call costs more than the stores
            src.add(f"{var} = _new(TraceRecord)")
            for name, expr in fields.items():
                src.add(f"{var}.{name} = {expr}")
            src.add(f"records.append({var})")
        else:  # write
            _, tensor, r, line, accumulate = event
            expr = region_expr.get(id(r)) or region(r)
            src.add(f"ctx.note_write({tensor_of(tensor)}, {expr}, {src.const(line)}, {accumulate!r})")
    for j, tensor in enumerate(new_tensors):
        producer = tensor._producer
        if producer is not None:
            producer_var = record_var.get(id(producer))
            if producer_var is None:
                raise Unsupported
            src.add(f"n{j}._producer = {producer_var}")
    if result is None:
        src.add("return None")
    elif result.__class__ is Tensor:
        src.add(f"return {tensor_of(result)}")
    else:
        raise Unsupported
