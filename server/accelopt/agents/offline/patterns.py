"""Recognising elementwise operations however a kernel spells them, and writing new calls.

`nl.multiply(a, b)`, `a * b` and `nisa.tensor_tensor(a, b, op=np.multiply)` are the same
operation; `nl.exp(x)` and `nisa.activation(op=nl.exp, data=x)` too. The fusion rewrites match
on these normalised views and look through single-use intermediate values (`s = nl.sigmoid(t)`
followed by `nl.multiply(t, s)`), so they work on hand-written and compiler-generated kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from accelopt.agents.offline.facts import (
    ACTIVATION_FUNCTIONS,
    BINARY_FUNCTIONS,
    OPERATOR_FUNCTIONS,
    Definition,
    is_scalar,
    is_tile,
    single_use_definition,
)
from accelopt.agents.offline.kernel_ir import KernelView, argument, dotted, keyword, positional, walk
from accelopt.agents.offline.rewrites.errors import NotApplicable

# Keyword arguments that describe where/how an instruction writes, carried over when fusing.
CARRIED_KEYWORDS = ("dtype", "mask")


@dataclass
class Unary:
    func: str  # activation function name, e.g. "exp"
    data: cst.BaseExpression
    node: cst.BaseExpression
    kwargs: dict[str, cst.BaseExpression] = field(default_factory=dict)
    isa: bool = False  # spelled as nisa.activation
    bias: cst.BaseExpression | None = None  # an activation that already adds a bias


@dataclass
class Binary:
    op: str  # add | subtract | multiply | divide | maximum | minimum
    left: cst.BaseExpression
    right: cst.BaseExpression
    node: cst.BaseExpression
    kwargs: dict[str, cst.BaseExpression] = field(default_factory=dict)
    isa: bool = False


def carried(call: cst.BaseExpression) -> dict[str, cst.BaseExpression]:
    if not isinstance(call, cst.Call):
        return {}
    return {name: kw.value for name in CARRIED_KEYWORDS if (kw := keyword(call, name)) is not None}


def operations_in(stmt: cst.SimpleStatementLine) -> list[cst.BaseExpression]:
    """Every call and binary operation in a statement, outermost first: where fusions look."""
    return [n for n in walk(stmt) if isinstance(n, (cst.Call, cst.BinaryOperation))]


def op_name(view: KernelView, expr: cst.BaseExpression | None) -> str | None:
    """'multiply' for np.multiply / nl.multiply / nki.language.multiply."""
    if expr is None:
        return None
    text = dotted(expr)
    if text is None:
        return None
    head, _, leaf = text.rpartition(".")
    if not head:
        return None
    namespace = view.aliases.get(head.split(".")[0], head)
    if namespace in ("np", "nl", "nki") or head.endswith("language") or head == "numpy":
        return leaf
    return None


def as_unary(view: KernelView, expr: cst.BaseExpression) -> Unary | None:
    if not isinstance(expr, cst.Call):
        return None
    callee = view.callee(expr)
    if callee.namespace == "nl" and callee.name in ACTIVATION_FUNCTIONS:
        args = positional(expr)
        if len(args) == 1 and all(
            a.keyword is None or a.keyword.value in CARRIED_KEYWORDS for a in expr.args
        ):
            return Unary(callee.name, args[0].value, expr, carried(expr))
        return None
    if callee.namespace == "nisa" and callee.name == "activation":
        if any(keyword(expr, k) is not None for k in ("scale", "reduce_op", "reduce_res")):
            return None
        func = op_name(view, argument(expr, 0, "op"))
        data = argument(expr, 1, "data")
        bias = keyword(expr, "bias")
        if func in ACTIVATION_FUNCTIONS and data is not None and len(positional(expr)) <= 2:
            return Unary(func, data, expr, carried(expr), isa=True, bias=bias.value if bias else None)
    return None


def as_binary(view: KernelView, expr: cst.BaseExpression) -> Binary | None:
    if isinstance(expr, cst.BinaryOperation):
        op = OPERATOR_FUNCTIONS.get(type(expr.operator))
        if op is None or not (is_tile(view, expr.left) or is_tile(view, expr.right)):
            return None
        return Binary(op, expr.left, expr.right, expr)
    if not isinstance(expr, cst.Call):
        return None
    callee = view.callee(expr)
    if callee.namespace == "nl" and callee.name in BINARY_FUNCTIONS:
        args = positional(expr)
        if len(args) == 2 and all(
            a.keyword is None or a.keyword.value in CARRIED_KEYWORDS for a in expr.args
        ):
            return Binary(callee.name, args[0].value, args[1].value, expr, carried(expr))
        return None
    if callee.namespace == "nisa" and callee.name == "tensor_tensor":
        op = op_name(view, argument(expr, 2, "op"))
        left, right = argument(expr, 0, "data1"), argument(expr, 1, "data2")
        if op in BINARY_FUNCTIONS and left is not None and right is not None:
            return Binary(op, left, right, expr, carried(expr), isa=True)
        return None
    if callee.namespace == "nisa" and callee.name == "tensor_scalar":
        if keyword(expr, "op1") is not None or len(positional(expr)) > 3:
            return None
        op = op_name(view, argument(expr, 1, "op0"))
        data, operand = argument(expr, 0, "data"), argument(expr, 2, "operand0")
        reverse = keyword(expr, "reverse0")
        if op not in BINARY_FUNCTIONS or data is None or operand is None:
            return None
        if reverse is not None and dotted(reverse.value) == "True":
            return Binary(op, operand, data, expr, carried(expr), isa=True)
        return Binary(op, data, operand, expr, carried(expr), isa=True)
    return None


def is_column_or_scalar(view: KernelView, expr: cst.BaseExpression) -> bool:
    """A scalar constant or a [P, 1] column tile (what tensor_scalar operands and activation
    scale/bias accept)."""
    return is_scalar(view, expr) or is_column(view, expr)


def is_column(view: KernelView, expr: cst.BaseExpression) -> bool:
    """A [P, 1] tile: its shape is stated in the source, or it is indexed with a width-1 free grid."""
    from accelopt.agents.offline.affine import arange_size
    from accelopt.agents.offline.facts import column_shape, slice_extent

    if isinstance(expr, cst.Subscript):
        last = expr.slice[-1].slice
        if isinstance(last, cst.Index) and arange_size(view, last.value) == 1:
            return True
        if isinstance(last, cst.Slice) and slice_extent(view, last) == 1 and len(expr.slice) >= 2:
            return True
        return False
    shape = column_shape(view, expr)
    return shape is not None and shape[1] == 1


@dataclass
class Resolved:
    expr: cst.BaseExpression
    definitions: list[Definition] = field(default_factory=list)


def resolve(view: KernelView, expr: cst.BaseExpression) -> Resolved:
    """Look through a single-use intermediate value to the expression that computed it."""
    definition = single_use_definition(view, expr) if isinstance(expr, (cst.Name, cst.Subscript)) else None
    if definition is None:
        return Resolved(expr)
    return Resolved(definition.value, [definition])


def removal_edits(definitions: list[Definition]) -> dict[int, object]:
    edits: dict[int, object] = {}
    for d in definitions:
        edits[id(d.stmt)] = None
        if d.alloc is not None:
            edits[id(d.alloc)] = None
    return edits


def same_code(view: KernelView, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    return "".join(view.code(a).split()) == "".join(view.code(b).split())


class Emitter:
    """Writes new calls with the kernel's own module aliases, adding an import when needed."""

    def __init__(self, view: KernelView) -> None:
        self.view = view
        self.missing: dict[str, str] = {}  # namespace -> import statement

    def alias(self, namespace: str) -> str:
        found = self.view.alias_for(namespace)
        if found is not None:
            return found
        default = {"nl": "nl", "nisa": "nisa", "np": "np"}[namespace]
        module = {"nl": "neuronxcc.nki.language", "nisa": "neuronxcc.nki.isa", "np": "numpy"}[namespace]
        if default in self.view.access(self.view.func).rebinds:
            raise NotApplicable(f"cannot import {module} as {default}: the kernel uses that name")
        self.missing[namespace] = f"import {module} as {default}"
        return default

    def code(self, node: cst.BaseExpression) -> str:
        return self.view.code(node)

    def call(
        self, func: str, args: list[str], kwargs: dict[str, str | cst.BaseExpression]
    ) -> cst.BaseExpression:
        parts = list(args)
        for name, value in kwargs.items():
            text = value if isinstance(value, str) else self.code(value)
            parts.append(f"{name}={text}")
        return cst.parse_expression(f"{func}({', '.join(parts)})")

    def import_edits(self) -> dict[int, object]:
        """Edits adding the missing imports in front of the module's first import."""
        if not self.missing:
            return {}
        statements = [cst.parse_statement(text + "\n") for text in self.missing.values()]
        module = self.view.module
        anchor: cst.BaseStatement | None = next(
            (
                s
                for s in module.body
                if isinstance(s, cst.SimpleStatementLine)
                and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
            ),
            None,
        )
        if anchor is None:
            anchor = module.body[0]

        def prepend(updated: cst.CSTNode) -> list[cst.CSTNode]:
            return [*statements, updated]

        return {id(anchor): prepend}


def render_with(view: KernelView, emitter: Emitter, edits: dict[int, object]) -> str:
    all_edits = dict(edits)
    for key, value in emitter.import_edits().items():
        if key in all_edits:
            previous = all_edits[key]

            def chained(updated: cst.CSTNode, previous: object = previous, value: Any = value) -> object:
                inner = (
                    previous(updated)
                    if callable(previous) and not isinstance(previous, cst.CSTNode)
                    else previous
                )
                return value(inner)

            all_edits[key] = chained
        else:
            all_edits[key] = value
    return view.render(all_edits)
