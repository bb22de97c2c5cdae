"""Which side of a binary elementwise op is the scalar (or [P, 1] column) operand."""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import is_scalar
from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import Binary, is_column_or_scalar

COMMUTATIVE = {"add", "multiply", "maximum", "minimum"}


def scalar_operand(
    view: KernelView, op: Binary
) -> tuple[cst.BaseExpression, cst.BaseExpression, bool] | None:
    """(tile operand, scalar operand, reverse) for a binary op with exactly one scalar/column side."""
    # A number beats a column: `column * 2.0` scales the column tile by the number.
    for check in (is_scalar, is_column_or_scalar):
        left_scalar = check(view, op.left)
        right_scalar = check(view, op.right)
        if right_scalar and not left_scalar:
            return op.left, op.right, False
        if left_scalar and not right_scalar:
            return op.right, op.left, op.op not in COMMUTATIVE
    return None
