"""Covering a normalised elementwise term with the engines' fused instructions.

The NeuronCore's elementwise instructions each do more than one operation:
- `nisa.activation(op, data, scale, bias)` computes `op(data * scale + bias)` on the Scalar
  Engine, `scale` a number or a [P, 1] column and `bias` a [P, 1] column (NKI ISA reference,
  nki.isa.activation);
- `nisa.tensor_scalar(data, op0, operand0, op1=, operand1=)` applies one or two operations with
  a number or column operand in one pass (nki.isa.tensor_scalar);
- `nisa.scalar_tensor_tensor(data, op0, operand0, op1, operand1)` is `(data op0 operand0) op1
  operand1` with `operand1` a tile (nki.isa.scalar_tensor_tensor);
- `nisa.tensor_tensor(data1, data2, op)` (a divide included, so `a * (1 / b)` is one
  instruction) and `nisa.reciprocal(data)`.

`select` picks, top down, the instruction that covers the most of the term at each node
(maximal munch), so a chain becomes as few instructions as these forms allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelopt.agents.offline.terms import NARY, UNARY, Term, apply, const, leaves, normalise


class NoForm(Exception):
    """The term has no instruction form (e.g. it computes only scalars)."""


@dataclass
class Step:
    op: str  # add | multiply | maximum | minimum
    operand: Term  # a number or a column


@dataclass
class Instr:
    kind: str  # leaf | activation | tensor_scalar | scalar_tensor_tensor | tensor_tensor | reciprocal
    term: Term | None = None  # leaf
    func: str = ""  # activation function
    data: Instr | None = None
    other: Instr | None = None  # tensor_tensor's second tile, scalar_tensor_tensor's operand1
    steps: list[Step] = field(default_factory=list)  # tensor_scalar ops; scalar_tensor_tensor op0
    op: str = ""  # tensor_tensor op, scalar_tensor_tensor op1
    scale: Term | None = None
    bias: Term | None = None

    def count(self) -> int:
        if self.kind == "leaf":
            return 0
        return 1 + sum(c.count() for c in (self.data, self.other) if c is not None)

    def inner(self) -> list[Instr]:
        """The instructions under this one, inputs first (post-order), this one excluded."""
        found: list[Instr] = []
        for child in (self.data, self.other):
            if child is not None and child.kind != "leaf":
                found.extend(child.inner())
                found.append(child)
        return found

    def as_term(self) -> Term:
        """What the instruction tree computes, as a term (to check it against the chain)."""
        if self.kind == "leaf":
            assert self.term is not None
            return self.term
        assert self.data is not None
        x = self.data.as_term()
        if self.kind == "activation":
            if self.scale is not None:
                x = apply("multiply", x, self.scale)
            if self.bias is not None:
                x = apply("add", x, self.bias)
            return apply(self.func, x)
        if self.kind == "reciprocal":
            return apply("reciprocal", x)
        if self.kind == "tensor_scalar":
            for step in self.steps:
                x = apply(step.op, x, step.operand)
            return x
        assert self.other is not None
        y = self.other.as_term()
        if self.kind == "scalar_tensor_tensor":
            step = self.steps[0]
            return apply(self.op, apply(step.op, x, step.operand), y)
        return apply(self.op, x, y)

    def describe(self) -> str:
        if self.kind == "activation":
            return f"{self.func} activation"
        return self.kind.replace("_", " ")


def leaf_instr(term: Term) -> Instr:
    return Instr("leaf", term=term)


def select(term: Term) -> Instr:
    """Instructions that compute the (normalised) term."""
    if any(t.kind == "other" for t in leaves(term).values()):
        raise NoForm("the chain reads a value that is neither a tile nor a compile-time constant")
    return _select(term)


def _column_valued(term: Term) -> bool:
    """A computed [P, 1] value: every tile it reads is a column."""
    if term.is_leaf or term.is_const:
        return False
    kinds = {t.kind for t in leaves(term).values()}
    return "column" in kinds and "tile" not in kinds


def _select(term: Term) -> Instr:
    if not _column_valued(term) and any(_column_valued(a) for a in term.args):
        # A computed column next to full tiles would be an instruction operand (a broadcast the
        # tile-tile instructions do not do): the column's own chain is fused on its own.
        raise NoForm("a computed column feeds a full-tile operation")
    if term.is_leaf:
        if term.kind not in ("tile", "column"):
            raise NoForm("a chain that only reads scalars")
        return leaf_instr(term)
    if term.is_const:
        raise NoForm("a constant")
    if term.op in UNARY:
        return _unary(term)
    if term.op in ("maximum", "minimum"):
        first, second = term.args
        if second.is_scalar_like and not first.is_scalar_like:
            return _scalar_steps(_select(first), [Step(term.op, second)])
        if first.is_scalar_like and not second.is_scalar_like:
            return _scalar_steps(_select(second), [Step(term.op, first)])
        return Instr("tensor_tensor", data=_select(first), other=_select(second), op=term.op)
    if term.op in NARY:
        return _nary(term)
    raise NoForm(f"no instruction computes {term.op}")


def _unary(term: Term) -> Instr:
    (arg,) = term.args
    if term.op == "reciprocal":
        return Instr("reciprocal", data=_select(arg))
    data, scale, bias = split_affine(arg)
    return Instr("activation", func=term.op, data=_select(data), scale=scale, bias=bias)


def split_affine(arg: Term) -> tuple[Term, Term | None, Term | None]:
    """(data, scale, bias) with arg = data * scale + bias, the bias a column (the legacy
    instruction takes no number as bias) and the scale a number or a column."""
    bias = None
    rest = arg
    if arg.op == "add":
        columns = [a for a in arg.args if a.is_leaf and a.kind == "column"]
        if columns:
            bias = columns[0]
            others = [a for a in arg.args if a is not bias]
            rest = normalise(Term("add", tuple(others))) if len(others) > 1 else others[0]
    scale = None
    if rest.op == "multiply":
        scalars = [a for a in rest.args if a.is_scalar_like]
        tiles = [a for a in rest.args if not a.is_scalar_like]
        if len(scalars) == 1 and tiles:
            scale = scalars[0]
            rest = normalise(Term("multiply", tuple(tiles))) if len(tiles) > 1 else tiles[0]
    return rest, scale, bias


def _scalar_steps(data: Instr, steps: list[Step]) -> Instr:
    """tensor_scalar instructions applying the steps in order, two per instruction."""
    current = data
    for start in range(0, len(steps), 2):
        current = Instr("tensor_scalar", data=current, steps=steps[start : start + 2])
    return current


def _single_step(term: Term) -> tuple[Term, Step] | None:
    """(x, step) when the term is one scalar operation on one tile term: x * c, x + c."""
    if term.op not in NARY:
        return None
    scalars, tiles = _roles(term.args)
    if len(scalars) == 1 and len(tiles) == 1:
        return tiles[0], Step(term.op, scalars[0])
    return None


def _roles(args: tuple[Term, ...]) -> tuple[list[Term], list[Term]]:
    """(operands, data) of a sum or product: numbers and columns are operands, except that a
    column is the data when no full tile takes part (a [P, 1] tile is a tile too)."""
    scalars = [a for a in args if a.is_scalar_like]
    tiles = [a for a in args if not a.is_scalar_like]
    if not tiles:
        columns = [a for a in scalars if a.is_leaf and a.kind == "column"]
        if columns:
            tiles = [columns[0]]
            scalars = [a for a in scalars if a is not columns[0]]
    return scalars, tiles


def _nary(term: Term) -> Instr:
    op = term.op
    scalars, tiles = _roles(term.args)
    if not tiles:
        raise NoForm("a chain that only reads scalars")
    if len(tiles) == 1:
        x = tiles[0]
        steps = [Step(op, s) for s in scalars]
        inner = _single_step(x)
        if len(steps) == 1 and inner is not None and x.op != op:
            y, inner_step = inner
            return _scalar_steps(_select(y), [inner_step, steps[0]])
        return _scalar_steps(_select(x), steps)
    if len(tiles) == 2 and len(scalars) <= 1:
        first, second = tiles
        if scalars:  # x op c op y, one op throughout
            return Instr(
                "scalar_tensor_tensor", data=_select(first), steps=[Step(op, scalars[0])], op=op, other=_select(second)
            )
        paired = _tile_pair(op, first, second)
        if paired is not None:
            return paired
    # Fold the tiles left to right, then apply the scalar operations.
    current = _select(tiles[0])
    for other in tiles[1:]:
        current = Instr("tensor_tensor", data=current, other=_select(other), op=op)
    return _scalar_steps(current, [Step(op, s) for s in scalars])


def _tile_pair(op: str, first: Term, second: Term) -> Instr | None:
    """One instruction for `a op b` when one side is a negation (subtract), a reciprocal
    (divide) or a single scalar step (scalar_tensor_tensor)."""
    for a, b in ((first, second), (second, first)):
        if op == "add" and b.op == "multiply" and const(-1.0) in b.args:
            negated = [t for t in b.args if t != const(-1.0)]
            rest = normalise(Term("multiply", tuple(negated))) if len(negated) > 1 else negated[0]
            return Instr("tensor_tensor", data=_select(a), other=_select(rest), op="subtract")
        if op == "multiply" and b.op == "reciprocal":
            return Instr("tensor_tensor", data=_select(a), other=_select(b.args[0]), op="divide")
    for a, b in ((first, second), (second, first)):
        step = _single_step(a)
        if step is not None:
            x, first_step = step
            return Instr("scalar_tensor_tensor", data=_select(x), steps=[first_step], op=op, other=_select(b))
    return None
