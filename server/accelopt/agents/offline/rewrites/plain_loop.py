"""What the rewrites that reshape a loop's iterations (blocking it, folding it into a free axis)
both need of the loop before they look further."""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, Loop
from accelopt.agents.offline.rewrites.errors import NotApplicable


def require_plain_loop(view: KernelView, loop: Loop) -> cst.BaseExpression:
    """The loop's trip count; NotApplicable unless `loop` is an affine range from 0 in steps of
    1 whose body holds no control flow (iterations that may depend on each other, or run
    conditionally, cannot be regrouped)."""
    if loop.kind != "affine":
        raise NotApplicable(f"the {loop.var} loop is {loop.kind}: its iterations may depend on each other")
    if loop.trip_expr is None:
        raise NotApplicable(f"the {loop.var} loop has a start or step")
    for stmt in view.statements(loop.node):
        if isinstance(stmt, (cst.If, cst.While, cst.With, cst.Try)):
            raise NotApplicable(f"the loop holds control flow at line {view.line(stmt)}")
    return loop.trip_expr
