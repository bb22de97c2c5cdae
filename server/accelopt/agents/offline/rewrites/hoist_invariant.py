"""Hoist a loop-invariant load, transpose or computation out of the loop around it.

A statement directly in a loop body is invariant when nothing it reads changes in the loop, the
value it writes is written by no other statement there, and nothing in the loop reads that value
before the statement runs. Moving it in front of the loop computes the same value once instead of
once per iteration. A buffer the statement fills (compiler-generated style, `buf[...] = ...`) and
that is allocated in the same loop body moves out with it.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import ALLOCATORS
from accelopt.agents.offline.kernel_ir import KernelView, Loop, argument, base_name, dotted, keyword
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id

# Calls that build shapes, index grids or empty buffers: no hardware work to save.
NON_WORK = {*ALLOCATORS, "par_dim", "arange", "mgrid", "ds", "tile_size"}
TRANSPOSES = {"nc_transpose", "transpose", "load_transpose2d"}


def describe_work(view: KernelView, value: cst.BaseExpression, target: str) -> tuple[str, str] | None:
    """(kind, words) for what a statement computes: ('load', 'the load of w') ..., None if it is
    only an allocation or does no hardware work."""
    calls = view.calls_in(value)
    if not calls:
        return None
    for call in calls:
        callee = view.callee(call)
        is_transpose = callee.name in TRANSPOSES or (
            callee.name == "nc_matmul"
            and (kw := keyword(call, "is_transpose")) is not None
            and dotted(kw.value) == "True"
        )
        if is_transpose:
            source = base_name(argument(call, 0, "data") or call.args[0].value) if call.args else None
            return "transpose", f"the transpose of {source or target}"
    for call in calls:
        callee = view.callee(call)
        if callee.namespace == "nl" and callee.name == "load":
            src = argument(call, 0, "src")
            return "load", f"the load of {base_name(src) if src is not None else target}"
    if not any(
        view.callee(c).namespace in ("nl", "nisa") and view.callee(c).name not in NON_WORK for c in calls
    ):
        return None
    return "compute", f"the computation of {target}"


class HoistInvariant(Rewrite):
    name = "hoist_invariant"
    prior = 0.4
    summary = "move a loop-invariant load, transpose or computation in front of its loop"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            found.extend(self._loop_sites(view, loop))
        return found

    def _loop_sites(self, view: KernelView, loop: Loop) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        analysis = _LoopInvariance(view, loop)
        for stmt in loop.body:
            assign = _single_assign(stmt)
            if assign is None:
                continue
            written = base_name(assign.targets[0].target)
            if written is None:
                continue
            work = describe_work(view, assign.value, written)
            if work is None:
                continue
            kind, words = work
            line = view.line(stmt)
            sid = site_id(self.name, line, loop.line)
            title = f"hoist {words} out of the {loop.var} loop"
            place = self.place(sid, line, title)
            outcome = analysis.closure(stmt)
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            if len(outcome) >= len(loop.body):
                found.append(place.refused("it is all the loop does"))
                continue
            relieves = (
                ("hbm",) if kind == "load" else ("tensor",) if kind == "transpose" else ("vector", "scalar")
            )
            extra = len([m for m in outcome if _single_assign(m) is not None and m is not stmt])
            found.append(
                place.site(
                    description=(
                        f"`{view.snippet(stmt)}` (line {line}) gives the same value in every iteration of "
                        f"the {loop.var} loop (line {loop.line}); compute it once before the loop"
                        + (f" together with the {extra} statement(s) it needs." if extra else ".")
                    ),
                    relieves=relieves,
                    payload=(loop, outcome),
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        loop, moved = site.payload
        return view.render(hoist_edits(loop, moved))


def _single_assign(stmt: cst.BaseStatement) -> cst.Assign | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return small
    return None


class _LoopInvariance:
    """Which statements of one loop body compute the same value in every iteration, and what
    else must move out with each (the invariant statements it reads, a buffer's allocation)."""

    def __init__(self, view: KernelView, loop: Loop) -> None:
        self.view = view
        self.loop = loop
        self.body = loop.body
        self.loop_writes = view.access(loop.node).writes
        self.accesses = [view.access(s) for s in self.body]
        self.memo: dict[int, list[cst.BaseStatement] | str] = {}

    def position(self, stmt: cst.BaseStatement) -> int:
        return next(i for i, s in enumerate(self.body) if s is stmt)

    def writers(self, name: str) -> list[int]:
        return [i for i, a in enumerate(self.accesses) if name in a.writes]

    def closure(self, stmt: cst.BaseStatement, depth: int = 0) -> list[cst.BaseStatement] | str:
        key = id(stmt)
        if key not in self.memo:
            self.memo[key] = "it depends on itself"  # cycle guard
            self.memo[key] = self._closure(stmt, depth)
        return self.memo[key]

    def _closure(self, stmt: cst.BaseStatement, depth: int) -> list[cst.BaseStatement] | str:
        view, loop = self.view, self.loop
        assign = _single_assign(stmt)
        if assign is None:
            return "it is not a single assignment"
        if view.destination_of_calls(assign.value):
            return "it writes memory through a call argument"
        position = self.position(stmt)
        access = self.accesses[position]
        written = base_name(assign.targets[0].target)
        assert written is not None
        needed: set[int] = {position}
        # A buffer filled through `buf[...] = ...` may be allocated earlier in this loop body.
        if isinstance(assign.targets[0].target, cst.Subscript):
            for index in self.writers(written):
                if index == position:
                    continue
                other = self.body[index]
                if index < position and _is_invariant_allocation(view, other, written, self.loop_writes):
                    needed.add(index)
                    continue
                return f"{written} is also written at line {view.line(other)}"
        else:
            for index in self.writers(written):
                if index != position:
                    return f"{written} is also written at line {view.line(self.body[index])}"
        if loop.var in access.reads:
            return f"it depends on the loop variable {loop.var}"
        for name in sorted((access.reads - {written}) & self.loop_writes):
            producers = self.writers(name)
            if len(producers) != 1 or producers[0] >= position or depth > 8:
                return f"it reads {name}, which changes inside the loop"
            inner = self.closure(self.body[producers[0]], depth + 1)
            if isinstance(inner, str):
                return f"it reads {name}, which changes inside the loop"
            needed |= {self.position(s) for s in inner}
        moved_writes = set().union(*(self.accesses[i].writes for i in needed))
        for index in range(position):
            if index in needed:
                continue
            if self.accesses[index].reads & moved_writes:
                return f"{written} is read at line {view.line(self.body[index])} before it is computed"
        return [self.body[i] for i in sorted(needed)]


def _is_invariant_allocation(
    view: KernelView, stmt: cst.BaseStatement, name: str, loop_writes: set[str]
) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Call):
        return False
    if view.callee(small.value).name not in ALLOCATORS:
        return False
    return not ((view.access(stmt).reads - {name}) & loop_writes)


def hoist_edits(loop: Loop, moved: list[cst.BaseStatement]) -> dict[int, object]:
    """Edits that move `moved` (in order) from inside the loop to just in front of it."""
    edits: dict[int, object] = {id(s): None for s in moved}
    edits[id(loop.node)] = lambda updated: [*moved, updated]
    return edits
