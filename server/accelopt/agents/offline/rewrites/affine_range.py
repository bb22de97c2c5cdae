"""Declare a loop's iterations independent: `range`/`nl.sequential_range` -> `nl.affine_range`.

An affine loop lets the compiler overlap iterations (and keep several buffers in flight); a
sequential one forces each iteration to wait for the previous. The change is legal only when no
iteration reads what an earlier one wrote: every name the body rebinds is written before it is
read in the same iteration, and every tensor written from inside the body either is created in
the body or is written at locations that move with the loop variable (PSUM accumulation with
`+=` is the one loop-carried update NKI allows in an affine loop).
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.affine import linear_form
from accelopt.agents.offline.facts import memory_of
from accelopt.agents.offline.kernel_ir import KernelView, Loop, base_name, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


class AffineRange(Rewrite):
    name = "affine_range"
    prior = 0.3
    summary = "turn a sequential loop whose iterations are independent into nl.affine_range"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            if loop.kind != "sequential":
                continue
            sid = site_id(self.name, loop.line)
            title = f"run the {loop.var} loop as nl.affine_range"
            place = self.place(sid, loop.line, title)
            reason = _dependence(view, loop)
            if reason is not None:
                found.append(place.refused(reason))
                continue
            found.append(
                place.site(
                    description=(
                        f"No iteration of the {loop.var} loop (line {loop.line}) reads what another wrote, "
                        "so the compiler may overlap them."
                    ),
                    relieves=("latency", "hbm", "vector"),
                    payload=loop,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        loop: Loop = site.payload
        nl_alias = view.alias_for("nl")
        if nl_alias is None:
            raise cst_missing("nl")
        func = cst.Attribute(value=cst.Name(nl_alias), attr=cst.Name("affine_range"))
        return view.render({id(loop.range_call.func): func})


def cst_missing(namespace: str) -> Exception:
    from accelopt.agents.offline.rewrites.errors import NotApplicable

    return NotApplicable(f"the kernel does not import neuronxcc.nki.language (as {namespace})")


def _dependence(view: KernelView, loop: Loop) -> str | None:
    """Why iterations depend on each other, or None."""
    body_statements = list(view.statements(loop.node))
    defined: set[str] = {loop.var}
    inner_vars = {lp.var for lp in view.inner_loops(loop)}
    defined |= inner_vars
    local_tensors: set[str] = set()
    for stmt in body_statements:
        if not isinstance(stmt, cst.SimpleStatementLine):
            if isinstance(stmt, (cst.If, cst.While)):
                missing = (names_in(stmt.test) & view.access(loop.node).rebinds) - defined
                if missing:
                    return f"{sorted(missing)[0]} is read before it is set in the iteration"
            continue
        for small in stmt.body:
            acc = view.access(small)
            carried = (acc.reads & view.access(loop.node).rebinds) - defined
            if carried:
                name = sorted(carried)[0]
                return f"{name} carries a value from one iteration to the next (line {view.line(stmt)})"
            for name in acc.rebinds:
                defined.add(name)
                local_tensors.add(name)
            for name in acc.mutates - local_tensors:
                reason = _external_write(view, loop, small, name)
                if reason is not None:
                    return f"{reason} (line {view.line(stmt)})"
    return None


def _external_write(view: KernelView, loop: Loop, small: cst.CSTNode, name: str) -> str | None:
    """A write to a tensor that outlives the iteration must land somewhere new each iteration."""
    if isinstance(small, cst.AugAssign):
        if (memory_of(view, name) == "psum" and view.is_call(small.value, "nisa", "nc_matmul")) or (
            memory_of(view, name) == "psum" and view.is_call(small.value, "nl", "matmul")
        ):
            return None
        return f"{name} is accumulated across iterations outside PSUM"
    targets: list[cst.BaseExpression] = []
    if isinstance(small, cst.Assign):
        targets = [t.target for t in small.targets]
    targets += view.destination_of_calls(small)
    for target in targets:
        if base_name(target) != name:
            continue
        if not isinstance(target, cst.Subscript):
            return f"{name} is written whole in every iteration"
        if not _moves_with(view, target, loop.var):
            return f"every iteration writes the same part of {name}"
    # A read of the same tensor sees another iteration's write unless it reads exactly the
    # locations this iteration writes (the same index expression).
    written_at = {"".join(view.code(t).split()) for t in targets if isinstance(t, cst.Subscript)}
    own = view.statement_of(small)
    for stmt in view.simple_statements(loop.node):
        if stmt is own or name not in view.access(stmt).reads:
            continue
        for use in view.name_uses(name, stmt):
            reader = view.parent(use)
            if not isinstance(reader, cst.Subscript) or "".join(view.code(reader).split()) not in written_at:
                return f"{name} is read at other locations than this iteration writes"
    return None


def _moves_with(view: KernelView, target: cst.Subscript, var: str) -> bool:
    for element in target.slice:
        index = element.slice
        parts: list[cst.BaseExpression] = []
        if isinstance(index, cst.Index):
            parts = [index.value]
        elif isinstance(index, cst.Slice) and index.lower is not None:
            parts = [index.lower]
        for part in parts:
            form = linear_form(view, part)
            if form is not None and form.coefficient(var) != 0:
                return True
            if form is None and var in names_in(part):
                return False
    return False
