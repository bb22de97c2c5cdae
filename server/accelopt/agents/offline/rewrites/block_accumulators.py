"""Block an output-tile loop: F output tiles per iteration, each with its own PSUM accumulator.

`for j in affine_range(T)` around a Tensor Engine accumulation becomes
`for j_blk in affine_range(T // F)`, and the statements that depend on `j` run in small
`for j_in in affine_range(F)` loops placed where they were (`j = F * j_blk + j_in` rebinds the old
name, so their text barely changes). Everything that does not depend on `j` now runs once per
block instead of once per tile: an operand tile loaded in the K loop feeds F accumulators (the
multi-accumulator blocking of the NKI matmul guides, NKI_NOTES §7). Two more gains come with it:

- a load of a `j`-dependent operand tile `C` columns wide (`x[..., C*j + arange(C)]`) becomes one
  DMA `F*C` wide that the F members slice, and a store of the F output tiles becomes one DMA from
  an SBUF tile gathering them: fewer, larger transfers (chunks of >= 4 KiB per partition stream
  at full rate, NKI_NOTES §4);
- a PSUM accumulator allocated in the loop gets a leading block dimension of F, one bank each.

Refused when the loop is not `affine_range` (its order may matter), when a value computed for
one `j` is used in another part of the loop and is neither an accumulator allocated in the loop
nor a buffer block-indexed by `j`, when an inner loop's range depends on `j`, when control flow
other than loops sits in the nest, or when the F accumulators would not fit the 8 PSUM banks.
A trip count not known from the source gets an assertion (F must divide it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.affine import arange_size, linear_form
from accelopt.agents.offline.facts import ALLOCATORS, memory_of
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    argument,
    base_name,
    dotted,
    keyword,
    names_in,
    walk,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

FACTORS = (2, 4)
PSUM_BANKS = 8
PSUM_BANK_BYTES = 2048
TENSOR_ENGINE_APIS = {"nc_matmul", "matmul"}


@dataclass
class _WideLoad:
    """A load of one C-wide tile per member that becomes one F*C-wide load before the block."""

    stmt: cst.SimpleStatementLine
    call: cst.Call
    width: int
    readers: list[cst.BaseExpression]  # Name uses (a tile) or Subscript reads (a buffer)
    # A buffer target (compiler-generated style) stays a buffer, its free size made F*C.
    allocation: cst.Call | None = None
    new_name: str = ""


@dataclass
class _WideStore:
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
class _Group:
    """A run of consecutive `j`-dependent statements of one loop body, run for every member."""

    owner: cst.For
    positions: list[int]
    loads: dict[int, _WideLoad] = field(default_factory=dict)
    # Loads written inside another member's call (`nc_matmul(a, nl.load(w[...]))`).
    inline: list[_WideLoad] = field(default_factory=list)
    stores: dict[int, _WideStore] = field(default_factory=dict)
    defs: list[cst.SimpleStatementLine] = field(default_factory=list)  # index definitions to copy in


@dataclass
class _Plan:
    loop: Loop
    variant: set[str]
    defs: dict[str, cst.SimpleStatementLine]  # index definitions (`cols = slice(...)`) in the nest
    demoted: list[cst.Subscript]  # buffer accesses whose `j` block index becomes `j_blk`
    expanded: dict[str, cst.Call]  # accumulator -> its allocation call
    groups: dict[int, list[_Group]]  # id(owner For) -> its groups, in order
    member_of: dict[int, _Group]  # id(statement) -> its group (statements nested in a unit too)
    shared: list[str]  # what now runs once per block (for the description)
    def_ids: set[int] = field(default_factory=set)  # id() of every index definition in the nest
    reductions: list[cst.Arg] = field(default_factory=list)  # loop_indices of loop_reduce calls over j
    factors: list[int] = field(default_factory=list)
    trip: int | None = None


class BlockAccumulators(Rewrite):
    name = "block_accumulators"
    prior = 1.0
    summary = "block an output-tile loop: several PSUM accumulators share each operand load"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            if not _feeds_tensor_engine(view, loop):
                continue
            sid = site_id(self.name, loop.line)
            title = f"block the {loop.var} loop: several PSUM accumulators per operand load"
            try:
                plan = _analyse(view, loop)
            except NotApplicable as exc:
                found.append(Refusal(self.name, sid, loop.line, f"cannot {title}: {exc.reason}"))
                continue
            loads = sum(len(g.loads) + len(g.inline) for gs in plan.groups.values() for g in gs)
            stores = sum(len(g.stores) for gs in plan.groups.values() for g in gs)
            gains = []
            if plan.shared:
                gains.append(f"{', '.join(plan.shared[:3])} run once per block instead of once per tile")
            if loads or stores:
                gains.append(f"{loads} load(s) and {stores} store(s) become one wide DMA per block")
            found.append(
                Site(
                    self.name,
                    sid,
                    _relieved_line(view, plan),
                    f"block the {loop.var} loop by {plan.factors[0]}: {plan.factors[0]} PSUM accumulators "
                    "per operand load",
                    description=(
                        f"Each block of the {loop.var} loop (line {loop.line}) computes several output "
                        f"tiles, each in its own PSUM accumulator: {'; '.join(gains)}."
                    ),
                    variants=[{"factor": f} for f in plan.factors],
                    relieves=("hbm", "latency"),
                    payload=plan,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        plan: _Plan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        return f"block the {plan.loop.var} loop by {factor}: {factor} PSUM accumulators per operand load"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        plan: _Plan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        if factor not in plan.factors:
            raise NotApplicable(f"a block of {factor} does not fit this loop (possible: {plan.factors})")
        return _Builder(view, plan, factor).render()


def _relieved_line(view: KernelView, plan: _Plan) -> int:
    """The line whose cost the blocking cuts most directly: the first load made wide, else the
    loop header."""
    loads = [
        load.stmt
        for groups in plan.groups.values()
        for g in groups
        for load in [*g.loads.values(), *g.inline]
    ]
    return min((view.line(stmt) for stmt in loads), default=plan.loop.line)


def _feeds_tensor_engine(view: KernelView, loop: Loop) -> bool:
    for call in view.calls_in(loop.node):
        callee = view.callee(call)
        if callee.namespace in ("nl", "nisa") and callee.name in TENSOR_ENGINE_APIS:
            return True
    return False


# --- analysis ------------------------------------------------------------------------------


def _analyse(view: KernelView, loop: Loop) -> _Plan:
    var = loop.var
    if loop.kind != "affine":
        raise NotApplicable(f"the {var} loop is {loop.kind}: its iterations may depend on each other")
    if loop.trip_expr is None:
        raise NotApplicable(f"the {var} loop has a start or step")
    for stmt in view.statements(loop.node):
        if isinstance(stmt, (cst.If, cst.While, cst.With, cst.Try)):
            raise NotApplicable(f"the loop holds control flow at line {view.line(stmt)}")
        if isinstance(stmt, cst.For) and view.loop_for(stmt) is None:
            raise NotApplicable(f"the loop at line {view.line(stmt)} is not an NKI range loop")
    simple = [s for s in view.simple_statements(loop.node) if not _is_filler(s)]
    defs = _index_definitions(view, loop, simple)
    variant, demotable = _variant_names(view, loop, simple)
    for inner in view.inner_loops(loop):
        if names_in(inner.node.iter) & variant:
            raise NotApplicable(f"the range of the {inner.var} loop depends on {var}")
    dependent = {id(s) for s in simple if _is_dependent(view, s, variant, demotable)}
    plan = _Plan(loop, variant, defs, [], {}, {}, {}, [])
    plan.def_ids = {id(s) for s in simple if _is_index_definition(view, s)}
    _collect_groups(view, plan, loop.node, dependent)
    if not any(plan.groups.values()):
        raise NotApplicable(f"nothing in the loop depends on {var}")
    for groups in plan.groups.values():
        for group in groups:
            _find_wide_dmas(view, plan, group)
    _check_variant_uses(view, plan, simple, demotable)
    for stmt in demotable:
        plan.demoted.extend(demotable[stmt])
    plan.shared = _shared_work(view, plan, simple, dependent)
    loads = sum(len(g.loads) + len(g.inline) + len(g.stores) for gs in plan.groups.values() for g in gs)
    if not plan.shared and not loads:
        raise NotApplicable(f"no load is shared between {var} tiles and no transfer gets wider")
    plan.trip = view.eval_int(loop.trip_expr)
    plan.factors = _factors(view, plan, simple)
    if not plan.factors and plan.trip is not None and all(plan.trip % f for f in FACTORS):
        raise NotApplicable(
            f"its trip count {plan.trip} is not a multiple of {' or '.join(map(str, FACTORS))}"
        )
    if not plan.factors:
        raise NotApplicable(
            "no block size fits the trip count and the 8 PSUM banks "
            f"({_psum_banks(view, plan, simple, 2)} banks for a block of 2)"
        )
    return plan


def _is_filler(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.BaseString))
        for s in stmt.body
    )


def _single_assign(stmt: cst.BaseStatement) -> cst.Assign | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return small
    return None


def _bindings(view: KernelView, name: str, root: cst.CSTNode | None = None) -> int:
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


def _index_definitions(
    view: KernelView, loop: Loop, simple: list[cst.SimpleStatementLine]
) -> dict[str, cst.SimpleStatementLine]:
    """`cols = slice(j * C, (j + 1) * C)`, `r0 = j * C`: names bound once to index arithmetic."""
    found: dict[str, cst.SimpleStatementLine] = {}
    for stmt in simple:
        assign = _single_assign(stmt)
        if assign is None or not isinstance(assign.targets[0].target, cst.Name):
            continue
        calls = view.calls_in(assign.value)
        if any(not (isinstance(c.func, cst.Name) and c.func.value == "slice") for c in calls):
            continue
        name = assign.targets[0].target.value
        if _bindings(view, name, loop.node) != 1:
            continue
        # Every mention in the loop must see this binding (a kernel may reuse the name elsewhere).
        owner = view.parent(view.parent(stmt) or stmt)
        uses = [u for u in view.name_uses(name, loop.node) if view.statement_of(u) is not stmt]
        if owner is not None and all(view.contains(owner, u) and not _before(view, u, stmt) for u in uses):
            found[name] = stmt
    return found


def _is_index_definition(view: KernelView, stmt: cst.SimpleStatementLine) -> bool:
    """`name = <integer arithmetic or slice(...)>` (bound once or not)."""
    assign = _single_assign(stmt)
    if assign is None or not isinstance(assign.targets[0].target, cst.Name):
        return False
    if any(isinstance(n, (cst.Subscript, cst.Attribute)) for n in walk(assign.value)):
        return False
    return all(isinstance(c.func, cst.Name) and c.func.value == "slice" for c in view.calls_in(assign.value))


def _hbm_write_only(view: KernelView, loop: Loop, name: str) -> bool:
    """An HBM tensor the loop only stores to (a kernel output)."""
    if memory_of(view, name) != "hbm":
        return False
    for use in view.name_uses(name, loop.node):
        parent = view.parent(use)
        if isinstance(parent, cst.Attribute) and parent.attr.value in ("dtype", "shape"):
            continue
        call = _enclosing_call(view, use)
        if call is None or view.destination_of(call) is None or base_name(view.destination_of(call)) != name:
            return False
    return True


def _enclosing_call(view: KernelView, node: cst.CSTNode) -> cst.Call | None:
    for anc in view.ancestors(node):
        if isinstance(anc, cst.Call):
            return anc
        if isinstance(anc, cst.BaseStatement):
            return None
    return None


def _demotion(
    view: KernelView, loop: Loop, stmt: cst.SimpleStatementLine, variant: set[str]
) -> list[cst.Subscript] | None:
    """A statement that computes the same value for every `j` and only writes it to the block `j`
    of a buffer (compiler-generated style, `t[i0, j, k, ...] = nl.load(...)`): it can run once per
    block, writing (and its readers reading) the block `j_blk`. The accesses to re-index, or None."""
    assign = _single_assign(stmt)
    if assign is None or not isinstance(assign.targets[0].target, cst.Subscript):
        return None
    target = assign.targets[0].target
    if names_in(assign.value) & variant or view.destination_of_calls(assign.value):
        return None
    elements = [el.slice for el in target.slice]
    on_var = [
        i
        for i, el in enumerate(elements)
        if isinstance(el, cst.Index) and isinstance(el.value, cst.Name) and el.value.value == loop.var
    ]
    if not on_var:
        return None
    others = set()
    for i, el in enumerate(elements):
        if i not in on_var:
            others |= names_in(el)
    if others & variant:
        return None
    buffer = base_name(target)
    if buffer is None or memory_of(view, buffer) not in ("sbuf", "psum"):
        return None
    # Every access must pick the same blocks (the tile inside a block may differ).
    text = _block_text(view, target)
    accesses: list[cst.Subscript] = [target]
    for use in view.name_uses(buffer):
        parent = view.parent(use)
        owner = view.statement_of(use)
        if owner is stmt or (owner is not None and _allocates(view, owner, buffer)):
            continue
        if not isinstance(parent, cst.Subscript) or _block_text(view, parent) != text:
            return None
        if not view.contains(loop.node, parent) or _writes_name(view, owner, buffer):
            return None
        accesses.append(parent)
    return accesses


def _block_text(view: KernelView, sub: cst.Subscript) -> str | None:
    """The block indices of a buffer access (all but the partition and free elements)."""
    if len(sub.slice) < 3:
        return None
    return _squash(",".join(view.code(el.slice) for el in list(sub.slice)[:-2]))


def _writes_name(view: KernelView, stmt: cst.CSTNode | None, name: str) -> bool:
    return stmt is not None and name in view.access(stmt).writes


def _allocates(view: KernelView, stmt: cst.BaseStatement, name: str) -> bool:
    assign = _single_assign(stmt)
    return (
        assign is not None
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == name
        and isinstance(assign.value, cst.Call)
        and view.callee(assign.value).name in ALLOCATORS
    )


def _squash(text: str) -> str:
    return "".join(text.split())


def _variant_names(
    view: KernelView, loop: Loop, simple: list[cst.SimpleStatementLine]
) -> tuple[set[str], dict[cst.SimpleStatementLine, list[cst.Subscript]]]:
    """Names whose value differs between `j` tiles (fixed point from `j`), and the statements that
    are invariant once their buffer's `j` block index is demoted."""
    variant = {loop.var}
    demotable: dict[cst.SimpleStatementLine, list[cst.Subscript]] = {}
    changed = True
    while changed:
        changed = False
        demotable = {}
        for stmt in simple:
            accesses = _demotion(view, loop, stmt, variant)
            if accesses is not None:
                demotable[stmt] = accesses
                continue
            acc = view.access(stmt)
            if acc.reads & variant and not acc.writes <= variant:
                variant |= acc.writes
                changed = True
    return variant, demotable


def _is_dependent(
    view: KernelView,
    stmt: cst.SimpleStatementLine,
    variant: set[str],
    demotable: dict[cst.SimpleStatementLine, list[cst.Subscript]],
) -> bool:
    if stmt in demotable:
        return False
    acc = view.access(stmt)
    if acc.reads & variant:
        return True
    written = acc.writes & variant
    return bool(written) and not any(_allocates(view, stmt, n) for n in written)


def _collect_groups(view: KernelView, plan: _Plan, owner: cst.For, dependent: set[int]) -> None:
    """Runs of dependent statements (and loops whose every statement depends on `j`) per body."""
    block = owner.body
    assert isinstance(block, cst.IndentedBlock)
    groups: list[_Group] = []
    run: list[int] = []

    def close() -> None:
        if run:
            groups.append(_Group(owner, list(run)))
            run.clear()

    for position, stmt in enumerate(block.body):
        if isinstance(stmt, cst.SimpleStatementLine):
            if id(stmt) in dependent:
                run.append(position)
            else:
                close()
        elif isinstance(stmt, cst.For):
            # A loop whose work all depends on `j` runs whole for each member (index
            # definitions inside it, such as a rebound loop variable, come along).
            inner = [s for s in view.simple_statements(stmt) if not _is_filler(s)]
            work = [s for s in inner if id(s) not in plan.def_ids]
            # A loop that loads stays open, so that its loads can become wide ones.
            loads = any(view.is_call(c, "nl", "load") for s in work for c in view.calls_in(s))
            if work and not loads and all(id(s) in dependent for s in work):
                run.append(position)
            else:
                close()
                _collect_groups(view, plan, stmt, dependent)
        else:
            close()
    close()
    plan.groups[id(owner)] = groups
    for group in groups:
        for position in group.positions:
            stmt = block.body[position]
            plan.member_of[id(stmt)] = group
            for nested in view.statements(stmt):
                plan.member_of[id(nested)] = group


def _check_variant_uses(
    view: KernelView,
    plan: _Plan,
    simple: list[cst.SimpleStatementLine],
    demotable: dict[cst.SimpleStatementLine, list[cst.Subscript]],
) -> None:
    """Every value that differs between tiles must stay apart per member: a temporary used only
    in its own group, a buffer block-indexed by `j`, or an accumulator allocated in the loop
    (which gets a block dimension). Anything else would be overwritten by the next member."""
    loop = plan.loop
    # Tiles of wide loads are written once per block, before the members read their slices.
    widened = {
        _target_name(load.stmt)
        for groups in plan.groups.values()
        for g in groups
        for load in g.loads.values()
    }
    for name in sorted(plan.variant - {loop.var}):
        if name in plan.defs or name in widened or _hbm_write_only(view, loop, name):
            continue
        if _loop_reduction(view, plan, name) is not None:
            continue
        uses = [u for u in view.name_uses(name) if view.contains(loop.node, u)]
        if not uses:
            continue
        if _group_local(view, plan, name, uses):
            continue
        if _indexed_by_var(view, loop.var, uses):
            continue
        allocation = _loop_allocation(view, plan, name, simple)
        if allocation is not None:
            plan.expanded[name] = allocation
            continue
        where = view.line(uses[0])
        raise NotApplicable(
            f"{name} (line {where}) holds a different value for each {loop.var} and is used across "
            f"parts of the loop: it is neither an accumulator allocated in the loop nor indexed by {loop.var}"
        )


def _loop_reduction(view: KernelView, plan: _Plan, name: str) -> cst.Arg | None:
    """`name = nl.loop_reduce(x, op, loop_indices=[..., j, ...])`, the only mention of `name` in
    the loop: a reduction over `j` that, blocked, reduces over the block and member loops. Its
    `loop_indices` argument, or None."""
    loop = plan.loop
    uses = [u for u in view.name_uses(name) if view.contains(loop.node, u)]
    stmts = {id(view.statement_of(u)) for u in uses}
    if len(stmts) != 1:
        return None
    assign = _single_assign(view.statement_of(uses[0]))  # type: ignore[arg-type]
    if assign is None or not _is_name(assign.targets[0].target, name):
        return None
    if not view.is_call(assign.value, "nl", "loop_reduce") or name in names_in(assign.value):
        return None
    indices = keyword(assign.value, "loop_indices")  # type: ignore[arg-type]
    if indices is None or not isinstance(indices.value, (cst.List, cst.Tuple)):
        return None
    if not any(_is_name(e.value, loop.var) for e in indices.value.elements):
        return None
    if id(view.statement_of(uses[0])) not in plan.member_of:
        return None
    plan.reductions.append(indices)
    return indices


def _group_local(view: KernelView, plan: _Plan, name: str, uses: list[cst.Name]) -> bool:
    """A temporary bound once and used only inside one group: each member rebinds it before use."""
    groups = [plan.member_of.get(id(view.statement_of(u))) for u in uses]
    if any(g is None for g in groups) or any(g is not groups[0] for g in groups):
        return False
    return _bindings(view, name) == 1


def _indexed_by_var(view: KernelView, var: str, uses: list[cst.Name]) -> bool:
    for use in uses:
        parent = view.parent(use)
        if not isinstance(parent, cst.Subscript) or parent.value is not use:
            return False
        if not any(
            isinstance(el.slice, cst.Index)
            and isinstance(el.slice.value, cst.Name)
            and el.slice.value.value == var
            for el in parent.slice
        ):
            return False
    return True


def _loop_allocation(
    view: KernelView, plan: _Plan, name: str, simple: list[cst.SimpleStatementLine]
) -> cst.Call | None:
    """The allocation of an accumulator in the loop nest, when all its other uses are in groups
    inside the body that allocates it."""
    found = [s for s in simple if _allocates(view, s, name)]
    if len(found) != 1 or _bindings(view, name) != 1:
        return None
    alloc = found[0]
    if id(alloc) in plan.member_of:
        return None
    call = _single_assign(alloc).value  # type: ignore[union-attr]
    assert isinstance(call, cst.Call)
    shape = argument(call, 0, "shape")
    if not isinstance(shape, cst.Tuple):
        return None
    owner = view.parent(view.parent(alloc) or alloc)
    for use in view.name_uses(name):
        stmt = view.statement_of(use)
        if stmt is alloc:
            continue
        if stmt is None or id(stmt) not in plan.member_of or owner is None or not view.contains(owner, use):
            return None
    return call


# --- wide transfers ------------------------------------------------------------------------


def _inline_element(view: KernelView, plan: _Plan, element: cst.BaseSlice) -> cst.BaseSlice:
    """An index element with the loop's index definitions written out (`cols` -> its slice)."""
    if isinstance(element, cst.Index) and isinstance(element.value, cst.Name):
        stmt = plan.defs.get(element.value.value)
        if stmt is not None:
            value = _single_assign(stmt).value  # type: ignore[union-attr]
            if isinstance(value, cst.Call) and len(value.args) == 2:
                lower, upper = (a.value for a in value.args)
                return cst.Slice(lower=_inline(plan, lower), upper=_inline(plan, upper))
    if isinstance(element, cst.Index):
        return element.with_changes(value=_inline(plan, element.value))
    if isinstance(element, cst.Slice):
        return element.with_changes(
            lower=_inline(plan, element.lower) if element.lower is not None else None,
            upper=_inline(plan, element.upper) if element.upper is not None else None,
        )
    return element


def _inline(plan: _Plan, expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.visit(_Inliner(plan))  # type: ignore[return-value]


class _Inliner(cst.CSTTransformer):
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        stmt = self.plan.defs.get(original_node.value)
        if stmt is None:
            return updated_node
        value = _single_assign(stmt).value  # type: ignore[union-attr]
        if isinstance(value, cst.Call):
            return updated_node
        return _inline(self.plan, value).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _free_width(view: KernelView, plan: _Plan, element: cst.BaseSlice) -> tuple[int, bool] | None:
    """(C, is_grid) when the element is one C-wide tile at `C * j + ...` on a free axis."""
    var = plan.loop.var
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is None or len(form.aranges) != 1:
            return None
        grid = form.aranges[0]
        if not _free_axis(grid.node) or grid.coefficient != 1:
            return None
        if form.coefficient(var) != grid.size or (set(form.terms) - {var}) & plan.variant:
            return None
        return grid.size, True
    if isinstance(element, cst.Slice) and element.lower is not None and element.upper is not None:
        if element.step is not None:
            return None
        lo, hi = linear_form(view, element.lower), linear_form(view, element.upper)
        if lo is None or hi is None or lo.aranges or hi.aranges:
            return None
        width = hi.minus(lo)
        if not width.is_constant or width.const != lo.coefficient(var) or width.const <= 0:
            return None
        if (set(lo.terms) - {var}) & plan.variant:
            return None
        return width.const, False
    return None


def _free_axis(grid: cst.Subscript) -> bool:
    for position, el in enumerate(grid.slice):
        if isinstance(el.slice, cst.Slice):
            return position > 0
    return False


def _tile_elements(view: KernelView, plan: _Plan, sub: cst.Subscript) -> list[cst.BaseSlice]:
    """Index elements that are not single integer indices (the tile's axes); a name bound to a
    `slice(...)` is an axis."""
    axes = []
    for el in sub.slice:
        index = el.slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name):
            if _resolve_slice(view, index.value) is not None or isinstance(
                _inline_element(view, plan, index), cst.Slice
            ):
                axes.append(index)
                continue
        if isinstance(index, cst.Index):
            form = linear_form(view, index.value)
            if form is not None and not form.aranges:
                continue
        axes.append(index)
    return axes


def _only_var_in_last(view: KernelView, plan: _Plan, sub: cst.Subscript) -> bool:
    var_like = plan.variant
    for el in list(sub.slice)[:-1]:
        element = _inline_element(view, plan, el.slice)
        if names_in(element) & var_like:
            return False
    return True


def _find_wide_dmas(view: KernelView, plan: _Plan, group: _Group) -> None:
    block = group.owner.body
    assert isinstance(block, cst.IndentedBlock)
    members = [block.body[p] for p in group.positions]
    for position in group.positions:
        stmt = block.body[position]
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        load = _wide_load(view, plan, group, stmt, members)
        if load is not None:
            group.loads[position] = load
            continue
        store = _wide_store(view, plan, group, stmt, members)
        if store is not None:
            group.stores[position] = store
            continue
        for call in view.calls_in(stmt):
            if view.is_call(call, "nl", "load") and isinstance(view.parent(call), cst.Arg):
                inline = _inline_wide_load(view, plan, stmt, call)
                if inline is not None:
                    group.inline.append(inline)


def _inline_wide_load(
    view: KernelView, plan: _Plan, stmt: cst.SimpleStatementLine, call: cst.Call
) -> _WideLoad | None:
    src = _hbm_subscript(view, argument(call, 0, "src"))
    if src is None or len(_tile_elements(view, plan, src)) != 2:
        return None
    found = _widenable(view, plan, src, call)
    if found is None:
        return None
    return _WideLoad(stmt, call, found[0], [call])


def _hbm_subscript(view: KernelView, expr: cst.BaseExpression | None) -> cst.Subscript | None:
    if not isinstance(expr, cst.Subscript) or not isinstance(expr.value, cst.Name):
        return None
    return expr if memory_of(view, expr.value.value) == "hbm" else None


def _widenable(view: KernelView, plan: _Plan, sub: cst.Subscript, call: cst.Call) -> tuple[int, bool] | None:
    if not _only_var_in_last(view, plan, sub):
        return None
    found = _free_width(view, plan, _inline_element(view, plan, sub.slice[-1].slice))
    if found is None:
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value not in ("src", "dst", "value", "mask", "dtype"):
            return None
    mask = keyword(call, "mask")
    if mask is not None and (names_in(_inline(plan, mask.value)) & plan.variant) - {plan.loop.var}:
        return None
    return found


def _wide_load(
    view: KernelView, plan: _Plan, group: _Group, stmt: cst.SimpleStatementLine, members: list
) -> _WideLoad | None:
    assign = _single_assign(stmt)
    if assign is None or not view.is_call(assign.value, "nl", "load"):
        return None
    call = assign.value
    assert isinstance(call, cst.Call)
    src = _hbm_subscript(view, argument(call, 0, "src"))
    if src is None or len(_tile_elements(view, plan, src)) != 2:
        return None
    found = _widenable(view, plan, src, call)
    if found is None:
        return None
    width, _ = found
    target = assign.targets[0].target
    readers: list[cst.BaseExpression] = []
    if isinstance(target, cst.Name):
        if _bindings(view, target.value) != 1:
            return None
        for use in view.name_uses(target.value):
            if use is target:
                continue
            if not _later_member(view, plan, group, use, stmt):
                return None
            readers.append(use)
    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
        buffer = target.value.value
        text = _squash(view.code(target))
        allocation = _buffer_allocation(view, buffer)
        if allocation is None or not _grid_reader(view, target, width):
            return None
        for el in list(target.slice)[:-2]:
            index = el.slice
            blocks = names_in(index)
            if blocks & plan.variant and not (
                isinstance(index, cst.Index) and _is_name(index.value, plan.loop.var)
            ):
                return None
        for use in view.name_uses(buffer):
            owner = view.statement_of(use)
            if owner is stmt or (owner is not None and _allocates(view, owner, buffer)):
                continue
            parent = view.parent(use)
            if not isinstance(parent, cst.Subscript) or _squash(view.code(parent)) != text:
                return None
            if not _later_member(view, plan, group, use, stmt):
                return None
            if _writes_name(view, owner, buffer) or not _grid_reader(view, parent, width):
                return None
            readers.append(parent)
    else:
        return None
    if not readers:
        return None
    if isinstance(target, cst.Subscript):
        return _WideLoad(stmt, call, width, readers, allocation)
    return _WideLoad(stmt, call, width, readers)


def _is_name(expr: cst.BaseExpression, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _buffer_allocation(view: KernelView, buffer: str) -> cst.Call | None:
    """The allocator call of a buffer bound once, when its shape is a tuple."""
    if _bindings(view, buffer) != 1:
        return None
    for stmt in view.simple_statements():
        if _allocates(view, stmt, buffer):
            call = _single_assign(stmt).value  # type: ignore[union-attr]
            assert isinstance(call, cst.Call)
            shape = argument(call, 0, "shape")
            return call if isinstance(shape, cst.Tuple) and len(shape.elements) >= 2 else None
    return None


def _later_member(
    view: KernelView, plan: _Plan, group: _Group, use: cst.CSTNode, load: cst.BaseStatement
) -> bool:
    """A read inside a member loop (this group's or a later one's in the same body, nested or
    not) that runs after the wide load: the wide tile is there for it."""
    return (
        plan.member_of.get(id(view.statement_of(use))) is not None
        and view.contains(group.owner, use)
        and not _before(view, use, load)
    )


def _grid_reader(view: KernelView, sub: cst.Subscript, width: int) -> bool:
    """A buffer read `buf[blocks..., P-grid, arange(C)[None, :]]`."""
    if len(sub.slice) < 2:
        return False
    last = sub.slice[-1].slice
    if not isinstance(last, cst.Index):
        return False
    return (
        arange_size(view, last.value) == width
        and isinstance(last.value, cst.Subscript)
        and _free_axis(last.value)
    )


def _before(view: KernelView, node: cst.CSTNode, stmt: cst.BaseStatement) -> bool:
    return view.line(node) <= view.line(stmt) and not view.contains(stmt, node)


def _wide_store(
    view: KernelView, plan: _Plan, group: _Group, stmt: cst.SimpleStatementLine, members: list
) -> _WideStore | None:
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Expr):
        return None
    call = stmt.body[0].value
    if not view.is_call(call, "nl", "store"):
        return None
    assert isinstance(call, cst.Call)
    dst = _hbm_subscript(view, argument(call, 0, "dst"))
    value = argument(call, 1, "value")
    if dst is None or value is None:
        return None
    axes = _tile_elements(view, plan, dst)
    if len(axes) != 2:
        return None
    found = _widenable(view, plan, dst, call)
    if found is None:
        return None
    width, grid = found
    partitions = _partition_extent(view, axes[0])
    if partitions is None:
        return None
    producer = _sole_producer(view, plan, group, stmt, value, members)
    return _WideStore(stmt, call, width, partitions, grid, producer)


def _partition_extent(view: KernelView, element: cst.BaseSlice) -> cst.BaseExpression | None:
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is not None and len(form.aranges) == 1 and not _free_axis(form.aranges[0].node):
            return cst.Integer(str(form.aranges[0].size))
        if isinstance(element.value, cst.Name):
            resolved = _resolve_slice(view, element.value)
            if resolved is not None:
                return _partition_extent(view, resolved)
        return None
    if isinstance(element, cst.Slice) and element.lower is not None and element.upper is not None:
        lo, hi = linear_form(view, element.lower), linear_form(view, element.upper)
        if lo is not None and hi is not None and hi.minus(lo).is_constant:
            return cst.Integer(str(hi.minus(lo).const))
    return None


def _resolve_slice(view: KernelView, name: cst.Name) -> cst.Slice | None:
    """`rows` bound once in the kernel to `slice(lo, hi)`, as `lo:hi`."""
    if _bindings(view, name.value) != 1:
        return None
    for stmt in view.simple_statements():
        assign = _single_assign(stmt)
        if (
            assign is not None
            and isinstance(assign.targets[0].target, cst.Name)
            and assign.targets[0].target.value == name.value
            and isinstance(assign.value, cst.Call)
            and isinstance(assign.value.func, cst.Name)
            and assign.value.func.value == "slice"
            and len(assign.value.args) == 2
        ):
            return cst.Slice(lower=assign.value.args[0].value, upper=assign.value.args[1].value)
    return None


def _sole_producer(
    view: KernelView,
    plan: _Plan,
    group: _Group,
    store: cst.SimpleStatementLine,
    value: cst.BaseExpression,
    members: list[cst.BaseStatement],
) -> cst.SimpleStatementLine | None:
    """The group member that computes the stored value and whose result nothing else reads: it
    can write the gathering tile directly."""
    name = base_name(value)
    if name is None or not isinstance(value, (cst.Name, cst.Subscript)):
        return None
    text = _squash(view.code(value))
    producer = None
    for use in view.name_uses(name):
        owner = view.statement_of(use)
        if owner is store:
            continue
        if owner is not None and _allocates(view, owner, name):
            continue
        assign = _single_assign(owner) if owner is not None else None
        if (
            assign is None
            or not any(owner is m for m in members)
            or _squash(view.code(assign.targets[0].target)) != text
            or producer is not None
        ):
            return None
        producer = owner
    if producer is not None and isinstance(value, cst.Name) and _bindings(view, name) != 1:
        return None
    return producer


# --- what is shared, what fits --------------------------------------------------------------


def _shared_work(
    view: KernelView, plan: _Plan, simple: list[cst.SimpleStatementLine], dependent: set[int]
) -> list[str]:
    """Loads and Tensor Engine work that no longer repeat for every tile (deeper than the loop
    body itself: a statement directly in the loop body would have been hoisted)."""
    shared = []
    for stmt in simple:
        if id(stmt) in dependent or _allocates_any(view, stmt):
            continue
        for call in view.calls_in(stmt):
            callee = view.callee(call)
            if callee.namespace == "nl" and callee.name == "load":
                src = argument(call, 0, "src")
                shared.append(f"the load of {base_name(src) if src is not None else 'an operand'}")
                break
            if callee.namespace in ("nl", "nisa") and callee.name in ("nc_transpose", "transpose"):
                shared.append("a transpose")
                break
    return shared


def _allocates_any(view: KernelView, stmt: cst.SimpleStatementLine) -> bool:
    assign = _single_assign(stmt)
    return (
        assign is not None
        and isinstance(assign.value, cst.Call)
        and view.callee(assign.value).name in ALLOCATORS
    )


def _is_par_dim(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and (dotted(expr.func) or "").endswith("par_dim")


def _psum_tile_banks(view: KernelView, call: cst.Call) -> int | None:
    """Banks a PSUM allocation occupies: its blocks times the banks of one tile."""
    shape = argument(call, 0, "shape")
    if not isinstance(shape, cst.Tuple) or len(shape.elements) < 2:
        return None
    values = [e.value for e in shape.elements]
    partition = next((i for i, v in enumerate(values) if _is_par_dim(v)), 0)
    blocks, free = 1, 4
    for i, value in enumerate(values):
        number = view.eval_int(value) if i != partition else 1
        if number is None:
            return None
        if i < partition:
            blocks *= number
        elif i > partition:
            free *= number
    return blocks * max(1, -(-free // PSUM_BANK_BYTES))


def _psum_banks(view: KernelView, plan: _Plan, simple: list[cst.SimpleStatementLine], factor: int) -> int:
    """PSUM banks the blocked loop keeps in flight: F per accumulator bank, F per Tensor Engine
    result made in a group, one per other PSUM tile."""
    banks = 0
    for name, call in plan.expanded.items():
        if memory_of(view, name) == "psum":
            per = _psum_tile_banks(view, call)
            if per is None:
                return PSUM_BANKS + 1
            banks += factor * per
    for stmt in simple:
        assign = _single_assign(stmt)
        if assign is None or not isinstance(assign.targets[0].target, cst.Name):
            continue
        name = assign.targets[0].target.value
        if name in plan.expanded:
            continue
        in_group = id(stmt) in plan.member_of
        if isinstance(assign.value, cst.Call) and view.callee(assign.value).name in ALLOCATORS:
            if memory_of(view, name) == "psum":
                banks += factor if in_group else 1
        elif any(
            view.callee(c).name in (*TENSOR_ENGINE_APIS, "nc_transpose") for c in view.calls_in(assign.value)
        ):
            banks += factor if in_group else 1
    return banks


def _factors(view: KernelView, plan: _Plan, simple: list[cst.SimpleStatementLine]) -> list[int]:
    factors = []
    for factor in FACTORS:
        if plan.trip is not None and (plan.trip < factor or plan.trip % factor):
            continue
        if _psum_banks(view, plan, simple, factor) > PSUM_BANKS:
            continue
        factors.append(factor)
    return factors


# --- the new text ----------------------------------------------------------------------------


class _Builder:
    def __init__(self, view: KernelView, plan: _Plan, factor: int) -> None:
        self.view = view
        self.plan = plan
        self.factor = factor
        self.var = plan.loop.var
        taken = {n.value for n in walk(view.module) if isinstance(n, cst.Name)}
        self.taken = taken
        self.block_var = self._fresh(f"{self.var}_blk")
        self.member_var = self._fresh(f"{self.var}_in")
        self.nl = view.alias_for("nl")
        if self.nl is None:
            raise NotApplicable("the kernel does not import neuronxcc.nki.language")
        self.edits: dict[int, object] = {}

    def _fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def render(self) -> str:
        plan, view = self.plan, self.view
        for groups in plan.groups.values():
            for group in groups:
                for load in group.loads.values():
                    load.new_name = self._fresh(f"{_target_name(load.stmt)}_wide")
                for load in group.inline:
                    src = argument(load.call, 0, "src")
                    load.new_name = self._fresh(f"{base_name(src) if src is not None else 'tile'}_wide")
                for store in group.stores.values():
                    out = base_name(argument(store.call, 0, "dst")) or "out"
                    store.new_name = self._fresh(f"{out}_block")
        for indices in plan.reductions:
            assert isinstance(indices.value, (cst.List, cst.Tuple))
            names = []
            for element in indices.value.elements:
                if _is_name(element.value, self.var):
                    names.extend([self.block_var, self.member_var])
                else:
                    names.append(view.code(element.value))
            self.edits[id(indices.value)] = cst.parse_expression(f"[{', '.join(names)}]")
        for sub in plan.demoted:
            self.edits[id(sub)] = self._demote(sub)
        for name, call in plan.expanded.items():
            self._expand(name, call)
        for groups in plan.groups.values():
            for group in groups:
                for load in group.inline:
                    self.edits[id(load.call)] = self._wide_reader(load, load.call)
                for load in group.loads.values():
                    for reader in load.readers:
                        self.edits[id(reader)] = self._wide_reader(load, reader)
                    if load.allocation is not None:
                        shape = argument(load.allocation, 0, "shape")
                        assert isinstance(shape, cst.Tuple)
                        last = shape.elements[-1].value
                        self.edits[id(last)] = cst.parse_expression(
                            f"{self.factor} * {_paren(self.view.code(last))}"
                        )
        for owner_id, groups in plan.groups.items():
            if groups:
                self._restructure(owner_id, groups)
        loop = plan.loop
        header = self._header()
        previous = self.edits.get(id(loop.node))
        trip = loop.trip_expr
        assert trip is not None
        prefix = []
        if plan.trip is None:
            prefix.append(
                cst.parse_statement(
                    f"assert {_paren(view.code(trip))} % {self.factor} == 0, "
                    f'"the blocked {self.var} loop needs a multiple of {self.factor} tiles"\n'
                )
            )

        def outer(updated: cst.CSTNode) -> object:
            node = previous(updated) if callable(previous) else updated
            assert isinstance(node, cst.For)
            node = node.with_changes(target=cst.Name(self.block_var), iter=header)
            return [*prefix, node] if prefix else node

        self.edits[id(loop.node)] = outer
        return view.render(self.edits)

    def _header(self) -> cst.Call:
        loop = self.plan.loop
        trip = loop.trip_expr
        assert trip is not None
        new_trip = cst.parse_expression(f"{_paren(self.view.code(trip))} // {self.factor}")
        args = list(loop.range_call.args)
        index = next(i for i, a in enumerate(args) if a.keyword is None)
        args[index] = args[index].with_changes(value=new_trip)
        return loop.range_call.with_changes(args=args)

    def _demote(self, sub: cst.Subscript) -> cst.Subscript:
        elements = []
        for el in sub.slice:
            index = el.slice
            if (
                isinstance(index, cst.Index)
                and isinstance(index.value, cst.Name)
                and index.value.value == self.var
            ):
                el = el.with_changes(slice=index.with_changes(value=cst.Name(self.block_var)))
            elements.append(el)
        return sub.with_changes(slice=elements)

    def _expand(self, name: str, call: cst.Call) -> None:
        view = self.view
        shape = argument(call, 0, "shape")
        assert isinstance(shape, cst.Tuple)
        values = [e.value for e in shape.elements]
        texts = [view.code(v) for v in values]
        if not any(_is_par_dim(v) for v in values):
            texts[0] = f"{self.nl}.par_dim({texts[0]})"
        self.edits[id(shape)] = cst.parse_expression(f"({self.factor}, {', '.join(texts)})")
        member = cst.Name(self.member_var)
        for use in view.name_uses(name):
            stmt = view.statement_of(use)
            if stmt is not None and _allocates(view, stmt, name):
                continue
            parent = view.parent(use)
            if isinstance(parent, cst.Subscript) and parent.value is use:
                new_elements = [cst.SubscriptElement(cst.Index(member)), *parent.slice]
                self.edits[id(parent)] = parent.with_changes(slice=new_elements)
            else:
                self.edits[id(use)] = cst.Subscript(
                    value=use, slice=[cst.SubscriptElement(cst.Index(member))]
                )

    def _wide_reader(self, load: _WideLoad, reader: cst.BaseExpression) -> cst.BaseExpression:
        width, member = load.width, self.member_var
        if isinstance(reader, (cst.Name, cst.Call)):  # a tile, or the inline load itself
            return cst.parse_expression(
                f"{load.new_name}[:, {width} * {member} : {width} * {member} + {width}]"
            )
        assert isinstance(reader, cst.Subscript)
        partition = self.view.code(reader.slice[-2].slice)
        free = self.view.code(reader.slice[-1].slice)
        if load.allocation is not None:
            blocks = "".join(f"{self._block_index(el.slice)}, " for el in list(reader.slice)[:-2])
            base = self.view.code(reader.value)
            return cst.parse_expression(f"{base}[{blocks}{partition}, {width} * {member} + {free}]")
        return cst.parse_expression(f"{load.new_name}[{partition}, {width} * {member} + {free}]")

    def _block_index(self, index: cst.BaseSlice) -> str:
        if isinstance(index, cst.Index) and _is_name(index.value, self.var):
            return self.block_var
        return self.view.code(index)

    def _widened(self, expr: cst.BaseExpression, width: int) -> str:
        """`expr` (with the loop's index definitions written out) at the first member of the
        block, C-wide grids and slices made F*C wide."""
        inlined = _inline(self.plan, expr)
        widened = inlined.visit(_Widener(self.view, self.var, self.block_var, self.factor, width))
        return self.view.code(widened)  # type: ignore[arg-type]

    def _wide_subscript(self, sub: cst.Subscript, width: int) -> str:
        last = _inline_element(self.view, self.plan, sub.slice[-1].slice)
        head = ", ".join(self.view.code(el.slice) for el in list(sub.slice)[:-1])
        base = self.view.code(sub.value)
        if isinstance(last, cst.Slice):
            assert last.lower is not None
            lower = self._widened(last.lower, width)
            new_last = f"{lower} : {lower} + {self.factor * width}"
        else:
            assert isinstance(last, cst.Index)
            new_last = self._widened(last.value, width)
        return f"{base}[{head}, {new_last}]" if head else f"{base}[{new_last}]"

    def _call_text(self, call: cst.Call, first: str, width: int, value: str | None = None) -> str:
        func = self.view.code(call.func)
        parts = [first]
        for arg in call.args[1:] if call.args and call.args[0].keyword is None else call.args:
            if arg.keyword is not None and arg.keyword.value in ("src", "dst"):
                continue
            name = arg.keyword.value if arg.keyword is not None else "value"
            if name == "value" and value is not None:
                parts.append(f"value={value}")
            elif name == "mask":
                parts.append(f"mask={self._widened(arg.value, width)}")
            else:
                parts.append(f"{name}={self.view.code(arg.value)}")
        return f"{func}({', '.join(parts)})"

    def _wide_load_stmt(self, load: _WideLoad) -> cst.BaseStatement:
        src = argument(load.call, 0, "src")
        assert isinstance(src, cst.Subscript)
        text = self._call_text(load.call, self._wide_subscript(src, load.width), load.width)
        if load.allocation is None:
            return cst.parse_statement(f"{load.new_name} = {text}\n")
        target = _single_assign(load.stmt).targets[0].target  # type: ignore[union-attr]
        assert isinstance(target, cst.Subscript)
        blocks = "".join(f"{self._block_index(el.slice)}, " for el in list(target.slice)[:-2])
        partition = self.view.code(target.slice[-2].slice)
        free = self.view.code(
            target.slice[-1].slice.value.visit(  # type: ignore[attr-defined]
                _Widener(self.view, None, self.block_var, self.factor, load.width)
            )
        )
        return cst.parse_statement(f"{self.view.code(target.value)}[{blocks}{partition}, {free}] = {text}\n")

    def _store_parts(self, store: _WideStore) -> tuple[cst.BaseStatement, cst.BaseStatement, str]:
        """(allocation of the gathering tile, the wide store, the member's slice of the tile)."""
        dst = argument(store.call, 0, "dst")
        assert isinstance(dst, cst.Subscript)
        view, nl, f, c, m = self.view, self.nl, self.factor, store.width, self.member_var
        parts = view.code(store.partitions)
        out = base_name(dst)
        alloc = cst.parse_statement(
            f"{store.new_name} = {nl}.ndarray(({nl}.par_dim({parts}), {f * c}), dtype={out}.dtype, buffer={nl}.sbuf)\n"
        )
        if store.grid:
            piece = f"{store.new_name}[{nl}.arange({parts})[:, None], {c} * {m} + {nl}.arange({c})[None, :]]"
        else:
            piece = f"{store.new_name}[:, {c} * {m} : {c} * {m} + {c}]"
        text = self._call_text(store.call, self._wide_subscript(dst, c), c, value=store.new_name)
        return alloc, cst.parse_statement(text + "\n"), piece

    def _restructure(self, owner_id: int, groups: list[_Group]) -> None:
        view, plan = self.view, self.plan
        owner = groups[0].owner
        block = owner.body
        assert isinstance(block, cst.IndentedBlock)
        original = list(block.body)
        starts = {g.positions[0]: g for g in groups}
        inside = {p for g in groups for p in g.positions}
        # Pieces computed from the original text (they hold no other edited node).
        prepared: dict[int, tuple[list[cst.BaseStatement], list[cst.BaseStatement], dict[int, str]]] = {}
        for group in groups:
            before: list[cst.BaseStatement] = [
                self._wide_load_stmt(ld) for ld in [*group.loads.values(), *group.inline]
            ]
            after: list[cst.BaseStatement] = []
            pieces: dict[int, str] = {}
            for position, store in group.stores.items():
                alloc, wide, piece = self._store_parts(store)
                before.append(alloc)
                after.append(wide)
                pieces[position] = piece
            prepared[id(group)] = (before, after, pieces)
        producers = {
            id(s.producer): pieces_position
            for g in groups
            for pieces_position, s in g.stores.items()
            if s.producer is not None
        }
        previous = self.edits.get(id(owner))

        def rebuild(updated: cst.CSTNode) -> cst.CSTNode:
            node = previous(updated) if callable(previous) else updated
            assert isinstance(node, cst.For)
            body = list(node.body.body)  # type: ignore[attr-defined]
            assert len(body) == len(original)
            new_body: list[cst.BaseStatement] = []
            for position, stmt in enumerate(body):
                if position in starts:
                    group = starts[position]
                    before, after, pieces = prepared[id(group)]
                    members: list[cst.BaseStatement] = []
                    unused = _unused_definitions(plan, group, original)
                    for p in group.positions:
                        if p in group.loads or p in unused:
                            continue
                        if p in group.stores:
                            store = group.stores[p]
                            if store.producer is not None:
                                continue
                            value = argument(body[p].body[0].value, 1, "value")  # type: ignore[attr-defined]
                            members.append(
                                cst.parse_statement(f"{pieces[p]} = {view.code(value)}\n")  # type: ignore[arg-type]
                            )
                            continue
                        member = body[p]
                        if id(original[p]) in producers:
                            target_piece = pieces[producers[id(original[p])]]
                            assign = member.body[0]  # type: ignore[attr-defined]
                            member = member.with_changes(  # type: ignore[attr-defined]
                                body=[
                                    assign.with_changes(
                                        targets=[cst.AssignTarget(cst.parse_expression(target_piece))]
                                    )
                                ]
                            )
                        members.append(member)
                    new_body.extend(before)
                    if members:
                        new_body.append(self._member_loop(group, members, original))
                    new_body.extend(after)
                elif position not in inside:
                    new_body.append(stmt)
            return node.with_changes(body=node.body.with_changes(body=new_body))

        self.edits[id(owner)] = rebuild

    def _member_loop(
        self, group: _Group, members: list[cst.BaseStatement], original: list[cst.BaseStatement]
    ) -> cst.For:
        plan = self.plan
        read: set[str] = set()
        for member in members:
            read |= names_in(member)
        # Index definitions this group reads but does not define itself, copied in front.
        defined_here = {
            n
            for p in group.positions
            if (a := _single_assign(original[p])) is not None
            for n in names_in(a.targets[0].target)
        }
        copies: list[cst.BaseStatement] = []
        # Only definitions that differ per member; the others are still in scope where they are.
        per_member = {n for n in plan.defs if n in plan.variant}
        pending = sorted((read & per_member) - defined_here)
        seen: set[str] = set()
        while pending:
            name = pending.pop(0)
            if name in seen:
                continue
            seen.add(name)
            stmt = plan.defs[name]
            copies.insert(0, stmt.with_changes(leading_lines=()))
            read |= names_in(_single_assign(stmt).value)  # type: ignore[union-attr]
            pending.extend(sorted((names_in(_single_assign(stmt).value) & per_member) - defined_here - seen))  # type: ignore[union-attr]
        body: list[cst.BaseStatement] = []
        if self.var in read:
            body.append(
                cst.parse_statement(f"{self.var} = {self.factor} * {self.block_var} + {self.member_var}\n")
            )
        body.extend(_ordered(plan, copies))
        first, *rest = members
        body.append(first.with_changes(leading_lines=()) if hasattr(first, "leading_lines") else first)
        body.extend(rest)
        header = f"{self.nl}.affine_range({self.factor})"
        return cst.For(
            target=cst.Name(self.member_var),
            iter=cst.parse_expression(header),
            body=cst.IndentedBlock(body=body),
            leading_lines=getattr(first, "leading_lines", ()),
        )


def _unused_definitions(plan: _Plan, group: _Group, original: list[cst.BaseStatement]) -> set[int]:
    """Positions of index definitions nothing left in the member loop reads (wide loads and
    stores moved out of it spell their indices out; other groups get their own copy)."""
    definitions = {id(s) for s in plan.defs.values()}
    reads: dict[int, set[str]] = {}
    for p in group.positions:
        if p in group.loads or (p in group.stores and group.stores[p].producer is not None):
            continue
        if p in group.stores:
            value = argument(group.stores[p].call, 1, "value")
            reads[p] = names_in(value)
        else:
            reads[p] = names_in(original[p])
    unused: set[int] = set()
    changed = True
    while changed:
        changed = False
        for p in group.positions:
            if p in unused or id(original[p]) not in definitions:
                continue
            name = _target_name(original[p])
            if not any(name in names for q, names in reads.items() if q != p and q not in unused):
                unused.add(p)
                changed = True
    return unused


def _ordered(plan: _Plan, copies: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Copied definitions in their original order (a definition may use an earlier one)."""
    order = {id(stmt): i for i, stmt in enumerate(plan.defs.values())}
    originals = {n: s for n, s in plan.defs.items()}
    keyed = []
    for copy in copies:
        name = _target_name(copy)
        keyed.append((order.get(id(originals.get(name)), 0), copy))
    return [c for _, c in sorted(keyed, key=lambda kv: kv[0])]


def _target_name(stmt: cst.BaseStatement) -> str:
    assign = _single_assign(stmt)
    if assign is None:
        return "tile"
    return base_name(assign.targets[0].target) or "tile"


def _paren(text: str) -> str:
    return text if text.replace("_", "").isalnum() else f"({text})"


class _Widener(cst.CSTTransformer):
    """`j` -> `(F * j_blk)`, and C-wide free-axis aranges -> F*C wide."""

    def __init__(self, view: KernelView, var: str | None, block_var: str, factor: int, width: int) -> None:
        self.view = view
        self.var = var
        self.block_var = block_var
        self.factor = factor
        self.width = width

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if original_node.value == self.var:
            return cst.parse_expression(f"({self.factor} * {self.block_var})")
        return updated_node

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        call = updated_node.value
        if (
            isinstance(call, cst.Call)
            and (dotted(call.func) or "").endswith("arange")
            and len(call.args) == 1
            and _free_axis(updated_node)
            and self.view.eval_int(call.args[0].value) == self.width
        ):
            new_arg = call.args[0].with_changes(value=cst.Integer(str(self.width * self.factor)))
            return updated_node.with_changes(value=call.with_changes(args=[new_arg]))
        return updated_node
