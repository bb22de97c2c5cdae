"""`x * sigmoid(x)` -> `silu(x)`: one Scalar Engine instruction instead of an activation plus a
Vector Engine multiply (and no intermediate tile)."""

from __future__ import annotations

from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import (
    Emitter,
    as_binary,
    as_unary,
    operations_in,
    removal_edits,
    render_with,
    resolve,
    same_code,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


class FuseSilu(Rewrite):
    name = "fuse_silu"
    prior = 1.0
    summary = "replace x * sigmoid(x) by a single silu activation"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            for expr in operations_in(stmt):
                product = as_binary(view, expr)
                if product is None or product.op != "multiply":
                    continue
                for data, gate in ((product.left, product.right), (product.right, product.left)):
                    resolved = resolve(view, gate)
                    sigmoid = as_unary(view, resolved.expr)
                    if sigmoid is None or sigmoid.func != "sigmoid":
                        continue
                    line = view.line(expr)
                    sid = site_id(self.name, view.where(expr))
                    title = f"fuse {view.snippet(data, 30)} * sigmoid({view.snippet(data, 30)}) into one silu"
                    if not same_code(view, sigmoid.data, data):
                        found.append(
                            Refusal(
                                self.name, sid, line, f"cannot {title}: the sigmoid is of a different value"
                            )
                        )
                        continue
                    found.append(
                        Site(
                            self.name,
                            sid,
                            line,
                            title,
                            description=(
                                f"Line {line} multiplies a tile by its sigmoid; nl.silu computes the same in "
                                "one Scalar Engine pass and frees the Vector Engine."
                            ),
                            relieves=("vector", "scalar"),
                            payload=(product, sigmoid, resolved.definitions),
                        )
                    )
                    break
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        product, sigmoid, definitions = site.payload
        emit = Emitter(view)
        kwargs = dict(product.kwargs)
        if product.isa or sigmoid.isa:
            new = emit.call(
                f"{emit.alias('nisa')}.activation",
                [],
                {"op": f"{emit.alias('nl')}.silu", "data": sigmoid.data, **kwargs},
            )
        else:
            new = emit.call(f"{emit.alias('nl')}.silu", [emit.code(sigmoid.data)], kwargs)
        edits = removal_edits(definitions)
        edits[id(product.node)] = new
        return render_with(view, emit, edits)
