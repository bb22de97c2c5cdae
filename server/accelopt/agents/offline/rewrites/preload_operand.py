"""Load an operand once for a whole loop instead of once per iteration of it.

A load nested in an inner loop (`for k: a = nl.load(lhsT[k-tile, m-tile])`) can be invariant in
an outer loop it sits in (the `n` loop between `m` and `k`): then every `n` iteration reloads the
same tiles from HBM. This rewrite moves the load in front of that outer loop, inside a copy of
the loops it does depend on, into a buffer with one block per iteration of those loops; the
original place reads the buffer. Compiler-generated kernels already keep such tiles in a
block-indexed buffer: the load moves and the block index of the skipped loop becomes 0.

Legal when the load reads nothing the outer loop changes (other than the copied loops'
variables and simple index definitions like `cols = slice(...)` that move with it), the loaded
value is read only in the innermost loop, and the copied loop ranges do not change in the loop.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import slice_extent
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    argument,
    assign_target,
    base_name,
    names_in,
    walk,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Resident, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

SBUF_PARTITION_BYTES = 180_224  # usable SBUF bytes per partition on Trainium1 (NKI_NOTES §3)
# The key under which _plan hands the site's Resident block to _sites_for beside the edits.
_RESIDENT = "resident"


class PreloadOperand(Rewrite):
    name = "preload_operand"
    prior = 1.0
    summary = "load an operand once before an outer loop it does not depend on, into a block buffer"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            assign = _load_assign(view, stmt)
            loads: list[cst.Assign | cst.Call] = [assign] if assign is not None else [*_inline_loads(view, stmt)]
            for load in loads:
                found.extend(self._sites_for(view, stmt, load))
        return found

    def _sites_for(
        self, view: KernelView, stmt: cst.SimpleStatementLine, load: cst.Assign | cst.Call
    ) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        call = load.value if isinstance(load, cst.Assign) else load
        assert isinstance(call, cst.Call)  # _load_assign keeps only `name = <load call>`
        inner = view.loop_of_node(stmt)
        if inner is None or not any(s is stmt for s in inner.body):
            return found
        chain: list[Loop] = []
        current = inner.parent
        while current is not None:
            chain.append(current)
            current = current.parent
        for outer in chain:
            outcome = _plan(view, stmt, load, inner, outer)
            if outcome is None:
                continue
            line = view.line(stmt)
            src = base_name(argument(call, 0, "src") or call) or "operand"
            title = (
                f"load {src} once before the {outer.var} loop instead of in every {outer.var} iteration"
            )
            sid = (
                site_id(self.name, line, outer.line)
                if isinstance(load, cst.Assign)
                else site_id(self.name, view.where(load), outer.line)
            )
            place = self.place(sid, line, title)
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            resident = outcome.pop(_RESIDENT, None)  # type: ignore[call-overload]
            found.append(
                place.site(
                    description=(
                        f"The load at line {line} does not depend on {outer.var}: keep its tiles in SBUF "
                        f"across the {outer.var} loop (line {outer.line}) instead of re-reading HBM."
                    ),
                    relieves=("hbm",),
                    payload=outcome,
                    resident=resident if isinstance(resident, Resident) else None,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        return view.render(site.payload)


def _inline_loads(view: KernelView, stmt: cst.SimpleStatementLine) -> list[cst.Call]:
    """`nl.load(...)` calls used directly as operands (`nc_matmul(a, nl.load(w[...]))`)."""
    return [
        c
        for c in view.calls_in(stmt)
        if view.is_call(c, "nl", "load") and isinstance(view.parent(c), cst.Arg)
    ]


def _load_assign(view: KernelView, stmt: cst.SimpleStatementLine) -> cst.Assign | None:
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not view.is_call(assign.value, "nl", "load"):
        return None
    return assign


def _plan(
    view: KernelView, stmt: cst.SimpleStatementLine, load: cst.Assign | cst.Call, inner: Loop, outer: Loop
) -> dict[int, object] | str | None:
    """The edits that preload `stmt` before `outer`, a refusal reason, or None when the load
    depends on `outer` (nothing to gain, nothing to say)."""
    outer_writes = view.access(outer.node).writes
    # Loops strictly inside `outer` down to `inner`, outermost first.
    between: list[Loop] = []
    current: Loop | None = inner
    while current is not None and current is not outer:
        between.insert(0, current)
        current = current.parent
    inline = isinstance(load, cst.Call)
    value = load if isinstance(load, cst.Call) else load.value
    target = None if isinstance(load, cst.Call) else load.targets[0].target
    written = base_name(target) if target is not None else None
    if not inline and written is None:
        return None
    value_reads = names_in(value)

    # Index definitions in the copied loops' bodies that the load needs (`cols = slice(...)`).
    copied_defs: dict[int, list[cst.SimpleStatementLine]] = {}
    needed = set(value_reads)
    defined_by: dict[str, tuple[int, cst.SimpleStatementLine]] = {}
    for level, loop in enumerate(between):
        for body_stmt in loop.body:
            if body_stmt is stmt:
                continue
            acc = view.access(body_stmt)
            for name in acc.rebinds:
                if isinstance(body_stmt, cst.SimpleStatementLine) and len(body_stmt.body) == 1:
                    defined_by[name] = (level, body_stmt)
    frontier = list(needed)
    while frontier:
        name = frontier.pop()
        if name in defined_by:
            level, def_stmt = defined_by[name]
            if view.calls_in(def_stmt) and not all(
                view.callee(c).name in ("slice",) or view.callee(c).namespace == ""
                for c in view.calls_in(def_stmt)
            ):
                return "it reads a value computed inside the loop"
            copied_defs.setdefault(level, [])
            if all(d is not def_stmt for d in copied_defs[level]):
                copied_defs[level].append(def_stmt)
            for dep in view.access(def_stmt).reads - needed:
                needed.add(dep)
                frontier.append(dep)
    # Found from the load backwards (`cols` before the `c0` it is built from): copy them in their
    # source order, or a definition would run before the one it reads (UnboundLocalError).
    for level, defs in copied_defs.items():
        order = {id(s): i for i, s in enumerate(between[level].body)}
        defs.sort(key=lambda d: order.get(id(d), len(order)))
    if outer.var in needed:
        return None
    loop_vars = {lp.var for lp in between}
    kept = [lp for lp in between if lp.var in needed or lp is inner]
    dropped_vars = loop_vars - {lp.var for lp in kept}
    for body_stmt in (s for s in outer.body if isinstance(s, cst.SimpleStatementLine)):
        # a name the outer loop's own body derives from its variable (`cols = slice(j * F, ...)`)
        acc = view.access(body_stmt)
        if acc.rebinds & needed and outer.var in acc.reads:
            return None
    changing = (needed & outer_writes) - loop_vars - set(defined_by)
    if changing:
        return f"it reads {sorted(changing)[0]}, which changes inside the {outer.var} loop"
    if inner.var not in needed:
        return None  # invariant in its own loop: hoist_invariant's job
    for lp in kept:
        if names_in(lp.node.iter) & (outer_writes - {k.var for k in kept}):
            return f"the range of the {lp.var} loop changes inside the {outer.var} loop"
        if lp.trip_expr is None:
            return f"the {lp.var} loop has a start or step"

    if inline:
        inline_edits: dict[int, object] = {}
        parts = _tile_edits(view, stmt, value, None, kept, inline_edits)
        if isinstance(parts, str):
            return parts
        new_alloc, new_moved = parts
        inline_nest = _nest(kept, copied_defs, between, new_moved)
        inline_edits[id(outer.node)] = lambda updated: [*new_alloc, inline_nest, updated]
        inline_edits[_RESIDENT] = _block_of_tiles(view, value, kept)  # type: ignore[index]
        return inline_edits
    assert isinstance(load, cst.Assign) and written is not None
    assign = load
    allocation = _allocation(view, written) if isinstance(target, cst.Subscript) else None
    uses = [
        u
        for u in view.name_uses(written)
        if view.statement_of(u) is not stmt and view.statement_of(u) is not allocation
    ]
    if not all(view.contains(inner.node, u) for u in uses) or not uses:
        return f"{written} is used outside the innermost loop"

    edits: dict[int, object] = {}
    if isinstance(target, cst.Subscript):
        reason = _buffer_edits(
            view, stmt, assign, target, written, outer, uses, dropped_vars | {outer.var}, edits
        )
        if reason is not None:
            return reason
        moved = edits.pop("moved")  # type: ignore[call-overload]
        alloc: list[cst.BaseStatement] = []
        edits[_RESIDENT] = _block_of_buffer(view, written, kept)  # type: ignore[index]
    else:
        reason_or_parts = _tile_edits(view, stmt, assign.value, written, kept, edits)
        if isinstance(reason_or_parts, str):
            return reason_or_parts
        alloc, moved = reason_or_parts
        edits[_RESIDENT] = _block_of_tiles(view, assign.value, kept)  # type: ignore[index]
    nest = _nest(kept, copied_defs, between, moved)
    edits[id(outer.node)] = lambda updated: [*alloc, nest, updated]
    return edits


def _buffer_edits(
    view: KernelView,
    stmt: cst.SimpleStatementLine,
    assign: cst.Assign,
    target: cst.Subscript,
    buffer: str,
    outer: Loop,
    uses: list[cst.Name],
    zeroed: set[str],
    edits: dict[int, object],
) -> str | None:
    if view.contains(outer.node, _allocation(view, buffer) or outer.node):
        return f"{buffer} is allocated inside the {outer.var} loop"
    index_text = "".join(view.code(target).split())
    readers: list[cst.Subscript] = []
    for use in uses:
        parent = view.parent(use)
        if not isinstance(parent, cst.Subscript) or "".join(view.code(parent).split()) != index_text:
            return f"{buffer} is read with another index than it is written"
        readers.append(parent)

    def zero(node: cst.Subscript) -> cst.Subscript:
        return node.visit(_ZeroNames(zeroed))  # type: ignore[return-value]

    new_target = zero(target)
    moved = stmt.with_changes(body=[assign.with_changes(targets=[cst.AssignTarget(new_target)])])
    for reader in readers:
        edits[id(reader)] = zero(reader)
    edits[id(stmt)] = None
    edits["moved"] = moved  # type: ignore[index]
    return None


def _tile_edits(
    view: KernelView,
    stmt: cst.SimpleStatementLine,
    load: cst.BaseExpression,
    name: str | None,
    kept: list[Loop],
    edits: dict[int, object],
) -> tuple[list[cst.BaseStatement], cst.SimpleStatementLine] | str:
    """A block buffer for the loaded tiles; `name = nl.load(...)` (or the inline load when `name`
    is None) becomes a view of the buffer."""
    assert isinstance(load, cst.Call)
    src = argument(load, 0, "src")
    if not isinstance(src, cst.Subscript):
        return "the loaded region is not a subscript"
    extents: list[str] = []
    static_bytes = 4
    for element in src.slice:
        index: cst.BaseSlice | None = element.slice
        if isinstance(index, cst.Index):
            index = _named_slice(view, index.value)
            if index is None:
                continue
        if not isinstance(index, cst.Slice) or index.upper is None:
            return "the loaded region has an open slice"
        size = slice_extent(view, index)
        if size is not None:
            extents.append(str(size))
            static_bytes *= size if len(extents) > 1 else 1
        elif index.lower is None or view.eval_int(index.lower) == 0:
            extents.append(view.code(index.upper))
            static_bytes = 0
        else:
            return "the loaded tile's size is not known from the source"
    if len(extents) != 2:
        return "the loaded tile is not two-dimensional"
    trips = [view.code(lp.trip_expr) for lp in kept if lp.trip_expr is not None]
    for lp in kept:
        trip = view.eval_int(lp.trip_expr) if lp.trip_expr is not None else None
        static_bytes = static_bytes * trip if (trip is not None and static_bytes) else 0
    if static_bytes > SBUF_PARTITION_BYTES // 2:
        return f"the preloaded tiles would need {static_bytes:,} bytes per partition of SBUF"
    taken = {n.value for n in _all_names(view.module)}
    new = f"{name}_all" if name is not None else f"{base_name(src)}_tiles"
    while new in taken:
        new += "_"
    nl = view.alias_for("nl")
    if nl is None:
        raise NotApplicable("the kernel does not import neuronxcc.nki.language")
    table = base_name(src)
    shape = ", ".join([*trips, f"{nl}.par_dim({extents[0]})", extents[1]])
    alloc = cst.parse_statement(f"{new} = {nl}.ndarray(({shape}), dtype={table}.dtype, buffer={nl}.sbuf)\n")
    block = ", ".join([lp.var for lp in kept] + [":", ":"])
    moved = cst.SimpleStatementLine(
        body=[cst.Assign(targets=[cst.AssignTarget(assign_target(f"{new}[{block}]"))], value=load)]
    )
    edits[id(load)] = cst.parse_expression(f"{new}[{block}]")
    return [alloc], moved


def _block_of_tiles(view: KernelView, load: cst.BaseExpression, kept: list[Loop]) -> Resident | None:
    """The block a new buffer holds: one tile (`load`'s free extent) per iteration of the kept
    loops, of the loaded tensor's dtype."""
    if not isinstance(load, cst.Call):
        return None
    src = argument(load, 0, "src")
    if not isinstance(src, cst.Subscript) or len(src.slice) < 2:
        return None
    index: cst.BaseSlice | None = src.slice[-1].slice
    if isinstance(index, cst.Index):
        index = _named_slice(view, index.value)
    if not isinstance(index, cst.Slice) or index.upper is None:
        return None
    size = slice_extent(view, index)
    free: cst.BaseExpression = cst.Integer(str(size)) if size is not None else index.upper
    trips = tuple(lp.trip_expr for lp in kept if lp.trip_expr is not None)
    return Resident(factors=(*trips, free), dtype=f"{base_name(src)}.dtype")


def _block_of_buffer(view: KernelView, buffer: str, kept: list[Loop]) -> Resident | None:
    """The block an existing block-indexed buffer keeps live across the skipped loop: its tile
    (the allocation's last dimension) for every iteration of the kept loops."""
    allocation = _allocation(view, buffer)
    if not isinstance(allocation, cst.SimpleStatementLine) or not isinstance(allocation.body[0], cst.Assign):
        return None
    call = allocation.body[0].value
    if not isinstance(call, cst.Call):
        return None
    shape = argument(call, 0, "shape")
    dtype = argument(call, 1, "dtype")
    if not isinstance(shape, cst.Tuple) or not shape.elements or dtype is None:
        return None
    trips = tuple(lp.trip_expr for lp in kept if lp.trip_expr is not None)
    return Resident(factors=(*trips, shape.elements[-1].value), dtype=view.code(dtype))


def _nest(
    kept: list[Loop],
    copied_defs: dict[int, list[cst.SimpleStatementLine]],
    between: list[Loop],
    moved: cst.SimpleStatementLine,
) -> cst.For:
    """The copy of the kept loops (with the definitions the load needs) around the load."""
    body: list[cst.BaseStatement] = [moved]
    for level in range(len(between) - 1, -1, -1):
        loop = between[level]
        defs = [d.with_changes(leading_lines=()) for d in copied_defs.get(level, [])]
        if any(k is loop for k in kept):
            body = [*defs, *body]
            body = [
                cst.For(
                    target=loop.node.target,
                    iter=loop.node.iter,
                    body=cst.IndentedBlock(body=body),
                )
            ]
        else:
            body = [*defs, *body]
    result = body[-1]
    assert isinstance(result, cst.For)
    if len(body) > 1:  # definitions above the outermost kept loop: fold them inside it
        result = result.with_changes(body=result.body.with_changes(body=[*body[:-1], *result.body.body]))
    return result


def _named_slice(view: KernelView, expr: cst.BaseExpression) -> cst.Slice | None:
    """`cols` bound to `slice(lo, hi)` as the equivalent `lo:hi`, from the binding that reaches
    `expr` (the nearest earlier assignment in the enclosing blocks: a kernel may reuse a name)."""
    if not isinstance(expr, cst.Name):
        return None
    current: cst.CSTNode | None = view.statement_of(expr)
    while current is not None:
        siblings = view.siblings(current) if isinstance(current, cst.BaseStatement) else []
        position = next((i for i, s in enumerate(siblings) if s is current), None)
        for earlier in reversed(siblings[:position] if position is not None else []):
            if expr.value not in view.access(earlier).rebinds:
                continue
            small = earlier.body[0] if isinstance(earlier, cst.SimpleStatementLine) else None
            if (
                isinstance(small, cst.Assign)
                and isinstance(small.value, cst.Call)
                and isinstance(small.value.func, cst.Name)
                and small.value.func.value == "slice"
                and len(small.value.args) == 2
            ):
                return cst.Slice(lower=small.value.args[0].value, upper=small.value.args[1].value)
            return None
        current = next((a for a in view.ancestors(current) if isinstance(a, cst.BaseStatement)), None)
    return None


class _ZeroNames(cst.CSTTransformer):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return cst.Integer("0") if original_node.value in self.names else updated_node


def _allocation(view: KernelView, name: str) -> cst.CSTNode | None:
    for stmt in view.simple_statements():
        if name in view.access(stmt).rebinds:
            return stmt
    return None


def _all_names(module: cst.Module) -> list[cst.Name]:
    return [n for n in walk(module) if isinstance(n, cst.Name)]
