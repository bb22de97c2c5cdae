"""Where blocking an output-tile loop is legal: which values differ between tiles, which
statements must run once per member (grouped), which run once per block, what needs a block
dimension, and which block sizes fit the trip count and the PSUM banks."""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import ALLOCATORS, memory_of
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    argument,
    base_name,
    keyword,
    names_in,
    walk,
)
from accelopt.agents.offline.rewrites.blocking.plan import (
    FACTORS,
    PSUM_BANK_BYTES,
    PSUM_BANKS,
    TENSOR_ENGINE_APIS,
    BlockPlan,
    Group,
    allocates,
    bindings,
    is_filler,
    is_name,
    is_par_dim,
    known_assign,
    precedes,
    single_assign,
    squash,
    target_name,
    writes_name,
)
from accelopt.agents.offline.rewrites.blocking.transfers import find_wide_dmas
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.rewrites.plain_loop import require_plain_loop


def feeds_tensor_engine(view: KernelView, loop: Loop) -> bool:
    for call in view.calls_in(loop.node):
        callee = view.callee(call)
        if callee.namespace in ("nl", "nisa") and callee.name in TENSOR_ENGINE_APIS:
            return True
    return False


def analyse_loop(view: KernelView, loop: Loop) -> BlockPlan:
    var = loop.var
    trip = require_plain_loop(view, loop)
    for stmt in view.statements(loop.node):
        if isinstance(stmt, cst.For) and view.loop_for(stmt) is None:
            raise NotApplicable(f"the loop at line {view.line(stmt)} is not an NKI range loop")
    simple = [s for s in view.simple_statements(loop.node) if not is_filler(s)]
    defs = _index_definitions(view, loop, simple)
    variant, demotable = _variant_names(view, loop, simple)
    for inner in view.inner_loops(loop):
        if names_in(inner.node.iter) & variant:
            raise NotApplicable(f"the range of the {inner.var} loop depends on {var}")
    dependent = {id(s) for s in simple if _is_dependent(view, s, variant, demotable)}
    plan = BlockPlan(loop, variant, defs, [], {}, {}, {}, [])
    plan.def_ids = {id(s) for s in simple if _is_index_definition(view, s)}
    _collect_groups(view, plan, loop.node, dependent)
    if not any(plan.groups.values()):
        raise NotApplicable(f"nothing in the loop depends on {var}")
    for groups in plan.groups.values():
        for group in groups:
            find_wide_dmas(view, plan, group)
    _check_variant_uses(view, plan, simple)
    for stmt in demotable:
        plan.demoted.extend(demotable[stmt])
    plan.shared = _shared_work(view, simple, dependent)
    loads = sum(len(g.loads) + len(g.inline) + len(g.stores) for gs in plan.groups.values() for g in gs)
    if not plan.shared and not loads:
        raise NotApplicable(f"no load is shared between {var} tiles and no transfer gets wider")
    plan.trip = view.eval_int(trip)
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


def _index_definitions(
    view: KernelView, loop: Loop, simple: list[cst.SimpleStatementLine]
) -> dict[str, cst.SimpleStatementLine]:
    """`cols = slice(j * C, (j + 1) * C)`, `r0 = j * C`: names bound once to index arithmetic."""
    found: dict[str, cst.SimpleStatementLine] = {}
    for stmt in simple:
        assign = single_assign(stmt)
        if assign is None or not isinstance(assign.targets[0].target, cst.Name):
            continue
        calls = view.calls_in(assign.value)
        if any(not (isinstance(c.func, cst.Name) and c.func.value == "slice") for c in calls):
            continue
        name = assign.targets[0].target.value
        if bindings(view, name, loop.node) != 1:
            continue
        # Every mention in the loop must see this binding (a kernel may reuse the name elsewhere).
        owner = view.parent(view.parent(stmt) or stmt)
        uses = [u for u in view.name_uses(name, loop.node) if view.statement_of(u) is not stmt]
        if owner is not None and all(view.contains(owner, u) and not precedes(view, u, stmt) for u in uses):
            found[name] = stmt
    return found


def _is_index_definition(view: KernelView, stmt: cst.SimpleStatementLine) -> bool:
    """`name = <integer arithmetic or slice(...)>` (bound once or not)."""
    assign = single_assign(stmt)
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
    assign = single_assign(stmt)
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
        if owner is stmt or (owner is not None and allocates(view, owner, buffer)):
            continue
        if not isinstance(parent, cst.Subscript) or _block_text(view, parent) != text:
            return None
        if not view.contains(loop.node, parent) or writes_name(view, owner, buffer):
            return None
        accesses.append(parent)
    return accesses


def _block_text(view: KernelView, sub: cst.Subscript) -> str | None:
    """The block indices of a buffer access (all but the partition and free elements)."""
    if len(sub.slice) < 3:
        return None
    return squash(",".join(view.code(el.slice) for el in list(sub.slice)[:-2]))


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
    return bool(written) and not any(allocates(view, stmt, n) for n in written)


def _collect_groups(view: KernelView, plan: BlockPlan, owner: cst.For, dependent: set[int]) -> None:
    """Runs of dependent statements (and loops whose every statement depends on `j`) per body."""
    block = owner.body
    assert isinstance(block, cst.IndentedBlock)
    groups: list[Group] = []
    run: list[int] = []

    def close() -> None:
        if run:
            groups.append(Group(owner, list(run)))
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
            inner = [s for s in view.simple_statements(stmt) if not is_filler(s)]
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
    plan: BlockPlan,
    simple: list[cst.SimpleStatementLine],
) -> None:
    """Every value that differs between tiles must stay apart per member: a temporary used only
    in its own group, a buffer block-indexed by `j`, or an accumulator allocated in the loop
    (which gets a block dimension). Anything else would be overwritten by the next member."""
    loop = plan.loop
    # Tiles of wide loads are written once per block, before the members read their slices.
    widened = {
        target_name(load.stmt) for groups in plan.groups.values() for g in groups for load in g.loads.values()
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


def _loop_reduction(view: KernelView, plan: BlockPlan, name: str) -> cst.Arg | None:
    """`name = nl.loop_reduce(x, op, loop_indices=[..., j, ...])`, the only mention of `name` in
    the loop: a reduction over `j` that, blocked, reduces over the block and member loops. Its
    `loop_indices` argument, or None."""
    loop = plan.loop
    uses = [u for u in view.name_uses(name) if view.contains(loop.node, u)]
    stmts = {id(view.statement_of(u)) for u in uses}
    if len(stmts) != 1:
        return None
    owner = view.statement_of(uses[0])
    assign = single_assign(owner) if owner is not None else None
    if assign is None or not is_name(assign.targets[0].target, name):
        return None
    reduce = assign.value
    if not isinstance(reduce, cst.Call) or not view.is_call(reduce, "nl", "loop_reduce") or name in names_in(reduce):
        return None
    indices = keyword(reduce, "loop_indices")
    if indices is None or not isinstance(indices.value, (cst.List, cst.Tuple)):
        return None
    if not any(is_name(e.value, loop.var) for e in indices.value.elements):
        return None
    if id(view.statement_of(uses[0])) not in plan.member_of:
        return None
    plan.reductions.append(indices)
    return indices


def _group_local(view: KernelView, plan: BlockPlan, name: str, uses: list[cst.Name]) -> bool:
    """A temporary bound once and used only inside one group: each member rebinds it before use."""
    groups = [plan.member_of.get(id(view.statement_of(u))) for u in uses]
    if any(g is None for g in groups) or any(g is not groups[0] for g in groups):
        return False
    return bindings(view, name) == 1


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
    view: KernelView, plan: BlockPlan, name: str, simple: list[cst.SimpleStatementLine]
) -> cst.Call | None:
    """The allocation of an accumulator in the loop nest, when all its other uses are in groups
    inside the body that allocates it."""
    found = [s for s in simple if allocates(view, s, name)]
    if len(found) != 1 or bindings(view, name) != 1:
        return None
    alloc = found[0]
    if id(alloc) in plan.member_of:
        return None
    call = known_assign(alloc).value
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


def _shared_work(view: KernelView, simple: list[cst.SimpleStatementLine], dependent: set[int]) -> list[str]:
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
    assign = single_assign(stmt)
    return (
        assign is not None
        and isinstance(assign.value, cst.Call)
        and view.callee(assign.value).name in ALLOCATORS
    )


def _psum_tile_banks(view: KernelView, call: cst.Call) -> int | None:
    """Banks a PSUM allocation occupies: its blocks times the banks of one tile."""
    shape = argument(call, 0, "shape")
    if not isinstance(shape, cst.Tuple) or len(shape.elements) < 2:
        return None
    values = [e.value for e in shape.elements]
    partition = next((i for i, v in enumerate(values) if is_par_dim(v)), 0)
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


def _psum_banks(view: KernelView, plan: BlockPlan, simple: list[cst.SimpleStatementLine], factor: int) -> int:
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
        assign = single_assign(stmt)
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


def _factors(view: KernelView, plan: BlockPlan, simple: list[cst.SimpleStatementLine]) -> list[int]:
    """The block sizes that fit. With a trip count the source does not give (it comes from the
    input shapes), only the smallest: each larger one is a further guess about the shapes, and
    at shapes with few tiles its assertion fails -- a broken candidate instead of a refusal."""
    factors = []
    for factor in FACTORS:
        if plan.trip is not None and (plan.trip < factor or plan.trip % factor):
            continue
        if _psum_banks(view, plan, simple, factor) > PSUM_BANKS:
            continue
        factors.append(factor)
        if plan.trip is None:
            break
    return factors
