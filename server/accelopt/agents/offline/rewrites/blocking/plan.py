"""The vocabulary of block_accumulators: what the analysis finds (the plan, its groups of
per-member statements, the loads and stores made wide) and the small syntax helpers every part
of the rewrite uses."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.facts import ALLOCATORS
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    base_name,
    dotted,
    names_in,
)

FACTORS = (2, 4)


PSUM_BANKS = 8


PSUM_BANK_BYTES = 2048


TENSOR_ENGINE_APIS = {"nc_matmul", "matmul"}


@dataclass
class WideLoad:
    """A load of one C-wide tile per member that becomes one F*C-wide load before the block."""

    stmt: cst.SimpleStatementLine
    call: cst.Call
    width: int
    readers: list[cst.BaseExpression]  # Name uses (a tile) or Subscript reads (a buffer)
    # A buffer target (compiler-generated style) stays a buffer, its free size made F*C.
    allocation: cst.Call | None = None
    new_name: str = ""


@dataclass
class WideStore:
    """A store of one C-wide output tile per member that becomes one F*C-wide store after the
    block, from an SBUF tile the members fill."""

    stmt: cst.SimpleStatementLine
    call: cst.Call
    width: int
    partitions: cst.BaseExpression  # the tile's partition extent, as written in the kernel
    grid: bool  # the destination's free index is an arange grid (else a slice)
    producer: cst.SimpleStatementLine | None  # the member computing the value, redirected
    new_name: str = ""


@dataclass
class Group:
    """A run of consecutive `j`-dependent statements of one loop body, run for every member."""

    owner: cst.For
    positions: list[int]
    loads: dict[int, WideLoad] = field(default_factory=dict)
    # Loads written inside another member's call (`nc_matmul(a, nl.load(w[...]))`).
    inline: list[WideLoad] = field(default_factory=list)
    stores: dict[int, WideStore] = field(default_factory=dict)
    defs: list[cst.SimpleStatementLine] = field(default_factory=list)  # index definitions to copy in


@dataclass
class BlockPlan:
    loop: Loop
    variant: set[str]
    defs: dict[str, cst.SimpleStatementLine]  # index definitions (`cols = slice(...)`) in the nest
    demoted: list[cst.Subscript]  # buffer accesses whose `j` block index becomes `j_blk`
    expanded: dict[str, cst.Call]  # accumulator -> its allocation call
    groups: dict[int, list[Group]]  # id(owner For) -> its groups, in order
    member_of: dict[int, Group]  # id(statement) -> its group (statements nested in a unit too)
    shared: list[str]  # what now runs once per block (for the description)
    def_ids: set[int] = field(default_factory=set)  # id() of every index definition in the nest
    reductions: list[cst.Arg] = field(default_factory=list)  # loop_indices of loop_reduce calls over j
    factors: list[int] = field(default_factory=list)
    trip: int | None = None


def is_filler(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.BaseString))
        for s in stmt.body
    )


def single_assign(stmt: cst.BaseStatement) -> cst.Assign | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return small
    return None


def known_assign(stmt: cst.BaseStatement) -> cst.Assign:
    """`single_assign` of a statement the plan already found to be one (its definitions, loads
    and allocations)."""
    assign = single_assign(stmt)
    if assign is None:
        raise ValueError(f"not a single assignment: {cst.Module([]).code_for_node(stmt).strip()}")
    return assign


def bindings(view: KernelView, name: str, root: cst.CSTNode | None = None) -> int:
    """Statements binding `name` (an accumulation `name += ...` updates, it does not bind), in
    the kernel or under `root`."""
    count = 0
    for stmt in view.statements(root):
        if isinstance(stmt, cst.For):
            count += name in names_in(stmt.target)
        elif isinstance(stmt, cst.SimpleStatementLine):
            augmented = all(
                isinstance(s, cst.AugAssign) and isinstance(s.target, cst.Name) and s.target.value == name
                for s in stmt.body
            )
            count += name in view.access(stmt).rebinds and not augmented
    return count


def allocates(view: KernelView, stmt: cst.BaseStatement, name: str) -> bool:
    assign = single_assign(stmt)
    return (
        assign is not None
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == name
        and isinstance(assign.value, cst.Call)
        and view.callee(assign.value).name in ALLOCATORS
    )


def writes_name(view: KernelView, stmt: cst.CSTNode | None, name: str) -> bool:
    return stmt is not None and name in view.access(stmt).writes


def squash(text: str) -> str:
    return "".join(text.split())


def is_name(expr: cst.BaseExpression, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def precedes(view: KernelView, node: cst.CSTNode, stmt: cst.BaseStatement) -> bool:
    return view.line(node) <= view.line(stmt) and not view.contains(stmt, node)


def target_name(stmt: cst.BaseStatement) -> str:
    assign = single_assign(stmt)
    if assign is None:
        return "tile"
    return base_name(assign.targets[0].target) or "tile"


def paren(text: str) -> str:
    return text if text.replace("_", "").isalnum() else f"({text})"


def free_axis(grid: cst.Subscript) -> bool:
    for position, el in enumerate(grid.slice):
        if isinstance(el.slice, cst.Slice):
            return position > 0
    return False


def is_par_dim(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and (dotted(expr.func) or "").endswith("par_dim")


def inline_element(plan: BlockPlan, element: cst.BaseSlice) -> cst.BaseSlice:
    """An index element with the loop's index definitions written out (`cols` -> its slice)."""
    if isinstance(element, cst.Index) and isinstance(element.value, cst.Name):
        stmt = plan.defs.get(element.value.value)
        if stmt is not None:
            value = known_assign(stmt).value
            if isinstance(value, cst.Call) and len(value.args) == 2:
                lower, upper = (a.value for a in value.args)
                return cst.Slice(lower=inline_definitions(plan, lower), upper=inline_definitions(plan, upper))
    if isinstance(element, cst.Index):
        return element.with_changes(value=inline_definitions(plan, element.value))
    if isinstance(element, cst.Slice):
        return element.with_changes(
            lower=inline_definitions(plan, element.lower) if element.lower is not None else None,
            upper=inline_definitions(plan, element.upper) if element.upper is not None else None,
        )
    return element


def inline_definitions(plan: BlockPlan, expr: cst.BaseExpression) -> cst.BaseExpression:
    inlined = expr.visit(_Inliner(plan))
    assert isinstance(inlined, cst.BaseExpression)  # _Inliner replaces names with expressions
    return inlined


class _Inliner(cst.CSTTransformer):
    def __init__(self, plan: BlockPlan) -> None:
        self.plan = plan

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        stmt = self.plan.defs.get(original_node.value)
        if stmt is None:
            return updated_node
        value = known_assign(stmt).value
        if isinstance(value, cst.Call):
            return updated_node
        return inline_definitions(self.plan, value).with_changes(
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
        )
