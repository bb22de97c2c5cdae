"""Elementwise computations as terms: what a chain of instructions computes, whatever its spelling.

`x / (1 + exp(-x))`, `x * sigmoid(x)` and `activation(exp, x, scale=-1)` -> `tensor_scalar(add 1)`
-> `reciprocal` -> `multiply` all become the same term once normalised: subtraction and negation
are multiplications by -1, division is multiplication by a reciprocal, sums and products are flat
and sorted, constants are folded, and the textbook identities of the Scalar Engine's functions are
applied (`1 / (1 + exp(-a))` is `sigmoid(a)`, `a * sigmoid(a)` is `silu(a)`, `log(1 + exp(a))` is
`softplus(a)`). A term can be evaluated on numbers with the emulator's own op definitions, which
is how a fusion is double-checked before it is offered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from accelopt.agents.offline.facts import ACTIVATION_FUNCTIONS
from accelopt.nki.ops import spec as op_spec

# Unary functions a term may hold (the emulator's names): the Scalar Engine's activation
# functions (NKI ISA "Supported Activation Functions"), which `facts` lists, and reciprocal.
UNARY = (ACTIVATION_FUNCTIONS - {"copy"}) | {"reciprocal"}
NARY = ("add", "multiply")
BINARY = ("maximum", "minimum")


@dataclass(frozen=True)
class Term:
    """`op` is 'leaf', 'const', an n-ary 'add'/'multiply', a binary 'maximum'/'minimum' or a
    unary function. A leaf is an operand read from a tile, a [P, 1] column or a compile-time scalar
    whose value the source does not state; `key` is its source text without spaces."""

    op: str
    args: tuple[Term, ...] = ()
    value: float | None = None
    key: str = ""
    kind: str = ""  # leaf: 'tile' | 'column' | 'scalar'
    # A constant read from the source keeps its spelling (`EPS`, `np.float32(1)`) for rewriting.
    source: str = field(default="", compare=False)

    @property
    def is_leaf(self) -> bool:
        return self.op == "leaf"

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def is_scalar_like(self) -> bool:
        """A number or a per-partition column: what tensor_scalar operands and activation
        scale/bias accept."""
        return self.is_const or (self.is_leaf and self.kind in ("column", "scalar"))

    def __str__(self) -> str:
        if self.is_leaf:
            return self.key
        if self.is_const:
            return f"{self.value:g}"
        if self.op in NARY:
            sign = " + " if self.op == "add" else " * "
            return "(" + sign.join(str(a) for a in self.args) + ")"
        return f"{self.op}(" + ", ".join(str(a) for a in self.args) + ")"


def const(value: float, source: str = "") -> Term:
    return Term("const", value=float(value), source=source)


def leaf(key: str, kind: str) -> Term:
    return Term("leaf", key=key, kind=kind)


def apply(op: str, *args: Term) -> Term:
    return Term(op, tuple(args))


def negate(term: Term) -> Term:
    return apply("multiply", term, const(-1.0))


def _order(term: Term) -> tuple[int, str]:
    rank = {"leaf": 1, "const": 2}.get(term.op, 0)
    return (rank, str(term))


def normalise(term: Term) -> Term:
    """The canonical form of a term (applied bottom-up until nothing changes)."""
    for _ in range(8):
        new = _normalise(term)
        if new == term:
            return new
        term = new
    return term


def _normalise(term: Term) -> Term:
    if term.is_leaf or term.is_const:
        return term
    args = tuple(_normalise(a) for a in term.args)
    op = term.op
    if op == "subtract":
        return apply("add", args[0], negate(args[1]))
    if op == "negative":
        return negate(args[0])
    if op == "divide":
        numerator, denominator = args
        if denominator.is_const and denominator.value:
            return apply("multiply", numerator, const(1.0 / denominator.value))
        return apply("multiply", numerator, apply("reciprocal", denominator))
    if op == "copy":
        return args[0]
    if op in NARY:
        return _flat(op, args)
    if op == "reciprocal":
        (inner,) = args
        if inner.is_const and inner.value:
            return const(1.0 / inner.value)
        if inner.op == "reciprocal":
            return inner.args[0]
        sigmoid_of = _one_plus_exp(inner)
        if sigmoid_of is not None:  # 1 / (1 + exp(a)) = sigmoid(-a)
            return apply("sigmoid", negate(sigmoid_of))
        return apply("reciprocal", inner)
    if op == "log":
        softplus_of = _one_plus_exp(args[0])
        if softplus_of is not None:  # log(1 + exp(a)) = softplus(a)
            return apply("softplus", softplus_of)
    if all(a.is_const for a in args) and (op in UNARY or op in BINARY):
        with np.errstate(all="ignore"):
            value = float(evaluate(apply(op, *args), {}))
        if math.isfinite(value):
            return const(value)
    return Term(op, args)


def _one_plus_exp(term: Term) -> Term | None:
    """`a` when the term is 1 + exp(a)."""
    if term.op != "add" or len(term.args) != 2:
        return None
    first, second = term.args
    for one, rest in ((first, second), (second, first)):
        if one.is_const and one.value == 1.0 and rest.op == "exp":
            return rest.args[0]
    return None


def _flat(op: str, args: tuple[Term, ...]) -> Term:
    items: list[Term] = []
    for a in args:
        items.extend(a.args if a.op == op else (a,))
    constant = 0.0 if op == "add" else 1.0
    rest: list[Term] = []
    for item in items:
        if item.is_const:
            assert item.value is not None
            constant = constant + item.value if op == "add" else constant * item.value
        else:
            rest.append(item)
    if op == "multiply":
        if constant == 0.0:
            return const(0.0)
        rest = _silu_products(rest)
    identity = 0.0 if op == "add" else 1.0
    if constant != identity or not rest:
        given = [item for item in items if item.is_const]
        # One constant as written keeps its spelling; a folded one is a new number.
        rest.append(given[0] if len(given) == 1 else const(constant))
    if len(rest) == 1:
        return rest[0]
    return Term(op, tuple(sorted(rest, key=_order)))


def _silu_products(factors: list[Term]) -> list[Term]:
    """`a * sigmoid(a)` anywhere in a product becomes `silu(a)`."""
    remaining = list(factors)
    changed = True
    while changed:
        changed = False
        for i, gate in enumerate(remaining):
            if gate.op != "sigmoid":
                continue
            for j, data in enumerate(remaining):
                if j != i and data == gate.args[0]:
                    remaining = [t for k, t in enumerate(remaining) if k not in (i, j)]
                    remaining.append(apply("silu", data))
                    changed = True
                    break
            if changed:
                break
    return remaining


def evaluate(term: Term, values: dict[str, np.ndarray]) -> np.ndarray:
    """The term's value with leaves taken from `values` (float64 arithmetic through the
    emulator's op definitions)."""
    if term.is_const:
        assert term.value is not None
        return np.asarray(term.value, dtype=np.float64)
    if term.is_leaf:
        return values[term.key]
    args = [evaluate(a, values) for a in term.args]
    if term.op == "add":
        return np.asarray(sum(args[1:], args[0]))
    if term.op == "multiply":
        out = args[0]
        for a in args[1:]:
            out = out * a
        return np.asarray(out)
    fn = op_spec(term.op).fn
    return np.asarray(fn(*args), dtype=np.float64)


def leaves(term: Term) -> dict[str, Term]:
    found: dict[str, Term] = {}
    stack = [term]
    while stack:
        current = stack.pop()
        if current.is_leaf:
            found[current.key] = current
        stack.extend(current.args)
    return found


@dataclass
class Agreement:
    """Whether two terms computed the same numbers on random inputs, and how closely."""

    same: bool
    worst: float = 0.0
    checked: int = 0
    reason: str = field(default="")


def agree(first: Term, second: Term, *, samples: int = 256, seed: int = 0) -> Agreement:
    """Evaluate both terms on the same random leaves (inside [-4, 4], where every activation
    function the Scalar Engine offers is valid) and compare them."""
    rng = np.random.default_rng(seed)
    found = leaves(first) | leaves(second)
    # Both signs first; positive inputs only when the chain is undefined for most of those
    # (a square root or a logarithm of its input).
    for low in (-4.0, 0.05):
        values = {key: rng.uniform(low, 4.0, size=samples if t.kind == "tile" else 1) for key, t in found.items()}
        with np.errstate(all="ignore"):
            a = np.broadcast_to(evaluate(first, values), (samples,))
            b = np.broadcast_to(evaluate(second, values), (samples,))
        finite = np.isfinite(a) & np.isfinite(b)
        if finite.sum() >= samples // 2:
            break
    else:
        return Agreement(False, reason="the chain is not finite on most inputs")
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return Agreement(False, reason="the two forms disagree on where the result is finite")
    scale = np.maximum(np.abs(a[finite]), 1.0)
    worst = float(np.max(np.abs(a[finite] - b[finite]) / scale)) if finite.any() else 0.0
    return Agreement(worst < 1e-6, worst, int(finite.sum()), "" if worst < 1e-6 else f"differ by {worst:.1e}")
