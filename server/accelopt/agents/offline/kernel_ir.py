"""A read-only view of one NKI kernel function for the rewrites.

The rewrites need the same few facts over and over: where the loops are and what kind they are,
which names each statement reads, rebinds or mutates (a tensor written through `t[...] = ...`,
`t += ...` or `nl.store(t[...], ...)`), which API a call is, and the source line of a node. This
module computes them once per source with libcst and renders replacements back to text, keeping
every untouched byte (formatting and comments) as it was.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from accelopt.agents.offline.rewrites.errors import NotApplicable

# Loop-range callables and the iteration semantics they promise (NKI_NOTES §2).
RANGE_KINDS = {
    "affine_range": "affine",
    "sequential_range": "sequential",
    "static_range": "static",
    "range": "sequential",
}

# Constants NKI exposes under nl.tile_size (hardware tile limits).
TILE_SIZE_CONSTANTS = {
    "pmax": 128,
    "psum_fmax": 512,
    "gemm_stationary_fmax": 128,
    "gemm_moving_fmax": 512,
}


@dataclass(frozen=True)
class Callee:
    """What a call invokes: namespace 'nl' (neuronxcc.nki.language), 'nisa' (isa), 'np' or ''."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


@dataclass
class Access:
    """The names a statement (or expression) depends on and the names it changes."""

    reads: set[str] = field(default_factory=set)
    rebinds: set[str] = field(default_factory=set)  # `t = ...`, loop targets
    mutates: set[str] = field(default_factory=set)  # `t[...] = ...`, `t += ...`, `nl.store(t[...])`

    @property
    def writes(self) -> set[str]:
        return self.rebinds | self.mutates

    def update(self, other: Access) -> None:
        self.reads |= other.reads
        self.rebinds |= other.rebinds
        self.mutates |= other.mutates


@dataclass
class Loop:
    node: cst.For
    var: str
    kind: str  # affine | sequential | static
    range_call: cst.Call
    line: int
    parent: Loop | None

    @property
    def body(self) -> list[cst.BaseStatement]:
        block = self.node.body
        assert isinstance(block, cst.IndentedBlock)
        return list(block.body)

    @property
    def trip_expr(self) -> cst.BaseExpression | None:
        """The trip count expression when the range has the single-argument form."""
        args = [a for a in self.range_call.args if a.keyword is None]
        return args[0].value if len(args) == 1 else None

    def depth(self) -> int:
        return 0 if self.parent is None else 1 + self.parent.depth()


# libcst's visitors are general but slow; the rewrites walk the same small trees many times, so
# children lists are computed once per node (the node is kept alive beside its id, so an id is
# never reused while cached).
_CHILDREN: dict[int, tuple[cst.CSTNode, Sequence[cst.CSTNode]]] = {}
_CHILDREN_LIMIT = 400_000


def children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    entry = _CHILDREN.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_CHILDREN) > _CHILDREN_LIMIT:
        _CHILDREN.clear()
    kids = node.children
    _CHILDREN[id(node)] = (node, kids)
    return kids


def walk(node: cst.CSTNode, *, reads_only: bool = False) -> Iterator[cst.CSTNode]:
    """Every node under `node` (itself included), depth first in source order. With
    `reads_only`, attribute members, keyword names and lambdas are skipped (they are not
    variables the code reads)."""
    stack = [node]
    attribute, arg, lam = cst.Attribute, cst.Arg, cst.Lambda
    while stack:
        current = stack.pop()
        yield current
        if reads_only:
            kind = type(current)
            if kind is attribute or kind is arg:
                stack.append(current.value)  # type: ignore[attr-defined]
                continue
            if kind is lam:
                continue
        stack.extend(reversed(children(current)))


_NAMES: dict[int, tuple[cst.CSTNode, frozenset[str]]] = {}


def names_in(node: cst.CSTNode | None) -> set[str]:
    """Names read by an expression: attribute members and keyword names are not reads."""
    if node is None:
        return set()
    entry = _NAMES.get(id(node))
    if entry is not None and entry[0] is node:
        return set(entry[1])
    if len(_NAMES) > _CHILDREN_LIMIT:
        _NAMES.clear()
    name = cst.Name
    found = frozenset(n.value for n in walk(node, reads_only=True) if type(n) is name)
    _NAMES[id(node)] = (node, found)
    return set(found)


def is_filler(stmt: cst.BaseStatement) -> bool:
    """Bare string statements (`' end loop i2 '`) and `pass` carry no work."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return all(
        isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.BaseString))
        for s in stmt.body
    )


def base_name(expr: cst.BaseExpression | None) -> str | None:
    """`t` for `t`, `t[...]`, `t[...][...]`, `t.attr` (None for anything else, or no expression)."""
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def assign_target(code: str) -> cst.BaseAssignTargetExpression:
    """`code` (a name, subscript, attribute or tuple of them) parsed as an assignment's target."""
    target = cst.parse_expression(code)
    if not isinstance(target, cst.BaseAssignTargetExpression):
        raise ValueError(f"`{code}` cannot be assigned to")
    return target


def dotted(expr: cst.BaseExpression) -> str | None:
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def literal_int(node: cst.Integer) -> int:
    """The value of an integer literal (`128`, `0x80`, `1_024`), read without `evaluated_value`:
    libcst evaluates through `ast.literal_eval`, and CPython 3.11 can raise a spurious
    `SystemError: AST constructor recursion depth mismatch` when threads compile at once
    (python/cpython#106905), which the planner's worker threads do."""
    return int(node.value, 0)


def literal_float(node: cst.Float) -> float:
    """The value of a float literal (`1e-6`, `0.5`, `1_000.0`), without `evaluated_value` (above)."""
    return float(node.value.replace("_", ""))


def int_value(expr: cst.BaseExpression) -> int | None:
    if isinstance(expr, cst.Integer):
        return literal_int(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = int_value(expr.expression)
        return None if inner is None else -inner
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def argument(call: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
    """An argument given either by position or by keyword."""
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    pos = positional(call)
    return pos[index].value if index < len(pos) else None


_VIEWS: OrderedDict[tuple[str, str], KernelView] = OrderedDict()
_VIEWS_LIMIT = 64
_VIEWS_LOCK = threading.Lock()


def view_of(source: str, kernel_name: str) -> KernelView:
    """The (cached) view of a kernel source. Views are never mutated after analysis (rendering
    builds a new tree), so the planner, the executor and the fixer share one per source."""
    key = (kernel_name, source)
    with _VIEWS_LOCK:
        view = _VIEWS.get(key)
        if view is not None:
            _VIEWS.move_to_end(key)
            return view
    view = KernelView(source, kernel_name)
    with _VIEWS_LOCK:
        _VIEWS[key] = view
        while len(_VIEWS) > _VIEWS_LIMIT:
            _VIEWS.popitem(last=False)
    return view


class KernelView:
    """One parsed module and the kernel function in it."""

    def __init__(self, source: str, kernel_name: str) -> None:
        try:
            parsed = cst.parse_module(source)
        except cst.ParserSyntaxError as exc:
            raise NotApplicable(f"the kernel does not parse: {exc.message} (line {exc.raw_line})") from exc
        self.source = source
        self.kernel_name = kernel_name
        # Analyses of one view run one at a time (agents call in from worker threads).
        self.lock = threading.RLock()
        self.analyses: dict[str, list[Any]] = {}  # rewrite name -> its sites (types of rewrites/, above)
        self.wrapper = MetadataWrapper(parsed, unsafe_skip_copy=True)
        self.module = self.wrapper.module
        self._positions = self.wrapper.resolve(PositionProvider)
        func = next(
            (s for s in self.module.body if isinstance(s, cst.FunctionDef) and s.name.value == kernel_name),
            None,
        )
        if func is None:
            raise NotApplicable(f"no top-level function named {kernel_name!r} in the module")
        self.func: cst.FunctionDef = func
        self.parents: dict[int, cst.CSTNode] = {}
        self._index_parents(self.func)
        self.aliases = self._import_aliases()
        self.constants = self._int_constants()
        self.loops: list[Loop] = []
        self._collect_loops(self.func.body, None)

    # --- structure -----------------------------------------------------------------------

    def _index_parents(self, root: cst.CSTNode) -> None:
        self._access_cache: dict[int, Access] = {}
        self._name_index: dict[str, list[cst.Name]] | None = None
        stack = [root]
        while stack:
            node = stack.pop()
            for child in children(node):
                self.parents[id(child)] = node
                stack.append(child)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def _collect_loops(self, block: cst.BaseSuite, parent: Loop | None) -> None:
        if not isinstance(block, cst.IndentedBlock):
            return
        for stmt in block.body:
            if isinstance(stmt, cst.For):
                loop = self._as_loop(stmt, parent)
                if loop is not None:
                    self.loops.append(loop)
                self._collect_loops(stmt.body, loop or parent)
            elif isinstance(stmt, (cst.If, cst.While, cst.With)):
                self._collect_loops(stmt.body, parent)
                orelse = getattr(stmt, "orelse", None)
                if orelse is not None:
                    self._collect_loops(orelse.body, parent)

    def _as_loop(self, node: cst.For, parent: Loop | None) -> Loop | None:
        if not isinstance(node.target, cst.Name) or not isinstance(node.iter, cst.Call):
            return None
        name = dotted(node.iter.func)
        if name is None:
            return None
        kind = RANGE_KINDS.get(name.rsplit(".", 1)[-1])
        if kind is None or node.orelse is not None:
            return None
        return Loop(node, node.target.value, kind, node.iter, self.line(node), parent)

    def loop_of_node(self, node: cst.CSTNode) -> Loop | None:
        """The innermost loop whose body contains the node."""
        by_node = {id(lp.node): lp for lp in self.loops}
        for anc in self.ancestors(node):
            if id(anc) in by_node:
                return by_node[id(anc)]
        return None

    def loop_for(self, node: cst.For) -> Loop | None:
        return next((lp for lp in self.loops if lp.node is node), None)

    def inner_loops(self, loop: Loop) -> list[Loop]:
        return [lp for lp in self.loops if lp is not loop and self.contains(loop.node, lp.node)]

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        return any(a is outer for a in self.ancestors(inner))

    def statements(self, root: cst.CSTNode | None = None) -> Iterator[cst.BaseStatement]:
        """Every statement under root (the kernel body by default), outer first, in order."""
        start = root if root is not None else self.func

        def walk(node: cst.CSTNode) -> Iterator[cst.BaseStatement]:
            body = getattr(node, "body", None)
            if isinstance(body, cst.BaseSuite):
                items = body.body if isinstance(body, cst.IndentedBlock) else []
                for stmt in items:
                    yield stmt
                    yield from walk(stmt)
                orelse = getattr(node, "orelse", None)
                if orelse is not None:
                    yield from walk(orelse)

        yield from walk(start)

    def simple_statements(self, root: cst.CSTNode | None = None) -> Iterator[cst.SimpleStatementLine]:
        for stmt in self.statements(root):
            if isinstance(stmt, cst.SimpleStatementLine):
                yield stmt

    def block_of(self, stmt: cst.BaseStatement) -> cst.IndentedBlock | None:
        parent = self.parent(stmt)
        return parent if isinstance(parent, cst.IndentedBlock) else None

    def siblings(self, stmt: cst.BaseStatement) -> list[cst.BaseStatement]:
        block = self.block_of(stmt)
        return list(block.body) if block is not None else []

    # --- names, imports, constants --------------------------------------------------------

    def _import_aliases(self) -> dict[str, str]:
        """Local name -> 'nl' | 'nisa' | 'nki' | 'np' for the modules kernels import."""
        aliases: dict[str, str] = {}
        targets = {
            "neuronxcc.nki.language": "nl",
            "nki.language": "nl",
            "neuronxcc.nki.isa": "nisa",
            "nki.isa": "nisa",
            "neuronxcc.nki": "nki",
            "nki": "nki",
            "numpy": "np",
        }
        # Kernels import at module level or (compiler-generated style) inside the kernel body.
        body = list(self.module.body) + list(self.func.body.body)
        for stmt in body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted(alias.name) or ""
                        local = alias.evaluated_alias or full
                        if full in targets:
                            aliases[local] = targets[full]
                elif isinstance(small, cst.ImportFrom) and small.module is not None:
                    mod = dotted(small.module) or ""
                    if isinstance(small.names, cst.ImportStar):
                        continue
                    for alias in small.names:
                        full = f"{mod}.{alias.evaluated_name}"
                        local = alias.evaluated_alias or alias.evaluated_name
                        if full in targets:
                            aliases[local] = targets[full]
        return aliases

    def alias_for(self, namespace: str) -> str | None:
        """The local name under which the kernel imported a namespace ('nl', 'nisa', 'np')."""
        for local, ns in self.aliases.items():
            if ns == namespace:
                return local
        return None

    def callee(self, call: cst.Call) -> Callee:
        name = dotted(call.func)
        if name is None:
            return Callee("", "")
        parts = name.split(".")
        head, rest = parts[0], parts[1:]
        ns = self.aliases.get(head, head)
        if ns == "nki" and rest and rest[0] in ("language", "isa"):
            ns = "nl" if rest[0] == "language" else "nisa"
            rest = rest[1:]
        elif head == "neuronxcc" and len(rest) >= 2 and rest[0] == "nki" and rest[1] in ("language", "isa"):
            ns = "nl" if rest[1] == "language" else "nisa"
            rest = rest[2:]
        if ns not in ("nl", "nisa", "np"):
            return Callee("", name)
        return Callee(ns, ".".join(rest))

    def is_call(self, expr: cst.CSTNode | None, namespace: str, *names: str) -> bool:
        if not isinstance(expr, cst.Call):
            return False
        callee = self.callee(expr)
        return callee.namespace == namespace and (not names or callee.name in names)

    def _int_constants(self) -> dict[str, int]:
        """Names bound exactly once (module level or kernel body) to an integer expression."""
        counts: dict[str, int] = {}
        exprs: dict[str, cst.BaseExpression] = {}
        bodies = [self.module.body, list(self.statements())]
        for body in bodies:
            for stmt in body:
                if not isinstance(stmt, cst.SimpleStatementLine):
                    continue
                for small in stmt.body:
                    if isinstance(small, cst.Assign):
                        for target in small.targets:
                            if isinstance(target.target, cst.Name):
                                counts[target.target.value] = counts.get(target.target.value, 0) + 1
                                exprs[target.target.value] = small.value
                    elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                        counts[small.target.value] = counts.get(small.target.value, 0) + 2
        for loop_stmt in self.statements():
            if isinstance(loop_stmt, cst.For):
                for name in names_in(loop_stmt.target):
                    counts[name] = counts.get(name, 0) + 2
        constants: dict[str, int] = {}
        for _ in range(3):  # allow constants defined from other constants
            for name, expr in exprs.items():
                if counts.get(name) == 1 and name not in constants:
                    value = self.eval_int(expr, constants)
                    if value is not None:
                        constants[name] = value
        return constants

    def eval_int(self, expr: cst.BaseExpression, constants: dict[str, int] | None = None) -> int | None:
        """The value of an integer expression built from literals and known constants."""
        env = self.constants if constants is None else constants
        if isinstance(expr, cst.Integer):
            return literal_int(expr)
        if isinstance(expr, cst.Name):
            return env.get(expr.value)
        if isinstance(expr, cst.Attribute):
            name = dotted(expr)
            if name and name.split(".")[-2:-1] == ["tile_size"]:
                return TILE_SIZE_CONSTANTS.get(name.rsplit(".", 1)[-1])
            return None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.eval_int(expr.expression, env)
            return None if inner is None else -inner
        if isinstance(expr, cst.BinaryOperation):
            left = self.eval_int(expr.left, env)
            right = self.eval_int(expr.right, env)
            if left is None or right is None:
                return None
            op = expr.operator
            if isinstance(op, cst.Add):
                return left + right
            if isinstance(op, cst.Subtract):
                return left - right
            if isinstance(op, cst.Multiply):
                return left * right
            if isinstance(op, cst.FloorDivide) and right != 0:
                return left // right
        return None

    # --- accesses --------------------------------------------------------------------------

    def access(self, node: cst.CSTNode) -> Access:
        """What a statement (compound statements included) reads, rebinds and mutates."""
        cached = self._access_cache.get(id(node))
        if cached is not None:
            return cached
        acc = self._access(node)
        self._access_cache[id(node)] = acc
        return acc

    def _access(self, node: cst.CSTNode) -> Access:
        acc = Access()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                acc.update(self.access(small))
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                self._target_access(target.target, acc, augmented=False)
            acc.update(self.expr_access(node.value))
        elif isinstance(node, cst.AnnAssign):
            self._target_access(node.target, acc, augmented=False)
            if node.value is not None:
                acc.update(self.expr_access(node.value))
        elif isinstance(node, cst.AugAssign):
            self._target_access(node.target, acc, augmented=True)
            acc.update(self.expr_access(node.value))
        elif isinstance(node, cst.Expr):
            acc.update(self.expr_access(node.value))
        elif isinstance(node, cst.For):
            acc.rebinds |= names_in(node.target)
            acc.update(self.expr_access(node.iter))
            for stmt in self.statements(node):
                if isinstance(stmt, cst.SimpleStatementLine):
                    acc.update(self.access(stmt))
                elif isinstance(stmt, cst.For):
                    acc.rebinds |= names_in(stmt.target)
                    acc.update(self.expr_access(stmt.iter))
                elif isinstance(stmt, (cst.If, cst.While)):
                    acc.reads |= names_in(stmt.test)
        elif isinstance(node, (cst.If, cst.While)):
            acc.reads |= names_in(node.test)
            for stmt in self.statements(node):
                acc.update(self.access(stmt))
        elif isinstance(node, cst.Return):
            acc.reads |= names_in(node.value)
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            names = node.names if not isinstance(node.names, cst.ImportStar) else []
            for alias in names:
                local = alias.evaluated_alias or (
                    alias.evaluated_name.split(".")[0]
                    if isinstance(node, cst.Import)
                    else alias.evaluated_name
                )
                acc.rebinds.add(local)
        elif isinstance(node, cst.BaseSmallStatement):
            acc.reads |= names_in(node)
        return acc

    def _target_access(self, target: cst.BaseExpression, acc: Access, *, augmented: bool) -> None:
        if isinstance(target, cst.Name):
            acc.rebinds.add(target.value)
            if augmented:
                acc.reads.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._target_access(element.value, acc, augmented=augmented)
        elif isinstance(target, (cst.Subscript, cst.Attribute)):
            base = base_name(target)
            if base is not None:
                acc.mutates.add(base)
            # Index expressions are reads; the base is written (and read too when augmented).
            acc.reads |= names_in(target) - ({base} if base is not None and not augmented else set())

    def expr_access(self, expr: cst.BaseExpression) -> Access:
        acc = Access(reads=names_in(expr))
        for call in self.calls_in(expr):
            dst = self.destination_of(call)
            if dst is not None:
                base = base_name(dst)
                if base is not None:
                    acc.mutates.add(base)
        return acc

    def destination_of(self, call: cst.Call) -> cst.BaseExpression | None:
        """The tensor an API call writes through its arguments (stores, DMA copies, `dst=`)."""
        kw = keyword(call, "dst")
        if kw is not None:
            return kw.value
        callee = self.callee(call)
        if callee.namespace == "nl" and callee.name in ("store", "atomic_rmw"):
            return argument(call, 0, "dst")
        if callee.namespace == "nisa" and callee.name in ("dma_copy",):
            return argument(call, 0, "dst")
        return None

    def destination_of_calls(self, node: cst.CSTNode) -> list[cst.BaseExpression]:
        """Tensors written through call arguments anywhere under node."""
        return [d for c in self.calls_in(node) if (d := self.destination_of(c)) is not None]

    def calls_in(self, node: cst.CSTNode) -> list[cst.Call]:
        return [n for n in walk(node) if isinstance(n, cst.Call)]

    def name_uses(self, name: str, root: cst.CSTNode | None = None) -> list[cst.Name]:
        """Every Name node spelled `name` under root that refers to the variable."""
        if root is None or root is self.func:
            if self._name_index is None:
                index: dict[str, list[cst.Name]] = {}
                for n in walk(self.func, reads_only=True):
                    if type(n) is cst.Name:
                        index.setdefault(n.value, []).append(n)
                self._name_index = index
            return list(self._name_index.get(name, []))
        return [n for n in walk(root, reads_only=True) if type(n) is cst.Name and n.value == name]

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement (simple line or compound header) a node belongs to."""
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, cst.BaseStatement):
            current = self.parent(current)
        return current

    # --- text ------------------------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        return self._positions[node].start.line

    def column(self, node: cst.CSTNode) -> int:
        return self._positions[node].start.column

    def where(self, node: cst.CSTNode) -> str:
        """A stable place name for site ids: line and column."""
        return f"{self.line(node)}.{self.column(node)}"

    def code(self, node: cst.CSTNode) -> str:
        if isinstance(node, cst.BaseStatement):
            return self.module.code_for_node(node).strip()
        return self.module.code_for_node(node)

    def snippet(self, node: cst.CSTNode, limit: int = 70) -> str:
        text = " ".join(self.code(node).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def render(self, edits: dict[int, object]) -> str:
        """Text of the module with nodes replaced: id(node) -> new node, list of statements
        (spliced in place), or None (removed)."""
        return self.module.visit(_Replacer(edits)).code


class _Replacer(cst.CSTTransformer):
    def __init__(self, edits: dict[int, object]) -> None:
        self.edits = edits

    # Any: an edit may turn a node into another kind of node, a splice or a removal, which
    # libcst's generic signature (a node of the same type back) cannot say.
    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        key = id(original_node)
        if key not in self.edits:
            return updated_node
        replacement = self.edits[key]
        if replacement is None:
            return cst.RemoveFromParent()
        if isinstance(replacement, list):
            return cst.FlattenSentinel(replacement)
        if callable(replacement) and not isinstance(replacement, cst.CSTNode):
            replacement = replacement(updated_node)
        if isinstance(replacement, list):
            return cst.FlattenSentinel(replacement)
        return replacement
