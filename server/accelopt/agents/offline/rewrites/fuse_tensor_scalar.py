"""Fuse two scalar operations on a tile into one `nisa.tensor_scalar` with two ops:
`(x * a) + b` -> `nisa.tensor_scalar(x, np.multiply, a, op1=np.add, operand1=b)`.

Each operand must be a number or a [P, 1] column; one instruction then reads and writes the tile
once instead of twice. Operand order matters for subtract/divide and is kept with `reverse`.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import (
    Emitter,
    as_binary,
    operations_in,
    removal_edits,
    render_with,
    resolve,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.fuse_scalar_helpers import scalar_operand as scalar_step


class FuseTensorScalar(Rewrite):
    name = "fuse_tensor_scalar"
    prior = 0.5
    summary = "fuse two scalar operations on a tile into one two-op tensor_scalar"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        taken: set[int] = set()
        for stmt in view.simple_statements():
            for expr in operations_in(stmt):
                if id(expr) in taken:
                    continue
                outer = as_binary(view, expr)
                if outer is None:
                    continue
                outer_step = scalar_step(view, outer)
                if outer_step is None:
                    continue
                resolved = resolve(view, outer_step[0])
                inner = as_binary(view, resolved.expr)
                if inner is None:
                    continue
                inner_step = scalar_step(view, inner)
                if inner_step is None:
                    continue
                taken.add(id(inner.node))
                line = view.line(expr)
                sid = site_id(self.name, view.where(expr))
                title = f"fuse the {inner.op} and {outer.op} at line {line} into one tensor_scalar"
                if inner.kwargs.get("mask") is not None and "mask" not in outer.kwargs:
                    found.append(
                        Refusal(self.name, sid, line, f"cannot {title}: only the inner op is masked")
                    )
                    continue
                found.append(
                    Site(
                        self.name,
                        sid,
                        line,
                        title,
                        description=(
                            "One tensor_scalar instruction applies two scalar ops in a single pass over the tile, "
                            "halving the instructions and the SBUF traffic of the chain."
                        ),
                        relieves=("vector",),
                        payload=(outer, outer_step, inner, inner_step, resolved.definitions),
                    )
                )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        outer, outer_step, inner, inner_step, definitions = site.payload
        emit = Emitter(view)
        np_alias = emit.alias("np")
        x, c0, rev0 = inner_step
        _, c1, rev1 = outer_step
        kwargs: dict[str, str | cst.BaseExpression] = {
            "data": x,
            "op0": f"{np_alias}.{inner.op}",
            "operand0": c0,
        }
        if rev0:
            kwargs["reverse0"] = "True"
        kwargs.update({"op1": f"{np_alias}.{outer.op}", "operand1": c1})
        if rev1:
            kwargs["reverse1"] = "True"
        kwargs.update(outer.kwargs)
        engine = outer.node.args and _engine_keyword(outer.node)
        if engine is not None:
            kwargs["engine"] = engine
        new = emit.call(f"{emit.alias('nisa')}.tensor_scalar", [], kwargs)
        edits = removal_edits(definitions)
        edits[id(outer.node)] = new
        return render_with(view, emit, edits)


def _engine_keyword(node: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "engine":
                return arg.value
    return None
