"""Fold F iterations of an outer loop into one wider instruction, as an extra free axis.

A loop that walks an outer dimension of the tensors (heads, batch entries: `x[b, j, rows, cols]`)
issues, per iteration, one small DMA per tensor and one instruction per elementwise step. When
every step is elementwise, F iterations can run as one: each tile gains a free axis of size F
(`[P, F, C]` instead of `[P, C]`), the HBM accesses select F entries of that dimension at once
(`x[b, F * j_blk + nl.arange(F)[None, :, None], rows, cols]`), and the loop runs T // F times.
F times fewer instructions and DMA transfers, each F times larger, so the fixed cost each pays
(NKI_NOTES §4) is paid F times less often.

Compiler-generated style only: it relies on arange-grid indexing, where a tile may have several
free axes (a hand-written slice would make the folded dimension the partition axis). Refused when
the loop variable is used for anything but a whole index of a tensor dimension or a block index of
a buffer, when the loop body does more than elementwise work (Tensor Engine, reductions, partition
broadcasts), when a buffer it uses is also used outside the loop or not block-indexed by the loop,
or when no factor divides the trip count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.facts import (
    ACTIVATION_FUNCTIONS,
    BINARY_FUNCTIONS,
    is_scalar,
    memory_of,
    slice_extent,
)
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    argument,
    base_name,
    dotted,
    keyword,
    names_in,
    walk,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, reason_or, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.plain_loop import require_plain_loop

FACTORS = (2, 4, 8)
SBUF_PARTITION_BYTES = 180_224
# Calls a folded body may make: elementwise work and the index/typing helpers around it.
ELEMENTWISE = {
    ("nl", "load"),
    ("nl", "store"),
    ("nl", "arange"),
    ("nl", "copy"),
    ("nisa", "tensor_tensor"),
    ("nisa", "tensor_scalar"),
    ("nisa", "tensor_copy"),
    ("nisa", "activation"),
    ("nisa", "reciprocal"),
    *(("nl", f) for f in ACTIVATION_FUNCTIONS),
    *(("nl", f) for f in BINARY_FUNCTIONS),
    ("nl", "reciprocal"),
}
# Keywords that would make an elementwise call do more (reduce along an axis, accumulate).
NON_ELEMENTWISE_KEYWORDS = {"axis", "reduce_op", "reduce_res", "reduce_cmd", "keepdims"}


@dataclass
class _Fold:
    loop: Loop
    hbm: list[tuple[cst.Subscript, int]] = field(default_factory=list)  # access, element of the loop var
    sbuf: list[tuple[cst.Subscript, int]] = field(default_factory=list)
    grids: list[cst.Subscript] = field(default_factory=list)  # 2-D arange grids made 3-D
    # Hand-written `x[j, r0:r1, c0:c1]`: the two slices become partition and free grids.
    sliced: list[tuple[cst.Subscript, int]] = field(default_factory=list)
    allocations: list[cst.Call] = field(default_factory=list)
    factors: list[int] = field(default_factory=list)


class FoldLoop(Rewrite):
    name = "fold_loop"
    prior = 0.6
    summary = "run F iterations of an outer elementwise loop as one instruction with an extra free axis"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            if not _indexes_a_tensor_dimension(view, loop):
                continue
            sid = site_id(self.name, loop.line)
            title = f"fold the {loop.var} loop into a free axis"
            place = self.place(sid, loop.line, title)
            fold = reason_or(_analyse, view, loop)
            if isinstance(fold, str):
                found.append(place.refused(fold))
                continue
            found.append(
                place.site(
                    title=f"{title}: {fold.factors[0]} {loop.var} entries per instruction",
                    description=(
                        f"Every step in the {loop.var} loop (line {loop.line}) is elementwise: handle "
                        f"several {loop.var} entries per instruction and per DMA, as an extra free axis of "
                        "each tile, instead of one per iteration."
                    ),
                    variants=[{"factor": f} for f in fold.factors],
                    relieves=("hbm", "vector", "scalar", "latency"),
                    payload=fold,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        fold: _Fold = site.payload
        factor = int(params.get("factor", fold.factors[0]))
        return f"fold the {fold.loop.var} loop into a free axis: {factor} {fold.loop.var} entries per instruction"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        fold: _Fold = site.payload
        factor = int(params.get("factor", fold.factors[0]))
        if factor not in fold.factors:
            raise NotApplicable(f"a factor of {factor} does not fit this loop (possible: {fold.factors})")
        return _render(view, fold, factor)


def _var_element(sub: cst.Subscript, var: str) -> int | None:
    for position, el in enumerate(sub.slice):
        index = el.slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value == var:
            return position
    return None


def _indexes_a_tensor_dimension(view: KernelView, loop: Loop) -> bool:
    """The loop variable picks an entry of an HBM tensor's dimension somewhere in the loop."""
    for node in walk(loop.node):
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
            if _var_element(node, loop.var) is not None and memory_of(view, node.value.value) == "hbm":
                return True
    return False


def _analyse(view: KernelView, loop: Loop) -> _Fold:
    var = loop.var
    trip_expr = require_plain_loop(view, loop)
    if view.alias_for("nl") is None:
        raise NotApplicable("the kernel does not import neuronxcc.nki.language")
    fold = _Fold(loop)
    for call in view.calls_in(loop.node):
        callee = view.callee(call)
        if callee.namespace == "np" or is_scalar(view, call):
            continue
        if isinstance(view.parent(call), cst.For):
            continue  # a loop's range
        if callee.namespace == "nl" and callee.name in ("par_dim", "ndarray", "zeros"):
            raise NotApplicable(f"it allocates a tile inside the loop (line {view.line(call)})")
        if (callee.namespace, callee.name) not in ELEMENTWISE:
            raise NotApplicable(f"{callee} (line {view.line(call)}) is not an elementwise step")
        for reducing in NON_ELEMENTWISE_KEYWORDS:
            if keyword(call, reducing) is not None:
                raise NotApplicable(f"{callee} (line {view.line(call)}) reduces along an axis")
    for use in view.name_uses(var, loop.node):
        if use is loop.node.target:
            continue
        element = view.parent(view.parent(use) or use)
        sub = view.parent(element) if element is not None else None
        if not (
            isinstance(view.parent(use), cst.Index)
            and isinstance(sub, cst.Subscript)
            and isinstance(sub.value, cst.Name)
        ):
            raise NotApplicable(
                f"{var} is used in `{view.snippet(view.statement_of(use) or use, 50)}` "
                f"(line {view.line(use)}), not only as a whole index"
            )
    buffers: set[str] = set()
    for node in walk(loop.node):
        if not isinstance(node, cst.Subscript):
            continue
        if view.is_call(node.value, "nl", "arange"):
            if len(node.slice) == 2:
                fold.grids.append(node)
            elif len(node.slice) != 1:
                raise NotApplicable(f"an arange grid at line {view.line(node)} is not two-dimensional")
            continue
        name = base_name(node)
        if not isinstance(node.value, cst.Name) or name is None:
            continue
        memory = memory_of(view, name)
        if memory not in ("hbm", "sbuf", "psum"):
            continue
        position = _var_element(node, var)
        if position is None:
            raise NotApplicable(f"{name} (line {view.line(node)}) is not indexed by {var}")
        if memory == "hbm" and any(isinstance(el.slice, cst.Slice) for el in node.slice):
            _check_sliced(view, node)
            fold.sliced.append((node, position))
            continue
        _check_tile_axes(view, node)
        if memory == "hbm":
            fold.hbm.append((node, position))
        else:
            if memory == "psum":
                raise NotApplicable(f"{name} lives in PSUM")
            if position >= len(node.slice) - 2:
                raise NotApplicable(f"{var} indexes a tile axis of {name} (line {view.line(node)})")
            fold.sbuf.append((node, position))
            buffers.add(name)
    if not fold.hbm and not fold.sliced:
        raise NotApplicable(f"{var} indexes no tensor in HBM")
    _check_tiles_made_inside(view, loop, buffers)
    free_bytes = 0
    for name in sorted(buffers):
        allocation = _allocation(view, name)
        if allocation is None:
            raise NotApplicable(f"the allocation of {name} is not a single nl.ndarray with a par_dim shape")
        for use in view.name_uses(name):
            statement = view.statement_of(use)
            if not view.contains(loop.node, use) and not _allocates(view, statement, name):
                raise NotApplicable(f"{name} is also used outside the loop (line {view.line(use)})")
        fold.allocations.append(allocation)
        shape = argument(allocation, 0, "shape")
        assert isinstance(shape, cst.Tuple)
        last = view.eval_int(shape.elements[-1].value)
        free_bytes += 4 * (last if last is not None else 512)
    trip = view.eval_int(trip_expr)
    for factor in FACTORS:
        if trip is not None and (trip < factor or trip % factor):
            continue
        if trip is None and factor > 4:
            continue
        if factor * free_bytes > SBUF_PARTITION_BYTES // 2:
            continue
        fold.factors.append(factor)
    if not fold.factors:
        reason = f"its trip count {trip} has no factor among {FACTORS}" if trip is not None else "SBUF"
        raise NotApplicable(f"no fold fits: {reason}")
    return fold


def _check_sliced(view: KernelView, sub: cst.Subscript) -> None:
    """A hand-written access: integer indices and exactly two plain slices (partition, free)."""
    slices = [el.slice for el in sub.slice if isinstance(el.slice, cst.Slice)]
    if len(slices) != 2 or any(sl.lower is None or sl.upper is None or sl.step is not None for sl in slices):
        raise NotApplicable(
            f"`{view.snippet(sub, 50)}` (line {view.line(sub)}) is not a two-dimensional tile"
        )
    for el in sub.slice:
        if isinstance(el.slice, cst.Index) and any(
            view.is_call(n, "nl", "arange") for n in walk(el.slice.value)
        ):
            raise NotApplicable(f"`{view.snippet(sub, 50)}` (line {view.line(sub)}) mixes slices and grids")


def _check_tiles_made_inside(view: KernelView, loop: Loop, buffers: set[str]) -> None:
    """A tile made outside the loop would keep its old shape and not line up with the folded axis."""
    for name in sorted(names_in(loop.node) - buffers):
        if memory_of(view, name) not in ("sbuf", "psum"):
            continue
        for stmt in view.simple_statements():
            if name in view.access(stmt).rebinds and not view.contains(loop.node, stmt):
                raise NotApplicable(
                    f"the tile {name} is made outside the loop (line {view.line(stmt)}): "
                    "it would not line up with the folded axis"
                )


def _check_tile_axes(view: KernelView, sub: cst.Subscript) -> None:
    """The last two elements index the tile: partition grid `[:, None]`, free grid `[None, :]`."""
    if len(sub.slice) < 3:
        raise NotApplicable(f"`{view.snippet(sub, 50)}` (line {view.line(sub)}) has no block or tensor index")
    for element, wanted in ((sub.slice[-2].slice, 0), (sub.slice[-1].slice, 1)):
        if not isinstance(element, cst.Index):
            raise NotApplicable(
                f"`{view.snippet(sub, 50)}` (line {view.line(sub)}) indexes a tile with a slice"
            )
        grids = [
            n
            for n in walk(element.value)
            if isinstance(n, cst.Subscript) and view.is_call(n.value, "nl", "arange")
        ]
        if not grids:
            raise NotApplicable(
                f"`{view.snippet(sub, 50)}` (line {view.line(sub)}) has no arange grid on a tile axis"
            )
        for grid in grids:
            positions = [i for i, el in enumerate(grid.slice) if isinstance(el.slice, cst.Slice)]
            if positions != [wanted] or len(grid.slice) != 2:
                raise NotApplicable(
                    f"an arange grid of `{view.snippet(sub, 50)}` is not on its own tile axis"
                )


def _allocates(view: KernelView, stmt: cst.CSTNode | None, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == name
        and view.is_call(small.value, "nl", "ndarray")
    )


def _allocation(view: KernelView, name: str) -> cst.Call | None:
    found = [s for s in view.simple_statements() if _allocates(view, s, name)]
    if len(found) != 1:
        return None
    call = found[0].body[0].value  # type: ignore[attr-defined]
    shape = argument(call, 0, "shape")
    if not isinstance(shape, cst.Tuple) or len(shape.elements) < 2:
        return None
    par = shape.elements[-2].value
    if not (isinstance(par, cst.Call) and (dotted(par.func) or "").endswith("par_dim")):
        return None
    return call


def _gridded(view: KernelView, sub: cst.Subscript, position: int, factor: int, block: str) -> cst.Subscript:
    """`x[j, r0:r1, c0:c1]` as `x[F*j_blk + arange(F), r0 + arange(P), c0 + arange(C)]` grids of a
    [P, F, C] tile."""
    nl = view.alias_for("nl")
    shapes = ("[:, None, None]", "[None, None, :]")
    elements = []
    axis = 0
    for i, el in enumerate(sub.slice):
        index = el.slice
        if i == position:
            text = f"{factor} * {block} + {nl}.arange({factor})[None, :, None]"
        elif isinstance(index, cst.Slice):
            assert index.lower is not None and index.upper is not None
            extent = slice_extent(view, index)
            lower = view.code(index.lower)
            if extent is not None:
                size = str(extent)
            elif view.eval_int(index.lower) == 0:
                size = view.code(index.upper)
            else:
                size = f"{view.code(index.upper)} - ({lower})"
            grid = f"{nl}.arange({size}){shapes[axis]}"
            text = grid if view.eval_int(index.lower) == 0 else f"{lower} + {grid}"
            axis += 1
        else:
            elements.append(el)
            continue
        elements.append(el.with_changes(slice=cst.Index(cst.parse_expression(text))))
    return sub.with_changes(slice=elements)


def _render(view: KernelView, fold: _Fold, factor: int) -> str:
    loop = fold.loop
    var = loop.var
    taken = {n.value for n in walk(view.module) if isinstance(n, cst.Name)}
    block = f"{var}_blk"
    while block in taken:
        block += "_"
    nl = view.alias_for("nl")
    fold_grid = cst.parse_expression(f"{nl}.arange({factor})[None, :, None]")
    edits: dict[int, object] = {}

    def three_d(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Subscript)
        first, second = updated.slice
        return updated.with_changes(slice=[first, cst.SubscriptElement(cst.Index(cst.Name("None"))), second])

    for grid in fold.grids:
        edits[id(grid)] = three_d

    def hbm_access(position: int) -> Callable[[cst.CSTNode], cst.CSTNode]:
        def edit(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Subscript)
            index = cst.parse_expression(f"{factor} * {block} + {nl}.arange({factor})[None, :, None]")
            elements = list(updated.slice)
            elements[position] = elements[position].with_changes(slice=cst.Index(index))
            return updated.with_changes(slice=elements)

        return edit

    def sbuf_access(position: int) -> Callable[[cst.CSTNode], cst.CSTNode]:
        def edit(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Subscript)
            elements = list(updated.slice)
            elements[position] = elements[position].with_changes(slice=cst.Index(cst.Name(block)))
            elements.insert(len(elements) - 1, cst.SubscriptElement(cst.Index(fold_grid)))
            return updated.with_changes(slice=elements)

        return edit

    for sub, position in fold.hbm:
        edits[id(sub)] = hbm_access(position)
    for sub, position in fold.sliced:
        edits[id(sub)] = _gridded(view, sub, position, factor, block)
    for sub, position in fold.sbuf:
        edits[id(sub)] = sbuf_access(position)
    for call in fold.allocations:
        shape = argument(call, 0, "shape")
        assert isinstance(shape, cst.Tuple)
        elements = list(shape.elements)
        elements.insert(
            len(elements) - 1,
            cst.Element(
                cst.Integer(str(factor)), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            ),
        )
        edits[id(shape)] = shape.with_changes(elements=elements)
    trip = loop.trip_expr
    assert trip is not None
    text = view.code(trip)
    paren = text if text.replace("_", "").isalnum() else f"({text})"
    edits[id(trip)] = cst.parse_expression(f"{paren} // {factor}")
    prefix: list[cst.BaseStatement] = []
    if view.eval_int(trip) is None:
        prefix.append(
            cst.parse_statement(
                f'assert {paren} % {factor} == 0, "the folded {var} loop needs a multiple of {factor}"\n'
            )
        )

    def header(updated: cst.CSTNode) -> object:
        assert isinstance(updated, cst.For)
        node = updated.with_changes(target=cst.Name(block))
        return [*prefix, node] if prefix else node

    edits[id(loop.node)] = header
    return view.render(edits)
