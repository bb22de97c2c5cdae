"""Fold a multiply by a scale and an add of a bias column into the activation that consumes them:
`exp(x * s + b)` -> `nisa.activation(op=nl.exp, data=x, scale=s, bias=b)`.

The Scalar Engine applies `op(data * scale + bias)` in one pass, so the multiply and the add
(Vector Engine instructions and their intermediate tiles) disappear. `scale` may be a number or a
[P, 1] column; `bias` must be a [P, 1] column tile (the instruction has no scalar bias), which is
checked from the source: a scalar or a full-width bias is refused.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import Definition, is_scalar
from accelopt.agents.offline.kernel_ir import KernelView
from accelopt.agents.offline.patterns import (
    Emitter,
    as_binary,
    as_unary,
    is_column,
    is_column_or_scalar,
    operations_in,
    removal_edits,
    render_with,
    resolve,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


class FoldActivation(Rewrite):
    name = "fold_activation"
    prior = 0.6
    summary = "fold scale and bias into the activation instruction that consumes them"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            for expr in operations_in(stmt):
                unary = as_unary(view, expr)
                if unary is None or unary.func == "copy":
                    continue
                outcome = _fold(view, unary.data, has_bias=unary.bias is not None)
                if outcome is None:
                    continue
                line = view.line(expr)
                sid = site_id(self.name, view.where(expr))
                if isinstance(outcome, str):
                    found.append(
                        Refusal(self.name, sid, line, f"cannot fold into the {unary.func}: {outcome}")
                    )
                    continue
                data, scale, bias, definitions = outcome
                if scale is None and bias is None:
                    continue
                parts = [
                    f"the scale {view.snippet(scale, 20)}" if scale is not None else "",
                    f"the bias {view.snippet(bias, 20)}" if bias is not None else "",
                ]
                words = " and ".join(p for p in parts if p)
                title = f"fold {words} into the {unary.func} activation (line {line})"
                found.append(
                    Site(
                        self.name,
                        sid,
                        line,
                        title,
                        description=(
                            f"nisa.activation computes {unary.func}(data * scale + bias) in one Scalar Engine "
                            "pass; the separate multiply/add instructions go away."
                        ),
                        relieves=("vector", "scalar"),
                        payload=(unary, data, scale, bias, definitions),
                    )
                )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        unary, data, scale, bias, definitions = site.payload
        emit = Emitter(view)
        kwargs: dict[str, str | cst.BaseExpression] = {"op": f"{emit.alias('nl')}.{unary.func}", "data": data}
        if bias is not None:
            kwargs["bias"] = bias
        elif unary.bias is not None:
            kwargs["bias"] = unary.bias
        if scale is not None:
            kwargs["scale"] = scale
        kwargs.update(unary.kwargs)
        new = emit.call(f"{emit.alias('nisa')}.activation", [], kwargs)
        edits = removal_edits(definitions)
        edits[id(unary.node)] = new
        return render_with(view, emit, edits)


# (data, scale or None, bias or None, the definitions folded into the activation)
_Folded = tuple[cst.BaseExpression, cst.BaseExpression | None, cst.BaseExpression | None, list[Definition]]


def _fold(view: KernelView, data: cst.BaseExpression, *, has_bias: bool = False) -> _Folded | str | None:
    """(data, scale, bias, definitions) when the activation input is x*s, x*s + b or x + b;
    a reason string when it nearly is; None when there is nothing to fold."""
    resolved = resolve(view, data)
    definitions = list(resolved.definitions)
    outer = as_binary(view, resolved.expr)
    if outer is None:
        return None
    bias = None
    inner_expr: cst.BaseExpression = resolved.expr
    if outer.op == "add" and not has_bias:
        for x, b in ((outer.left, outer.right), (outer.right, outer.left)):
            if is_column(view, b):
                bias, inner_expr = b, x
                break
        else:
            if is_scalar(view, outer.left) or is_scalar(view, outer.right):
                return "activation takes a [P, 1] bias tile, not a scalar"
            return None
        inner_resolved = resolve(view, inner_expr)
        product = as_binary(view, inner_resolved.expr)
        if product is not None and product.op == "multiply":
            for x, s in ((product.left, product.right), (product.right, product.left)):
                if is_column_or_scalar(view, s):
                    definitions += inner_resolved.definitions
                    return (x, s, bias, definitions)
        return (inner_expr, None, bias, definitions)
    if outer.op == "multiply":
        for x, s in ((outer.left, outer.right), (outer.right, outer.left)):
            if is_column_or_scalar(view, s) and not is_column_or_scalar(view, x):
                return (x, s, None, definitions)
    return None
