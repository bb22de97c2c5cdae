"""The elementwise dataflow of a kernel: which chains of instructions compute one value, and what.

A chain ends at a root (an elementwise operation whose result leaves the chain: it is stored,
used twice, or fed to a matmul) and reaches back through every single-use intermediate value of
the same block, however it is written:

- returned values, hand-written (`s = nl.sigmoid(t)`, then `nl.multiply(t, s)`) or
  compiler-generated (`v4[i0, nl.arange(128)[:, None], ...] = nisa.activation(...)`, then
  `v4[i0, ...]` read once, the buffer declared up front);
- destination passing, NKI 0.3-0.7 (`g = nl.ndarray(...)`, `nisa.activation(dst=g, ...)`, then
  `g` read once);
- nl.* functions, nisa.* instructions (activation with scale and bias, tensor_scalar with one or
  two ops, tensor_tensor, scalar_tensor_tensor, reciprocal) and Python operators.

Each chain carries its term (terms.py): what it computes as a function of the tiles, columns and
scalars it reads, and the number of instructions it takes today.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.facts import (
    Definition,
    allocation_of,
    is_scalar,
    is_tile,
    module_assignment,
    single_assignment,
    single_use_definition,
)
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    argument,
    base_name,
    children,
    dotted,
    keyword,
    literal_float,
    literal_int,
    names_in,
    positional,
)
from accelopt.agents.offline.patterns import is_column, op_name
from accelopt.agents.offline.terms import UNARY, Term, apply, const, leaf, normalise

_OPERATORS: dict[type, str] = {
    cst.Add: "add",
    cst.Subtract: "subtract",
    cst.Multiply: "multiply",
    cst.Divide: "divide",
}
_BINARY_FUNCTIONS = {"add", "subtract", "multiply", "divide", "maximum", "minimum"}
# Keywords an instruction of a chain may carry; any other (a reduction, an accumulation flag, a
# dtype cast in the middle of the chain) ends the chain there.
_PLAIN_KEYWORDS = {"dtype", "mask", "engine", "name", "dst"}
_ANALYSIS = "dataflow:chains"


@dataclass
class Producer:
    """A single-use intermediate value of a chain: the statement that computes it, the buffer
    declaration only it used, and where it wrote (its target or `dst`)."""

    stmt: cst.SimpleStatementLine
    value: cst.Call | cst.BaseExpression
    alloc: cst.SimpleStatementLine | None
    target: cst.BaseExpression


@dataclass
class Chain:
    """One value computed by elementwise instructions, traced back through single-use
    intermediates."""

    root: cst.BaseExpression  # the root operation (replaced by a fused form)
    stmt: cst.SimpleStatementLine  # the root's statement
    term: Term  # what the chain computes, as written
    normal: Term  # the same, normalised
    producers: list[Producer]
    instructions: int  # instructions the chain takes as written
    leaf_nodes: dict[str, cst.BaseExpression]  # leaf key -> one source expression reading it
    dst: cst.BaseExpression | None = None  # the root's destination (destination passing)
    mask: cst.BaseExpression | None = None  # the mask every instruction of the chain shares
    dtype: cst.BaseExpression | None = None  # the root's output dtype
    lines: tuple[int, int] = (0, 0)


def chains_in(view: KernelView) -> list[Chain]:
    """Every chain of the kernel with at least two instructions (cached on the view)."""
    with view.lock:
        cached = view.analyses.get(_ANALYSIS)
        if cached is None:
            cached = _find_chains(view)
            view.analyses[_ANALYSIS] = cached
        return cached


def _find_chains(view: KernelView) -> list[Chain]:
    found: list[Chain] = []
    for stmt in view.simple_statements():
        if len(stmt.body) != 1:
            continue
        for root in _roots(view, stmt):
            try:
                chain = _Builder(view, stmt).chain(root)
            except RecursionError:  # an absurdly deep expression: not a chain worth fusing
                continue
            if chain is not None and chain.instructions >= 2:
                found.append(chain)
    return found


def _roots(view: KernelView, stmt: cst.SimpleStatementLine) -> list[cst.BaseExpression]:
    """The outermost elementwise operations of a statement, outside index expressions and masks
    (integer arithmetic on loop variables and aranges is not tile work)."""
    roots: list[cst.BaseExpression] = []
    stack: list[cst.CSTNode] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Subscript):
            continue
        if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "mask":
            continue
        if _computes(view, node):
            roots.append(node)  # type: ignore[arg-type]
            continue
        stack.extend(reversed(children(node)))
    return roots


def _computes(view: KernelView, node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.Call, cst.BinaryOperation, cst.UnaryOperation)) and _is_operation(view, node)


def _is_operation(view: KernelView, node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Call):
        callee = view.callee(node)
        if callee.namespace == "nl":
            return callee.name in _BINARY_FUNCTIONS or callee.name in UNARY or callee.name in ("negative", "copy")
        return callee.namespace == "nisa" and callee.name in (
            "activation",
            "tensor_scalar",
            "tensor_tensor",
            "scalar_tensor_tensor",
            "reciprocal",
        )
    return True  # operators: whether a tile is involved is decided while building


class _Builder:
    """Builds the term of one root, inlining the single-use producers it reaches."""

    def __init__(self, view: KernelView, stmt: cst.SimpleStatementLine) -> None:
        self.view = view
        self.stmt = stmt
        self.producers: list[Producer] = []
        self.instructions = 0
        self.leaf_nodes: dict[str, cst.BaseExpression] = {}
        self.masks: set[str] = set()
        self.mask: cst.BaseExpression | None = None
        self.unmasked = False
        self.tiles = 0

    def chain(self, root: cst.BaseExpression) -> Chain | None:
        term = self.term(root, top=True)
        if term is None or term.is_leaf or term.is_const or self.tiles == 0:
            return None
        if len(self.masks) > 1 or (self.masks and self.unmasked):
            return None  # instructions masked differently cannot become one
        if not self._leaves_unchanged():
            return None
        dst = _keyword_value(root, "dst") if isinstance(root, cst.Call) else None
        dtype_kw = keyword(root, "dtype") if isinstance(root, cst.Call) else None
        lines = [self.view.line(p.stmt) for p in self.producers] + [self.view.line(self.stmt)]
        return Chain(
            root=root,
            stmt=self.stmt,
            term=term,
            normal=normalise(term),
            producers=self.producers,
            instructions=self.instructions,
            leaf_nodes=self.leaf_nodes,
            dst=dst,
            mask=self.mask,
            dtype=dtype_kw.value if dtype_kw is not None else None,
            lines=(min(lines), max(lines)),
        )

    # --- terms ---------------------------------------------------------------------------

    def term(self, expr: cst.BaseExpression, *, top: bool = False) -> Term | None:
        view = self.view
        number = constant_value(view, expr)
        if number is not None:
            return const(number, view.code(expr).strip())
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)) and is_scalar(view, expr):
            return self._leaf(expr)  # compile-time arithmetic (`1.0 / k`): an operand, not an instruction
        if isinstance(expr, cst.BinaryOperation):
            op = _OPERATORS.get(type(expr.operator))
            if op is None:
                return self._leaf(expr)
            left, right = self.term(expr.left), self.term(expr.right)
            if left is None or right is None:
                return None
            self.instructions += 1
            return apply(op, left, right)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.term(expr.expression)
            if inner is None:
                return None
            self.instructions += 1
            return apply("negative", inner)
        if isinstance(expr, cst.Call) and _is_operation(view, expr):
            return self._call(expr, top=top)
        if isinstance(expr, (cst.Name, cst.Subscript)):
            producer = self._producer(expr)
            if producer is not None and _computes(view, producer.value):
                inner = self.term(producer.value)
                if inner is not None:
                    self.producers.append(producer)
                    return inner
        return self._leaf(expr)

    def _leaf(self, expr: cst.BaseExpression) -> Term:
        view = self.view
        key = "".join(view.code(expr).split())
        if is_scalar(view, expr):
            kind = "scalar"
        elif is_column(view, expr):
            kind = "column"
            self.tiles += 1
        elif is_tile(view, expr):
            kind = "tile"
            self.tiles += 1
        else:
            kind = "other"  # e.g. a loop-dependent integer: neither a tile nor a constant
        self.leaf_nodes.setdefault(key, expr)
        return leaf(key, kind)

    def _call(self, call: cst.Call, *, top: bool) -> Term | None:
        view = self.view
        callee = view.callee(call)
        extra = {a.keyword.value for a in call.args if a.keyword is not None} - _PLAIN_KEYWORDS
        if callee.namespace == "nl":
            extra -= {"x", "y"}
        if not top and keyword(call, "dtype") is not None:
            return None  # a cast inside the chain: the fused form would not round there
        mask = keyword(call, "mask")
        if mask is not None:
            self.masks.add("".join(view.code(mask.value).split()))
            self.mask = mask.value
        else:
            self.unmasked = True
        name = callee.name
        if callee.namespace == "nl":
            args = [a.value for a in positional(call)]
            if name in _BINARY_FUNCTIONS and len(args) == 2 and not extra:
                return self._node(name, args)
            if (name in UNARY or name in ("negative", "copy")) and len(args) == 1 and not extra:
                return self._node(name, args)
            return None
        if extra - {
            "op",
            "data",
            "bias",
            "scale",
            "op0",
            "op1",
            "operand0",
            "operand1",
            "reverse0",
            "reverse1",
            "data1",
            "data2",
        }:
            return None  # a reduction or another side effect: not a plain elementwise step
        if name == "reciprocal":
            data = argument(call, 0, "data")
            return self._node("reciprocal", [data]) if data is not None else None
        if name == "activation":
            func = op_name(view, argument(call, 0, "op"))
            data = argument(call, 1, "data")
            if func is None or data is None or (func not in UNARY and func != "copy"):
                return None
            inner = self.term(data)
            scale = argument(call, 3, "scale")
            bias = argument(call, 2, "bias")
            if inner is None:
                return None
            if scale is not None:
                scale_term = self.term(scale)
                if scale_term is None:
                    return None
                inner = apply("multiply", inner, scale_term)
            if bias is not None:
                bias_term = self.term(bias)
                if bias_term is None:
                    return None
                inner = apply("add", inner, bias_term)
            self.instructions += 1
            return apply(func, inner)
        if name == "tensor_tensor":
            op = op_name(view, argument(call, 2, "op"))
            first, second = argument(call, 0, "data1"), argument(call, 1, "data2")
            if op not in _BINARY_FUNCTIONS or first is None or second is None:
                return None
            return self._node(op, [first, second])
        if name in ("tensor_scalar", "scalar_tensor_tensor"):
            data = argument(call, 0, "data")
            op0 = op_name(view, argument(call, 1, "op0"))
            operand0 = argument(call, 2, "operand0")
            stt = name == "scalar_tensor_tensor"
            # scalar_tensor_tensor takes op1/operand1 by position too; tensor_scalar by keyword only.
            op1_expr = argument(call, 3, "op1") if stt else _keyword_value(call, "op1")
            operand1 = argument(call, 4, "operand1") if stt else _keyword_value(call, "operand1")
            op1 = op_name(view, op1_expr)
            if data is None or operand0 is None or op0 not in _BINARY_FUNCTIONS:
                return None
            if len(positional(call)) > (5 if stt else 3):
                return None
            x = self.term(data)
            a = self.term(operand0)
            if x is None or a is None:
                return None
            step = apply(op0, a, x) if _flag(call, "reverse0") else apply(op0, x, a)
            if op1 is not None:
                if op1 not in _BINARY_FUNCTIONS or operand1 is None:
                    return None
                b = self.term(operand1)
                if b is None:
                    return None
                step = apply(op1, b, step) if _flag(call, "reverse1") else apply(op1, step, b)
            elif stt:
                return None
            self.instructions += 1
            return step
        return None

    def _node(self, op: str, operands: list[cst.BaseExpression]) -> Term | None:
        terms = [self.term(o) for o in operands]
        if any(t is None for t in terms):
            return None
        self.instructions += 1
        return apply(op, *[t for t in terms if t is not None])

    # --- producers -------------------------------------------------------------------------

    def _producer(self, use: cst.Name | cst.Subscript) -> Producer | None:
        view = self.view
        definition = single_use_definition(view, use)
        if definition is not None:
            target = definition.stmt.body[0]
            assert isinstance(target, cst.Assign)
            return Producer(definition.stmt, definition.value, definition.alloc, target.targets[0].target)
        return _destination_producer(view, use)

    def _leaves_unchanged(self) -> bool:
        """No statement between the chain's first instruction and its root writes a tile the
        chain reads (moving every read to the root must not change what is read)."""
        if not self.producers:
            return True
        siblings = self.view.siblings(self.stmt)
        ids = [id(s) for s in siblings]
        if id(self.stmt) not in ids:
            return False
        produced = {id(p.stmt) for p in self.producers}
        allocs = {id(p.alloc) for p in self.producers if p.alloc is not None}
        positions = [ids.index(id(p.stmt)) for p in self.producers if id(p.stmt) in ids]
        if len(positions) != len(self.producers):
            return False
        read: set[str] = set()
        for expr in self.leaf_nodes.values():
            read |= names_in(expr)
        for stmt in siblings[min(positions) : ids.index(id(self.stmt))]:
            if id(stmt) in produced or id(stmt) in allocs:
                continue
            if self.view.access(stmt).writes & read:
                return False
        return True


def _keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    kw = keyword(call, name)
    return kw.value if kw is not None else None


def _flag(call: cst.Call, name: str) -> bool:
    kw = keyword(call, name)
    return kw is not None and dotted(kw.value) == "True"


def _destination_producer(view: KernelView, use: cst.Name | cst.Subscript) -> Producer | None:
    """`nisa.op(dst=t, ...)` earlier in the same block, `t` declared by its own `nl.ndarray` and
    read only here (NKI 0.3-0.7 destination passing)."""
    name = base_name(use)
    use_stmt = view.statement_of(use)
    if name is None or use_stmt is None:
        return None
    siblings = view.siblings(use_stmt)
    position = next((i for i, s in enumerate(siblings) if s is use_stmt), None)
    if position is None:
        return None
    for index in range(position - 1, -1, -1):
        candidate = siblings[index]
        access = view.access(candidate)
        if name not in access.writes and name not in access.reads:
            continue
        if not isinstance(candidate, cst.SimpleStatementLine) or len(candidate.body) != 1:
            return None
        small = candidate.body[0]
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            return None
        call = small.value
        dst = keyword(call, "dst")
        if dst is None or "".join(view.code(dst.value).split()) != "".join(view.code(use).split()):
            return None
        if not _is_operation(view, call):
            return None
        deps = names_in(call) - {name}
        for stmt in siblings[index + 1 : position]:
            between = view.access(stmt)
            if between.writes & deps or name in between.writes or name in between.reads:
                return None
        alloc = allocation_of(view, name)
        if alloc is None or len(view.name_uses(name)) != 3:
            return None
        return Producer(candidate, call, alloc, dst.value)
    return None


def constant_value(view: KernelView, expr: cst.BaseExpression, depth: int = 0) -> float | None:
    """The number a compile-time scalar expression stands for, when the source states it:
    literals, `-c`, arithmetic on them, `np.float32(c)`, `np.dtype(np.float32).type(c)`, and
    names bound once to one of these (in the kernel or at module level)."""
    if depth > 6:
        return None
    if isinstance(expr, cst.Integer):
        return float(literal_int(expr))
    if isinstance(expr, cst.Float):
        return literal_float(expr)
    if isinstance(expr, cst.UnaryOperation):
        inner = constant_value(view, expr.expression, depth + 1)
        if inner is None:
            return None
        if isinstance(expr.operator, cst.Minus):
            return -inner
        return inner if isinstance(expr.operator, cst.Plus) else None
    if isinstance(expr, cst.BinaryOperation):
        left = constant_value(view, expr.left, depth + 1)
        right = constant_value(view, expr.right, depth + 1)
        if left is None or right is None:
            return None
        op = _OPERATORS.get(type(expr.operator))
        if op == "add":
            return left + right
        if op == "subtract":
            return left - right
        if op == "multiply":
            return left * right
        if op == "divide" and right != 0:
            return left / right
        return None
    if isinstance(expr, cst.Name):
        if expr.value in view.constants:
            return float(view.constants[expr.value])
        value = single_assignment(view, expr.value) or module_assignment(view, expr.value)
        return constant_value(view, value, depth + 1) if value is not None else None
    if isinstance(expr, cst.Call) and len(expr.args) == 1 and expr.args[0].keyword is None:
        name = dotted(expr.func) or ""
        head = name.split(".")[0]
        numpy_scalar = view.aliases.get(head) == "np" and name.rsplit(".", 1)[-1].startswith("float")
        dtype_type = isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "type"
        if numpy_scalar or dtype_type or name == "float":
            return constant_value(view, expr.args[0].value, depth + 1)
    return None


def definitions_of(chain: Chain) -> list[Definition]:
    """The chain's producers as facts.Definition records (statement, value, declaration)."""
    return [Definition(p.stmt, p.value, p.alloc) for p in chain.producers]
