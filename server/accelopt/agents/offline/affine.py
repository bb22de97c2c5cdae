"""Affine index expressions: `c1*i + c2*j + k + nl.arange(n)[...]` as coefficients, so rewrites can
tell how an index moves with a loop variable and how wide a slice or arange grid is."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView


@dataclass(frozen=True)
class AffineArange:
    node: cst.Subscript  # the `nl.arange(n)[...]` expression
    size: int
    coefficient: int


@dataclass
class Linear:
    terms: dict[str, int] = field(default_factory=dict)  # symbolic name -> coefficient
    const: int = 0
    aranges: list[AffineArange] = field(default_factory=list)

    def plus(self, other: Linear, sign: int = 1) -> Linear:
        terms = dict(self.terms)
        for name, coef in other.terms.items():
            terms[name] = terms.get(name, 0) + sign * coef
        terms = {k: v for k, v in terms.items() if v != 0}
        aranges = [
            *self.aranges,
            *(AffineArange(a.node, a.size, sign * a.coefficient) for a in other.aranges),
        ]
        return Linear(terms, self.const + sign * other.const, aranges)

    def minus(self, other: Linear) -> Linear:
        return self.plus(other, -1)

    def scaled(self, factor: int) -> Linear:
        return Linear(
            {k: v * factor for k, v in self.terms.items() if v * factor != 0},
            self.const * factor,
            [AffineArange(a.node, a.size, a.coefficient * factor) for a in self.aranges],
        )

    def coefficient(self, name: str) -> int:
        return self.terms.get(name, 0)

    @property
    def is_constant(self) -> bool:
        return not self.terms and not self.aranges


def arange_size(view: KernelView, expr: cst.BaseExpression) -> int | None:
    """n for `nl.arange(n)[...]` (an arange grid with its broadcast subscript)."""
    if isinstance(expr, cst.Subscript) and view.is_call(expr.value, "nl", "arange"):
        call = expr.value
        assert isinstance(call, cst.Call)
        args = [a for a in call.args if a.keyword is None]
        if len(args) == 1:
            return view.eval_int(args[0].value)
    return None


def linear_form(view: KernelView, expr: cst.BaseExpression) -> Linear | None:
    value = view.eval_int(expr)
    if value is not None:
        return Linear(const=value)
    if isinstance(expr, cst.Name):
        return Linear(terms={expr.value: 1})
    size = arange_size(view, expr)
    if size is not None:
        assert isinstance(expr, cst.Subscript)
        return Linear(aranges=[AffineArange(expr, size, 1)])
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = linear_form(view, expr.expression)
        return None if inner is None else inner.scaled(-1)
    if isinstance(expr, cst.BinaryOperation):
        op = expr.operator
        if isinstance(op, (cst.Add, cst.Subtract)):
            left = linear_form(view, expr.left)
            right = linear_form(view, expr.right)
            if left is None or right is None:
                return None
            return left.plus(right, 1 if isinstance(op, cst.Add) else -1)
        if isinstance(op, cst.Multiply):
            left_const = view.eval_int(expr.left)
            right_const = view.eval_int(expr.right)
            if left_const is not None:
                inner = linear_form(view, expr.right)
                return None if inner is None else inner.scaled(left_const)
            if right_const is not None:
                inner = linear_form(view, expr.left)
                return None if inner is None else inner.scaled(right_const)
    return None
