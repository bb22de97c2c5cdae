"""Fuse a scalar operation into the tile-tile operation that consumes it:
`(x * c) + y` -> `nisa.scalar_tensor_tensor(data=x, op0=np.multiply, operand0=c, op1=np.add,
operand1=y)`, one Vector Engine pass instead of a tensor_scalar followed by a tensor_tensor (and
no intermediate tile). `c` is a number or a [P, 1] column; operand order is kept with `reverse`.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import memory_of_expr
from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import (
    Emitter,
    as_binary,
    is_column_or_scalar,
    operations_in,
    removal_edits,
    render_with,
    resolve,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.fuse_scalar_helpers import COMMUTATIVE, scalar_operand


class FuseScalarTensorTensor(Rewrite):
    name = "fuse_scalar_tensor_tensor"
    prior = 0.6
    summary = "fuse a scalar op into the tile-tile op that consumes it (one scalar_tensor_tensor)"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            for expr in operations_in(stmt):
                outer = as_binary(view, expr)
                if (
                    outer is None
                    or is_column_or_scalar(view, outer.left)
                    or is_column_or_scalar(view, outer.right)
                ):
                    continue
                for side, other, y_on_right in (
                    (outer.left, outer.right, False),
                    (outer.right, outer.left, True),
                ):
                    resolved = resolve(view, side)
                    inner = as_binary(view, resolved.expr)
                    step = scalar_operand(view, inner) if inner is not None else None
                    if inner is None or step is None:
                        continue
                    line = view.line(expr)
                    sid = site_id(self.name, view.where(expr))
                    title = f"fuse the {inner.op} by a scalar into the {outer.op} at line {line}"
                    x = step[0]
                    in_psum = [e for e in (x, other) if isinstance(e, (cst.Name, cst.Subscript))]
                    if sum(memory_of_expr(view, e) == "psum" for e in in_psum) > 1:
                        found.append(Refusal(self.name, sid, line, f"cannot {title}: both tiles are in PSUM"))
                        break
                    if inner.kwargs.get("mask") is not None and "mask" not in outer.kwargs:
                        found.append(
                            Refusal(self.name, sid, line, f"cannot {title}: only the inner op is masked")
                        )
                        break
                    found.append(
                        Site(
                            self.name,
                            sid,
                            line,
                            title,
                            description=(
                                "nisa.scalar_tensor_tensor applies a scalar op and a tile-tile op in one Vector "
                                "Engine pass; the separate tensor_scalar and its tile go away."
                            ),
                            relieves=("vector",),
                            payload=(outer, inner, step, other, y_on_right, resolved.definitions),
                        )
                    )
                    break
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        outer, inner, (x, operand, reverse0), other, y_on_right, definitions = site.payload
        emit = Emitter(view)
        np_alias = emit.alias("np")
        kwargs: dict[str, str | cst.BaseExpression] = {
            "data": x,
            "op0": f"{np_alias}.{inner.op}",
            "operand0": operand,
            "op1": f"{np_alias}.{outer.op}",
            "operand1": other,
        }
        if reverse0:
            kwargs["reverse0"] = "True"
        if y_on_right and outer.op not in COMMUTATIVE:
            kwargs["reverse1"] = "True"
        kwargs.update(outer.kwargs)
        new = emit.call(f"{emit.alias('nisa')}.scalar_tensor_tensor", [], kwargs)
        edits = removal_edits(definitions)
        edits[id(outer.node)] = new
        return render_with(view, emit, edits)
