"""The blocked kernel's text: the block loop, the member loops, the wide transfers, the
accumulators with a block dimension, edits applied through the kernel view (formatting kept)."""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import (
    KernelView,
    argument,
    assign_target,
    base_name,
    dotted,
    names_in,
    walk,
)
from accelopt.agents.offline.rewrites.blocking.plan import (
    BlockPlan,
    Group,
    WideLoad,
    WideStore,
    allocates,
    free_axis,
    inline_definitions,
    inline_element,
    is_name,
    is_par_dim,
    known_assign,
    paren,
    single_assign,
    target_name,
)
from accelopt.agents.offline.rewrites.errors import NotApplicable


class Builder:
    def __init__(self, view: KernelView, plan: BlockPlan, factor: int) -> None:
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
                    load.new_name = self._fresh(f"{target_name(load.stmt)}_wide")
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
                if is_name(element.value, self.var):
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
                            f"{self.factor} * {paren(self.view.code(last))}"
                        )
        for groups in plan.groups.values():
            if groups:
                self._restructure(groups)
        loop = plan.loop
        header = self._header()
        previous = self.edits.get(id(loop.node))
        trip = loop.trip_expr
        assert trip is not None
        prefix = []
        if plan.trip is None:
            prefix.append(
                cst.parse_statement(
                    f"assert {paren(view.code(trip))} % {self.factor} == 0, "
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
        new_trip = cst.parse_expression(f"{paren(self.view.code(trip))} // {self.factor}")
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
        if not any(is_par_dim(v) for v in values):
            texts[0] = f"{self.nl}.par_dim({texts[0]})"
        self.edits[id(shape)] = cst.parse_expression(f"({self.factor}, {', '.join(texts)})")
        member = cst.Name(self.member_var)
        for use in view.name_uses(name):
            stmt = view.statement_of(use)
            if stmt is not None and allocates(view, stmt, name):
                continue
            parent = view.parent(use)
            if isinstance(parent, cst.Subscript) and parent.value is use:
                new_elements = [cst.SubscriptElement(cst.Index(member)), *parent.slice]
                self.edits[id(parent)] = parent.with_changes(slice=new_elements)
            else:
                self.edits[id(use)] = cst.Subscript(
                    value=use, slice=[cst.SubscriptElement(cst.Index(member))]
                )

    def _wide_reader(self, load: WideLoad, reader: cst.BaseExpression) -> cst.BaseExpression:
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
        if isinstance(index, cst.Index) and is_name(index.value, self.var):
            return self.block_var
        return self.view.code(index)

    def _widened(self, expr: cst.BaseExpression, width: int) -> str:
        """`expr` (with the loop's index definitions written out) at the first member of the
        block, C-wide grids and slices made F*C wide."""
        inlined = inline_definitions(self.plan, expr)
        widened = inlined.visit(_Widener(self.view, self.var, self.block_var, self.factor, width))
        return self.view.code(widened)  # type: ignore[arg-type]

    def _wide_subscript(self, sub: cst.Subscript, width: int) -> str:
        last = inline_element(self.plan, sub.slice[-1].slice)
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

    def _wide_load_stmt(self, load: WideLoad) -> cst.BaseStatement:
        src = argument(load.call, 0, "src")
        assert isinstance(src, cst.Subscript)
        text = self._call_text(load.call, self._wide_subscript(src, load.width), load.width)
        if load.allocation is None:
            return cst.parse_statement(f"{load.new_name} = {text}\n")
        target = known_assign(load.stmt).targets[0].target
        assert isinstance(target, cst.Subscript)
        blocks = "".join(f"{self._block_index(el.slice)}, " for el in list(target.slice)[:-2])
        partition = self.view.code(target.slice[-2].slice)
        free = self.view.code(
            target.slice[-1].slice.value.visit(  # type: ignore[attr-defined]
                _Widener(self.view, None, self.block_var, self.factor, load.width)
            )
        )
        return cst.parse_statement(f"{self.view.code(target.value)}[{blocks}{partition}, {free}] = {text}\n")

    def _store_parts(self, store: WideStore) -> tuple[cst.BaseStatement, cst.BaseStatement, str]:
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

    def _restructure(self, groups: list[Group]) -> None:
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
            assert isinstance(node, cst.For) and isinstance(node.body, cst.IndentedBlock)
            body: list[cst.BaseStatement] = list(node.body.body)
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
                            value = argument(_statement_call(body[p]), 1, "value")
                            assert value is not None  # a store the plan accepted has a value
                            members.append(cst.parse_statement(f"{pieces[p]} = {view.code(value)}\n"))
                            continue
                        member = body[p]
                        if id(original[p]) in producers:
                            target_piece = pieces[producers[id(original[p])]]
                            assign = single_assign(member)
                            assert assign is not None  # a producer is a single assignment
                            member = member.with_changes(
                                body=[
                                    assign.with_changes(
                                        targets=[cst.AssignTarget(assign_target(target_piece))]
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
        self, group: Group, members: list[cst.BaseStatement], original: list[cst.BaseStatement]
    ) -> cst.For:
        plan = self.plan
        read: set[str] = set()
        for member in members:
            read |= names_in(member)
        # Index definitions this group reads but does not define itself, copied in front.
        defined_here = {
            n
            for p in group.positions
            if (a := single_assign(original[p])) is not None
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
            defined = names_in(known_assign(stmt).value)
            read |= defined
            pending.extend(sorted((defined & per_member) - defined_here - seen))
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


def _unused_definitions(plan: BlockPlan, group: Group, original: list[cst.BaseStatement]) -> set[int]:
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
            name = target_name(original[p])
            if not any(name in names for q, names in reads.items() if q != p and q not in unused):
                unused.add(p)
                changed = True
    return unused


def _ordered(plan: BlockPlan, copies: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Copied definitions in their original order (a definition may use an earlier one)."""
    order = {id(stmt): i for i, stmt in enumerate(plan.defs.values())}
    originals = {n: s for n, s in plan.defs.items()}
    keyed = []
    for copy in copies:
        name = target_name(copy)
        keyed.append((order.get(id(originals.get(name)), 0), copy))
    return [c for _, c in sorted(keyed, key=lambda kv: kv[0])]


class _Widener(cst.CSTTransformer):
    """`j` -> `(F * j_blk)`, and C-wide free-axis aranges -> F*C wide."""

    def __init__(self, view: KernelView, var: str | None, block_var: str, factor: int, width: int) -> None:
        self.view = view
        self.var = var
        self.block_var = block_var
        self.factor = factor
        self.width = width

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if updated_node.value == self.var:
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
            and free_axis(updated_node)
            and self.view.eval_int(call.args[0].value) == self.width
        ):
            new_arg = call.args[0].with_changes(value=cst.Integer(str(self.width * self.factor)))
            return updated_node.with_changes(value=call.with_changes(args=[new_arg]))
        return updated_node


def _statement_call(stmt: cst.BaseStatement) -> cst.Call:
    """The call a one-call statement line (`nl.store(...)`) makes."""
    assert isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)
    call = stmt.body[0].value
    assert isinstance(call, cst.Call)
    return call
