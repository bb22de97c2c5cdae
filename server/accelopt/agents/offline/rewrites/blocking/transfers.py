"""Which loads and stores of a group can become one wide DMA per block: a `C`-wide tile at
`C * j` on a free axis of an HBM tensor, read (or produced) only by the members."""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.affine import arange_size, linear_form
from accelopt.agents.offline.facts import memory_of
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    argument,
    base_name,
    keyword,
    names_in,
)
from accelopt.agents.offline.rewrites.blocking.plan import (
    BlockPlan,
    Group,
    WideLoad,
    WideStore,
    allocates,
    bindings,
    free_axis,
    inline_definitions,
    inline_element,
    is_name,
    known_assign,
    precedes,
    single_assign,
    squash,
    writes_name,
)


def _free_width(view: KernelView, plan: BlockPlan, element: cst.BaseSlice) -> tuple[int, bool] | None:
    """(C, is_grid) when the element is one C-wide tile at `C * j + ...` on a free axis."""
    var = plan.loop.var
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is None or len(form.aranges) != 1:
            return None
        grid = form.aranges[0]
        if not free_axis(grid.node) or grid.coefficient != 1:
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


def _tile_elements(view: KernelView, plan: BlockPlan, sub: cst.Subscript) -> list[cst.BaseSlice]:
    """Index elements that are not single integer indices (the tile's axes); a name bound to a
    `slice(...)` is an axis."""
    axes: list[cst.BaseSlice] = []
    for el in sub.slice:
        index = el.slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name):
            if _resolve_slice(view, index.value) is not None or isinstance(
                inline_element(plan, index), cst.Slice
            ):
                axes.append(index)
                continue
        if isinstance(index, cst.Index):
            form = linear_form(view, index.value)
            if form is not None and not form.aranges:
                continue
        axes.append(index)
    return axes


def _only_var_in_last(plan: BlockPlan, sub: cst.Subscript) -> bool:
    var_like = plan.variant
    for el in list(sub.slice)[:-1]:
        element = inline_element(plan, el.slice)
        if names_in(element) & var_like:
            return False
    return True


def find_wide_dmas(view: KernelView, plan: BlockPlan, group: Group) -> None:
    block = group.owner.body
    assert isinstance(block, cst.IndentedBlock)
    members = [block.body[p] for p in group.positions]
    for position in group.positions:
        stmt = block.body[position]
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        load = _wide_load(view, plan, group, stmt)
        if load is not None:
            group.loads[position] = load
            continue
        store = _wide_store(view, plan, stmt, members)
        if store is not None:
            group.stores[position] = store
            continue
        for call in view.calls_in(stmt):
            if view.is_call(call, "nl", "load") and isinstance(view.parent(call), cst.Arg):
                inline = _inline_wide_load(view, plan, stmt, call)
                if inline is not None:
                    group.inline.append(inline)


def _inline_wide_load(
    view: KernelView, plan: BlockPlan, stmt: cst.SimpleStatementLine, call: cst.Call
) -> WideLoad | None:
    found = _widenable_load(view, plan, call)
    if found is None:
        return None
    return WideLoad(stmt, call, found[0], [call])


def _widenable_load(view: KernelView, plan: BlockPlan, call: cst.Call) -> tuple[int, bool] | None:
    """What `_widenable` says of an `nl.load` whose source is a 2-D HBM tile."""
    src = _hbm_subscript(view, argument(call, 0, "src"))
    if src is None or len(_tile_elements(view, plan, src)) != 2:
        return None
    return _widenable(view, plan, src, call)


def _hbm_subscript(view: KernelView, expr: cst.BaseExpression | None) -> cst.Subscript | None:
    if not isinstance(expr, cst.Subscript) or not isinstance(expr.value, cst.Name):
        return None
    return expr if memory_of(view, expr.value.value) == "hbm" else None


def _widenable(
    view: KernelView, plan: BlockPlan, sub: cst.Subscript, call: cst.Call
) -> tuple[int, bool] | None:
    if not _only_var_in_last(plan, sub):
        return None
    found = _free_width(view, plan, inline_element(plan, sub.slice[-1].slice))
    if found is None:
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value not in ("src", "dst", "value", "mask", "dtype"):
            return None
    mask = keyword(call, "mask")
    if mask is not None and (names_in(inline_definitions(plan, mask.value)) & plan.variant) - {plan.loop.var}:
        return None
    return found


def _wide_load(
    view: KernelView, plan: BlockPlan, group: Group, stmt: cst.SimpleStatementLine
) -> WideLoad | None:
    assign = single_assign(stmt)
    if assign is None or not view.is_call(assign.value, "nl", "load"):
        return None
    call = assign.value
    assert isinstance(call, cst.Call)
    found = _widenable_load(view, plan, call)
    if found is None:
        return None
    width, _ = found
    target = assign.targets[0].target
    readers: list[cst.BaseExpression] = []
    if isinstance(target, cst.Name):
        if bindings(view, target.value) != 1:
            return None
        for use in view.name_uses(target.value):
            if use is target:
                continue
            if not _later_member(view, plan, group, use, stmt):
                return None
            readers.append(use)
    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
        buffer = target.value.value
        text = squash(view.code(target))
        allocation = _buffer_allocation(view, buffer)
        if allocation is None or not _grid_reader(view, target, width):
            return None
        for el in list(target.slice)[:-2]:
            index = el.slice
            blocks = names_in(index)
            if blocks & plan.variant and not (
                isinstance(index, cst.Index) and is_name(index.value, plan.loop.var)
            ):
                return None
        for use in view.name_uses(buffer):
            owner = view.statement_of(use)
            if owner is stmt or (owner is not None and allocates(view, owner, buffer)):
                continue
            parent = view.parent(use)
            if not isinstance(parent, cst.Subscript) or squash(view.code(parent)) != text:
                return None
            if not _later_member(view, plan, group, use, stmt):
                return None
            if writes_name(view, owner, buffer) or not _grid_reader(view, parent, width):
                return None
            readers.append(parent)
    else:
        return None
    if not readers:
        return None
    if isinstance(target, cst.Subscript):
        return WideLoad(stmt, call, width, readers, allocation)
    return WideLoad(stmt, call, width, readers)


def _buffer_allocation(view: KernelView, buffer: str) -> cst.Call | None:
    """The allocator call of a buffer bound once, when its shape is a tuple."""
    if bindings(view, buffer) != 1:
        return None
    for stmt in view.simple_statements():
        if allocates(view, stmt, buffer):
            call = known_assign(stmt).value
            assert isinstance(call, cst.Call)
            shape = argument(call, 0, "shape")
            return call if isinstance(shape, cst.Tuple) and len(shape.elements) >= 2 else None
    return None


def _later_member(
    view: KernelView, plan: BlockPlan, group: Group, use: cst.CSTNode, load: cst.BaseStatement
) -> bool:
    """A read inside a member loop (this group's or a later one's in the same body, nested or
    not) that runs after the wide load: the wide tile is there for it."""
    return (
        plan.member_of.get(id(view.statement_of(use))) is not None
        and view.contains(group.owner, use)
        and not precedes(view, use, load)
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
        and free_axis(last.value)
    )


def _wide_store(
    view: KernelView, plan: BlockPlan, stmt: cst.SimpleStatementLine, members: list[cst.BaseStatement]
) -> WideStore | None:
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
    producer = _sole_producer(view, stmt, value, members)
    return WideStore(stmt, call, width, partitions, grid, producer)


def _partition_extent(view: KernelView, element: cst.BaseSlice) -> cst.BaseExpression | None:
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is not None and len(form.aranges) == 1 and not free_axis(form.aranges[0].node):
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
    if bindings(view, name.value) != 1:
        return None
    for stmt in view.simple_statements():
        assign = single_assign(stmt)
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
    store: cst.SimpleStatementLine,
    value: cst.BaseExpression,
    members: list[cst.BaseStatement],
) -> cst.SimpleStatementLine | None:
    """The group member that computes the stored value and whose result nothing else reads: it
    can write the gathering tile directly."""
    name = base_name(value)
    if name is None or not isinstance(value, (cst.Name, cst.Subscript)):
        return None
    text = squash(view.code(value))
    producer = None
    for use in view.name_uses(name):
        owner = view.statement_of(use)
        if owner is store:
            continue
        if owner is not None and allocates(view, owner, name):
            continue
        assign = single_assign(owner) if owner is not None else None
        if (
            assign is None
            or not any(owner is m for m in members)
            or squash(view.code(assign.targets[0].target)) != text
            or producer is not None
        ):
            return None
        assert isinstance(owner, cst.SimpleStatementLine)  # single_assign found it one
        producer = owner
    if producer is not None and isinstance(value, cst.Name) and bindings(view, name) != 1:
        return None
    return producer
