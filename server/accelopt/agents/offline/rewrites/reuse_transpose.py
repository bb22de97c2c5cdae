"""Reuse a transposed operand instead of transposing the same tile again.

When a kernel transposes the same tile twice (`t2 = nisa.nc_transpose(x)` after
`t1 = nisa.nc_transpose(x)`), and neither `x` nor `t1` changes in between, the second Tensor
Engine transpose is redundant: `t2 = t1` names the first result instead.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, base_name, dotted, keyword, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id

TRANSPOSE_CALLS = {("nisa", "nc_transpose"), ("nl", "transpose"), ("nl", "load_transpose2d")}


def is_transpose(view: KernelView, expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    callee = view.callee(expr)
    if (callee.namespace, callee.name) in TRANSPOSE_CALLS:
        return True
    flag = keyword(expr, "is_transpose")
    return callee.name == "nc_matmul" and flag is not None and dotted(flag.value) == "True"


def _transpose_assign(view: KernelView, stmt: cst.BaseStatement) -> cst.Assign | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and is_transpose(view, small.value):
        return small
    return None


def _squash(text: str) -> str:
    return "".join(text.split())


class ReuseTranspose(Rewrite):
    name = "reuse_transpose"
    prior = 0.5
    summary = "reuse an earlier transpose of the same tile instead of transposing it again"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            second = _transpose_assign(view, stmt)
            if second is None:
                continue
            first_stmt = self._earlier(view, stmt, second)
            if first_stmt is None:
                continue
            first, reason = first_stmt
            line = view.line(stmt)
            sid = site_id(self.name, line)
            title = f"reuse the transpose from line {view.line(first)} at line {line}"
            if reason is not None:
                found.append(Refusal(self.name, sid, line, f"cannot {title}: {reason}"))
                continue
            found.append(
                Site(
                    self.name,
                    sid,
                    line,
                    title,
                    description=(
                        f"Line {line} transposes the same tile as line {view.line(first)} and nothing changed "
                        "in between; name the earlier result instead of redoing it on the Tensor Engine."
                    ),
                    relieves=("tensor",),
                    payload=(stmt, second, first),
                )
            )
        return found

    def _earlier(
        self, view: KernelView, stmt: cst.SimpleStatementLine, second: cst.Assign
    ) -> tuple[cst.SimpleStatementLine, str | None] | None:
        """The nearest earlier statement in the same block computing the same transpose."""
        siblings = view.siblings(stmt)
        position = next(i for i, s in enumerate(siblings) if s is stmt)
        operands = names_in(second.value)
        for index in range(position - 1, -1, -1):
            candidate = siblings[index]
            first = _transpose_assign(view, candidate)
            if first is None or _squash(view.code(first.value)) != _squash(view.code(second.value)):
                continue
            assert isinstance(candidate, cst.SimpleStatementLine)  # _transpose_assign found one
            target_expr = first.targets[0].target
            target = base_name(target_expr)
            if target is None:
                return candidate, "the earlier result has no name"
            kept = names_in(target_expr) | operands  # the result, its index and the operand
            for between in siblings[index + 1 : position]:
                written = view.access(between).writes & kept
                if written:
                    return candidate, f"{sorted(written)[0]} changes in between"
            return candidate, None
        return None

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        _, second, first = site.payload
        target = first.body[0].targets[0].target
        return view.render({id(second.value): cst.parse_expression(view.code(target))})
