"""Double-buffer a load: give the tile it fills a buffer per iteration of its loop.

A tile declared once before a loop and refilled by a DMA load at the top of every iteration
(`buf = nl.ndarray(...)` then `for i in nl.sequential_range(T): buf[...] = nl.load(x[i...])`)
is one buffer for the whole loop: the load of iteration i+1 must wait until iteration i's
compute has read it (write-after-read), so DMA and compute take turns instead of overlapping.
Declared inside the loop body the tile is one logical buffer per iteration, and the compiler
rotates them through a pool of physical buffers (two in SBUF, NKI_NOTES §4): iteration i+1's
load fills the second buffer while iteration i computes on the first. The declaration moves to
just before the load; the text of the loop is otherwise unchanged.

Legal when every other use of the tile is inside the loop, the first statement of the loop body
to touch the tile is a DMA load (or `dma_copy`) that overwrites all of it, nothing reads the tile
as a whole value that could outlive the iteration (`y = buf`), and the declaration's shape and
dtype do not change inside the loop. Then no iteration reads what an earlier one wrote, so a
fresh buffer per iteration computes the same values. Only `nl.ndarray` declarations move: a
`nl.zeros` tile would be zero-filled again every iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.affine import linear_form
from accelopt.agents.offline.facts import memory_of_expr
from accelopt.agents.offline.kernel_ir import KernelView, Loop, argument, base_name, dotted, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


@dataclass
class _Move:
    alloc: cst.SimpleStatementLine
    fill: cst.SimpleStatementLine
    loop: Loop


class DoubleBufferLoad(Rewrite):
    name = "double_buffer_load"
    prior = 0.7
    summary = "declare a tile refilled by a load each iteration inside the loop, so loads overlap compute"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            declared = _declaration(view, stmt)
            if declared is None:
                continue
            name, call = declared
            outcome = _plan(view, stmt, name, call)
            if outcome is None:
                continue
            if isinstance(outcome, tuple):
                loop, reason = outcome
                sid = site_id(self.name, view.line(stmt), loop.line)
                found.append(
                    Refusal(
                        self.name,
                        sid,
                        view.line(stmt),
                        f"cannot give {name} a buffer per iteration of the {loop.var} loop: {reason}",
                    )
                )
                continue
            line = view.line(outcome.fill)
            found.append(
                Site(
                    self.name,
                    site_id(self.name, view.line(stmt), outcome.loop.line),
                    line,
                    f"declare {name} inside the {outcome.loop.var} loop so its load double-buffers",
                    description=(
                        f"{name} (line {view.line(stmt)}) is one buffer refilled by the load at line {line} "
                        f"in every {outcome.loop.var} iteration: the next load waits until this "
                        "iteration's compute has read it. Declared in the loop it gets a buffer per "
                        "iteration, and the compiler alternates two, so loads overlap compute."
                    ),
                    relieves=("hbm", "latency"),
                    payload=outcome,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        move: _Move = site.payload
        moved = move.alloc.with_changes(leading_lines=())
        return view.render({id(move.alloc): None, id(move.fill): [moved, move.fill]})


def _declaration(view: KernelView, stmt: cst.SimpleStatementLine) -> tuple[str, cst.Call] | None:
    """(name, call) for `name = nl.ndarray(...)` declaring an SBUF tile."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    call = assign.value
    if not view.is_call(call, "nl", "ndarray"):
        return None
    assert isinstance(call, cst.Call)
    if memory_of_expr(view, call) != "sbuf":
        return None
    return assign.targets[0].target.value, call


def _plan(
    view: KernelView, alloc: cst.SimpleStatementLine, name: str, call: cst.Call
) -> _Move | tuple[Loop, str] | None:
    """The move, a (loop, reason) refusal, or None when the tile is not refilled by a load in
    a loop around all its uses (nothing to double-buffer)."""
    uses = [u for u in view.name_uses(name) if view.statement_of(u) is not alloc]
    if not uses:
        return None
    around = [lp for lp in view.loops if all(view.contains(lp.node, u) for u in uses)]
    if not around:
        return None
    loop = max(around, key=lambda lp: lp.depth())
    if view.contains(loop.node, alloc):
        return None  # already one buffer per iteration
    loop_vars = {lp.var for lp in view.loops}
    for use in uses:
        parent = view.parent(use)
        if isinstance(parent, cst.Subscript) and names_in(parent.slice[0]) & loop_vars:
            return None  # block-indexed by a loop: each block is a buffer of its own already
    first = next((s for s in loop.body if name in _touched(view, s)), None)
    if not isinstance(first, cst.SimpleStatementLine) or not _is_load_into(view, first, name):
        if any(_is_load_into(view, s, name) for s in view.simple_statements(loop.node)):
            return loop, f"the loop body touches {name} before the load that refills it"
        return None
    if not _overwrites_all(view, first, name, call):
        return loop, f"the load at line {view.line(first)} fills only part of {name}"
    for use in uses:
        parent = view.parent(use)
        if isinstance(parent, cst.Assign) and parent.value is use:
            return loop, f"{name} is bound to another name at line {view.line(use)}"
    changed = names_in(call) & view.access(loop.node).writes
    if changed:
        return loop, f"its shape or dtype reads {sorted(changed)[0]}, which changes in the loop"
    if loop.trip_expr is not None and view.eval_int(loop.trip_expr) == 1:
        return None
    return _Move(alloc, first, loop)


def _touched(view: KernelView, stmt: cst.BaseStatement) -> set[str]:
    acc = view.access(stmt)
    return acc.reads | acc.writes


def _load_of(view: KernelView, stmt: cst.SimpleStatementLine) -> tuple[cst.BaseExpression, cst.Call] | None:
    """(destination, DMA call) of `dst[...] = nl.load(...)` or `nisa.dma_copy(dst=..., src=...)`."""
    if len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and view.is_call(small.value, "nl", "load"):
        assert isinstance(small.value, cst.Call)
        return small.targets[0].target, small.value
    if isinstance(small, cst.Expr) and view.is_call(small.value, "nisa", "dma_copy"):
        assert isinstance(small.value, cst.Call)
        dst = argument(small.value, 0, "dst")
        if dst is not None:
            return dst, small.value
    return None


def _is_load_into(view: KernelView, stmt: cst.BaseStatement, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    found = _load_of(view, stmt)
    if found is None or base_name(found[0]) != name:
        return False
    src = argument(found[1], 0, "src") if view.is_call(found[1], "nl", "load") else argument(found[1], 1, "src")
    return src is not None and name not in names_in(src)


def _overwrites_all(view: KernelView, stmt: cst.SimpleStatementLine, name: str, call: cst.Call) -> bool:
    """Whether the load writes every element of the declared tile."""
    found = _load_of(view, stmt)
    assert found is not None
    dst = found[0]
    if isinstance(dst, cst.Name):
        return True
    if not isinstance(dst, cst.Subscript) or not isinstance(dst.value, cst.Name):
        return False
    shape = argument(call, 0, "shape")
    if not isinstance(shape, cst.Tuple):
        return False
    dims = [el.value for el in shape.elements]
    index = [el.slice for el in dst.slice]
    if len(index) == 1 and isinstance(index[0], cst.Index) and isinstance(index[0].value, cst.Ellipsis):
        return True
    if len(index) != len(dims):
        return False
    return all(_covers(view, element, dim) for element, dim in zip(index, dims))


def _covers(view: KernelView, element: cst.BaseSlice, dim: cst.BaseExpression) -> bool:
    if isinstance(dim, cst.Call) and (dotted(dim.func) or "").endswith("par_dim") and dim.args:
        dim = dim.args[0].value
    if isinstance(element, cst.Slice):
        if element.step is not None:
            return False
        lower_ok = element.lower is None or view.eval_int(element.lower) == 0
        if element.upper is None:
            return lower_ok
        same = "".join(view.code(element.upper).split()) == "".join(view.code(dim).split())
        upper = view.eval_int(element.upper)
        return lower_ok and (same or (upper is not None and upper == view.eval_int(dim)))
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is None or form.terms or form.const != 0 or len(form.aranges) != 1:
            return False
        grid = form.aranges[0]
        return grid.coefficient == 1 and grid.size == view.eval_int(dim)
    return False
