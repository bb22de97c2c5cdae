"""Give a directly allocated tile more physical buffers: raise the tile count of its
`ncc.sbuf.mod_alloc(..., num_free_tiles=(n,))`.

A kernel that places its tiles itself (NKI direct allocation, the compiler-generated style)
says how many physical tiles the logical tiles of a tensor rotate through: with one, every
iteration waits for the previous one to be done with the tile; with two, a load overlaps the
previous tile's work (the timing model maps directly allocated tiles to exactly the addresses the
kernel gave, profiling/compiler_model.py). More buffers never change what the kernel computes:
each logical tile keeps its own data, only fewer of them share an address.

Legal when the larger count still fits: the tensor's buffers, from its base address, stay within
the SBUF bytes a kernel may use on every Trainium generation of hardware/specs.py and do
not reach into another directly allocated tensor's buffers (a tensor placed by an arbitrary
`ncc.sbuf.alloc(func)` cannot be checked, so none is changed while there is one). A count above
the number of logical tiles adds nothing and is not offered.

Source for the semantics: Neuron SDK docs, `nki.compiler.sbuf.mod_alloc` (byte address = base +
(block index modulo the tile counts) x bytes per partition) and the NKI direct allocation guide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, dotted, keyword
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.hardware.roofline import dtype_bytes
from accelopt.hardware.specs import HARDWARE_NAMES, get_hardware

COUNTS = (2, 3, 4, 8)


@dataclass(frozen=True)
class _Placed:
    name: str
    stmt: cst.SimpleStatementLine
    call: cst.Call  # the mod_alloc call
    base: int
    count: int  # physical tiles now
    blocks: int | None  # logical tiles (product of the block dims), None when not known
    tile_bytes: int  # bytes per partition of one tile


class BufferCount(Rewrite):
    name = "buffer_count"
    prior = 0.5
    summary = "give a directly allocated tile more physical buffers (num_free_tiles)"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        placed, unchecked = _placements(view)
        found: list[Site | Refusal] = []
        capacity = min(get_hardware(g).sbuf_bytes_per_partition for g in HARDWARE_NAMES)
        for tensor in placed:
            sid = site_id(self.name, view.where(tensor.stmt))
            title = f"more buffers for {tensor.name} (now {tensor.count})"
            if unchecked:
                found.append(
                    Refusal(self.name, sid, view.line(tensor.stmt), f"cannot give {tensor.name} more "
                            f"buffers: {unchecked} is placed by a function, so what it occupies is unknown")
                )
                continue
            others = [t for t in placed if t is not tensor]
            legal: list[Params] = []
            why = ""
            for count in COUNTS:
                if count <= tensor.count or (tensor.blocks is not None and count > tensor.blocks):
                    continue
                end = tensor.base + count * tensor.tile_bytes
                hit = next(
                    (o for o in others if o.base < end and tensor.base < o.base + o.count * o.tile_bytes), None
                )
                if end > capacity:
                    why = why or f"{count} buffers would end at byte {end}, past the {capacity} SBUF bytes a kernel may use"
                elif hit is not None:
                    why = why or f"{count} buffers would reach into {hit.name}'s buffers (from byte {hit.base})"
                else:
                    legal.append({"count": count})
            if not legal:
                reason = why or f"{tensor.name} has no more logical tiles than buffers"
                found.append(Refusal(self.name, sid, view.line(tensor.stmt), f"cannot give {tensor.name} more buffers: {reason}"))
                continue
            found.append(
                Site(
                    self.name,
                    sid,
                    view.line(tensor.stmt),
                    title,
                    description=(
                        f"{tensor.name}'s logical tiles rotate through {tensor.count} physical tile(s): "
                        "more let a tile be filled while the previous ones are still in use."
                    ),
                    variants=legal,
                    relieves=("hbm", "latency"),
                    payload=tensor,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        tensor: _Placed = site.payload
        return f"give {tensor.name} {params.get('count')} buffers (now {tensor.count})"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        tensor: _Placed = site.payload
        count = int(params["count"])
        value = cst.Tuple([cst.Element(cst.Integer(str(count)))])
        existing = keyword(tensor.call, "num_free_tiles")
        if existing is not None:
            args = [a.with_changes(value=value) if a is existing else a for a in tensor.call.args]
        else:
            args = [*tensor.call.args]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(value, keyword=cst.Name("num_free_tiles"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
        return view.render({id(tensor.call): tensor.call.with_changes(args=args)})


def _placements(view: KernelView) -> tuple[list[_Placed], str]:
    """The kernel's SBUF tensors placed by mod_alloc with one block dimension of tile counts, and
    the name of a tensor placed some way that cannot be checked ("" when there is none)."""
    placed: list[_Placed] = []
    unchecked = ""
    for stmt in view.simple_statements():
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            continue
        small = stmt.body[0]
        target = small.targets[0].target if len(small.targets) == 1 else None
        if not isinstance(target, cst.Name) or not isinstance(small.value, cst.Call):
            continue
        buffer = keyword(small.value, "buffer")
        if buffer is None or not isinstance(buffer.value, cst.Call):
            continue
        where = dotted(buffer.value.func) or ""
        if not where.endswith("sbuf.mod_alloc"):
            if where.endswith("sbuf.alloc"):
                unchecked = unchecked or target.value
            continue
        tensor = _placed(view, target.value, stmt, small.value, buffer.value)
        if tensor is None:
            unchecked = unchecked or target.value
        else:
            placed.append(tensor)
    return placed, unchecked


def _placed(
    view: KernelView, name: str, stmt: cst.SimpleStatementLine, alloc: cst.Call, call: cst.Call
) -> _Placed | None:
    base_arg = keyword(call, "base_addr")
    base = view.eval_int(base_arg.value) if base_arg is not None else None
    if base is None or keyword(call, "num_par_tiles") is not None:
        return None
    tiles = keyword(call, "num_free_tiles")
    count = 1
    if tiles is not None:
        if not isinstance(tiles.value, cst.Tuple) or len(tiles.value.elements) != 1:
            return None
        value = view.eval_int(tiles.value.elements[0].value)
        if value is None:
            return None
        count = value
    shape = alloc.args[0].value if alloc.args and alloc.args[0].keyword is None else None
    if not isinstance(shape, cst.Tuple):
        return None
    dims = [e.value for e in shape.elements]
    par = next((i for i, d in enumerate(dims) if isinstance(d, cst.Call) and (dotted(d.func) or "").endswith("par_dim")), None)
    if par is None or par > 1:
        return None  # one block dimension (or none) in front of the partition dimension
    free = [view.eval_int(d) for d in dims[par + 1 :]]
    if any(f is None for f in free):
        return None
    dtype_arg = keyword(alloc, "dtype")
    dtype = (dotted(dtype_arg.value) or "") if dtype_arg is not None else ""
    element = dtype_bytes(dtype.rsplit(".", 1)[-1]) if dtype and not dtype.endswith(".dtype") else 4
    blocks = view.eval_int(dims[0]) if par == 1 else 1
    return _Placed(name, stmt, call, base, count, blocks, element * math.prod(f for f in free if f is not None))
