"""Fuse two sibling loops over the same range when the second consumes, element for element,
what the first produces.

`for i: nl.store(t[i*128:(i+1)*128], value=y)` followed by `for j: x = nl.load(t[j*128:(j+1)*128])`
becomes one loop whose iteration stores and reads back the same tile. The fused loop reads the
tile straight from SBUF (the load becomes the stored value, or an on-chip copy of it where the
load writes into a declared buffer) and, when `t` is a scratch tensor of the kernel that nothing
else reads, the store and its HBM tensor go too: an HBM round trip per tile saved.

Legal when the dataflow says iteration k of the second loop needs only iteration k of the first:
- every tensor the first loop writes and the second reads is written by one statement, at an
  index that depends on the loop variable (a distinct region per iteration: not a reduction the
  second loop would need complete), and read by the second loop only at that same index;
- the second loop writes nothing the first reads or writes;
- a name the first loop binds is read by the second only after the second binds it again, is not
  carried from one iteration to the next, and is not read after the loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.facts import allocation_of, memory_of
from accelopt.agents.offline.kernel_ir import KernelView, Loop, argument, base_name, is_filler, names_in, walk
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, reason_or, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable


@dataclass
class _Forward:
    load: cst.SimpleStatementLine  # `x = nl.load(t[idx])` in the second loop (renamed)
    value: cst.BaseExpression  # what the first loop stored there


@dataclass
class _Fusion:
    first: Loop
    second: Loop
    body: list[cst.BaseStatement]  # the fused body, loads forwarded
    removed: list[cst.SimpleStatementLine]  # stores and scratch allocations no longer needed
    forwarded: list[str]  # tensors read back from SBUF


class LoopFusion(Rewrite):
    name = "loop_fusion"
    prior = 0.5
    summary = "fuse two loops over the same range when the second reads back what the first wrote"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for first in view.loops:
            second = _next_loop(view, first)
            if second is None:
                continue
            sid = site_id(self.name, first.line, second.line)
            title = f"fuse the {first.var} loop (line {first.line}) with the {second.var} loop (line {second.line})"
            place = self.place(sid, first.line, title)
            fusion = reason_or(_analyse, view, first, second)
            if isinstance(fusion, str):
                found.append(place.refused(fusion))
                continue
            through = ", ".join(fusion.forwarded)
            found.append(
                place.site(
                    description=(
                        "One loop instead of two: each iteration uses the tile it just produced"
                        + (f" ({through} read back from SBUF, not HBM)." if through else ".")
                    ),
                    relieves=("hbm", "latency") if through else ("latency",),
                    payload=fusion,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        fusion: _Fusion = site.payload
        block = fusion.first.node.body
        assert isinstance(block, cst.IndentedBlock)
        fused = fusion.first.node.with_changes(body=block.with_changes(body=fusion.body))
        edits: dict[int, object] = {id(fusion.first.node): fused, id(fusion.second.node): None}
        for stmt in fusion.removed:
            if not view.contains(fusion.first.node, stmt):
                edits[id(stmt)] = None
        return view.render(edits)


def _next_loop(view: KernelView, loop: Loop) -> Loop | None:
    """The loop right after `loop` in its block (filler between them allowed)."""
    siblings = view.siblings(loop.node)
    position = next((i for i, s in enumerate(siblings) if s is loop.node), None)
    if position is None:
        return None
    for stmt in siblings[position + 1 :]:
        if is_filler(stmt):
            continue
        return view.loop_for(stmt) if isinstance(stmt, cst.For) else None
    return None


class _Rename(cst.CSTTransformer):
    """Renames a variable, leaving attribute members and keyword names alone."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if original.value == self.old else updated


def _renamed(stmt: cst.BaseStatement, renamer: _Rename) -> cst.BaseStatement:
    renamed = stmt.visit(renamer)
    assert isinstance(renamed, cst.BaseStatement)  # the renamer never removes a statement
    return renamed


def _code(node: cst.CSTNode) -> str:
    return "".join(cst.Module(body=[]).code_for_node(node).split())


def _stored(view: KernelView, stmt: cst.BaseStatement) -> tuple[cst.Subscript, cst.BaseExpression] | None:
    """(destination, value) of a statement that is just `nl.store(dst[...], value=...)`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Expr) or not view.is_call(small.value, "nl", "store"):
        return None
    assert isinstance(small.value, cst.Call)
    dst, value = argument(small.value, 0, "dst"), argument(small.value, 1, "value")
    if not isinstance(dst, cst.Subscript) or value is None:
        return None
    return dst, value


def _writes_of(view: KernelView, body: list[cst.BaseStatement], tensor: str) -> list[cst.BaseStatement]:
    return [s for s in body if tensor in view.access(s).mutates]


def _analyse(view: KernelView, first: Loop, second: Loop) -> _Fusion:
    if view.code(first.node.iter) != view.code(second.node.iter):
        raise NotApplicable("the two loops run over different ranges")
    if first.kind != second.kind:
        raise NotApplicable(f"one loop is {first.kind}, the other {second.kind}")
    for loop in (first, second):
        for stmt in view.statements(loop.node):
            if isinstance(stmt, (cst.If, cst.While, cst.With, cst.Try, cst.Return)):
                raise NotApplicable(f"the loop at line {loop.line} holds control flow (line {view.line(stmt)})")
    one, two = view.access(first.node), view.access(second.node)
    body1 = first.body
    renamer = _Rename(second.var, first.var)
    if second.var != first.var and any(n.value == first.var for n in walk(second.node, reads_only=True) if isinstance(n, cst.Name)):
        raise NotApplicable(f"the {second.var} loop already uses the name {first.var}")
    body2 = [_renamed(s, renamer) for s in second.body] if second.var != first.var else second.body
    # Tensors: the second loop writes nothing the first touches.
    clash = (two.mutates - {second.var}) & (one.reads | one.writes)
    if clash:
        raise NotApplicable(f"the second loop writes {', '.join(sorted(clash))}, which the first loop uses")
    forwards: list[_Forward] = []
    forwarded: list[str] = []
    removed: list[cst.SimpleStatementLine] = []
    for tensor in sorted(one.mutates & two.reads):
        writers = _writes_of(view, body1, tensor)
        if len(writers) != 1 or not isinstance(writers[0], cst.SimpleStatementLine):
            raise NotApplicable(f"the first loop writes {tensor} in more than one place")
        writer = writers[0]
        stored = _stored(view, writer)
        if stored is not None:
            index = stored[0]
        else:
            small = writer.body[0] if len(writer.body) == 1 else None
            if not isinstance(small, cst.Assign) or not isinstance(small.targets[0].target, cst.Subscript):
                raise NotApplicable(f"the first loop writes {tensor} at line {view.line(writer)} in a way "
                                    "the fusion cannot follow (accumulated, or through a call)")
            index = small.targets[0].target
        if first.var not in names_in(index):
            raise NotApplicable(
                f"every iteration of the first loop writes the same part of {tensor} (a reduction the "
                "second loop needs complete)"
            )
        key = _code(index)
        for stmt in body2:
            for node in walk(stmt, reads_only=True):
                if isinstance(node, cst.Subscript) and base_name(node) == tensor and _code(node) != key:
                    raise NotApplicable(
                        f"the second loop reads {tensor} at {view.snippet(node, 50)}, not only where "
                        "the first loop's iteration wrote it"
                    )
        if stored is None:
            continue
        loads = [s for s in body2 if _is_load_of(view, s, key)]
        other_reads = [s for s in body2 if tensor in view.access(s).reads and s not in loads]
        removable = not other_reads and _scratch(view, tensor, first, second)
        if not isinstance(stored[1], (cst.Name, cst.Subscript)) and not removable:
            continue  # forwarding a computed value the store keeps would compute it twice
        for load in loads:
            forwards.append(_Forward(load, stored[1]))  # type: ignore[arg-type]
        forwarded.append(tensor)
        if removable:
            removed.append(writer)
            alloc = allocation_of(view, tensor)
            if alloc is not None:
                removed.append(alloc)
    _check_names(view, first, second, body1, body2)
    # The stored value must still be what the load would read: nothing rebinds or writes its
    # names after the store, in either body, before the load.
    fused: list[cst.BaseStatement] = [s for s in body1 if s not in removed and not is_filler(s)]
    replaced: dict[int, cst.BaseStatement] = {}
    for forward in forwards:
        after_store = _after(body1, _store_of(view, body1, forward)) + body2[: body2.index(forward.load)]
        deps = names_in(forward.value)
        if any(view.access(s).writes & deps if s in body1 else _writes(s) & deps for s in after_store):
            raise NotApplicable(f"{view.snippet(forward.value, 40)} changes between the store and the load")
        replaced[id(forward.load)] = _forwarded(forward)
    fused.extend(replaced.get(id(s), s) for s in body2)
    return _Fusion(first, second, fused, removed, forwarded)


def _is_load_of(view: KernelView, stmt: cst.BaseStatement, key: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return False
    value = small.value
    if not isinstance(value, cst.Call) or not view.is_call(value, "nl", "load"):
        return False
    src = argument(value, 0, "src")
    extra = [a for a in value.args if a.keyword is not None and a.keyword.value not in ("src",)]
    return src is not None and _code(src) == key and not extra


def _store_of(view: KernelView, body: list[cst.BaseStatement], forward: _Forward) -> cst.BaseStatement:
    return next(s for s in body if (st := _stored(view, s)) is not None and st[1] is forward.value)


def _after(body: list[cst.BaseStatement], stmt: cst.BaseStatement) -> list[cst.BaseStatement]:
    return body[body.index(stmt) + 1 :]


def _writes(stmt: cst.BaseStatement) -> set[str]:
    """Names a (renamed, unindexed) statement binds or writes through a subscript target."""
    found: set[str] = set()
    for node in walk(stmt):
        if isinstance(node, cst.AssignTarget):
            name = base_name(node.target)
            found |= names_in(node.target) if name is None else {name}
        elif isinstance(node, cst.AugAssign):
            name = base_name(node.target)
            if name:
                found.add(name)
        elif isinstance(node, cst.For):
            found |= names_in(node.target)
        elif isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "dst":
            name = base_name(node.value)
            if name:
                found.add(name)
    return found


def _forwarded(forward: _Forward) -> cst.SimpleStatementLine:
    """The load replaced by the stored value: the value itself for a name, an on-chip copy of it
    for a declared buffer (compiler-generated style)."""
    small = forward.load.body[0]
    assert isinstance(small, cst.Assign)
    if isinstance(small.targets[0].target, cst.Name):
        value: cst.BaseExpression = forward.value
    else:
        call = small.value
        assert isinstance(call, cst.Call)
        func = call.func.with_changes(attr=cst.Name("copy")) if isinstance(call.func, cst.Attribute) else cst.Name("copy")
        value = cst.Call(func=func, args=[cst.Arg(forward.value)])
    return forward.load.with_changes(body=[small.with_changes(value=value)])


def _scratch(view: KernelView, tensor: str, first: Loop, second: Loop) -> bool:
    """A tensor the kernel declares in HBM for itself, used by nothing but the two loops."""
    params = {p.name.value for p in view.func.params.params}
    if tensor in params or memory_of(view, tensor) != "hbm":
        return False
    alloc = allocation_of(view, tensor)
    if alloc is None:
        return False
    for use in view.name_uses(tensor):
        stmt = view.statement_of(use)
        if stmt is alloc:
            continue
        if not (view.contains(first.node, use) or view.contains(second.node, use)):
            return False
    return True


def _check_names(
    view: KernelView, first: Loop, second: Loop, body1: list[cst.BaseStatement], body2: list[cst.BaseStatement]
) -> None:
    """Names (not tensors written in place) bound in the first loop and used by the second."""
    bound1 = set().union(*(view.access(s).rebinds for s in view.statements(first.node))) - {first.var}
    bound2 = set().union(*(_writes(s) for s in body2)) - {first.var}
    reads2 = set().union(*(names_in(s) for s in body2))
    for name in sorted(bound1 & reads2):
        if name not in bound2 or not _bound_before_read(body2, name):
            raise NotApplicable(
                f"the second loop reads {name}, which the first loop leaves as its last iteration's value"
            )
    for name in sorted(bound1 & bound2):
        if not _bound_before_read(body1, name):
            raise NotApplicable(f"the first loop carries {name} from one iteration to the next")
        outside = [
            u for u in view.name_uses(name) if not view.contains(first.node, u) and not view.contains(second.node, u)
        ]
        if outside:
            raise NotApplicable(f"{name} is bound in both loops and read after them (line {view.line(outside[0])})")


def _bound_before_read(body: list[cst.BaseStatement], name: str) -> bool:
    """The first top-level statement of `body` that mentions `name` binds it without reading it."""
    for stmt in body:
        mentioned = name in names_in(stmt)
        if not mentioned:
            continue
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            small = stmt.body[0]
            target = small.targets[0].target
            if isinstance(target, cst.Name) and target.value == name and name not in names_in(small.value):
                return True
            if base_name(target) == name and name not in names_in(small.value):
                return True  # a buffer fully rewritten at the head of the body (cg style)
        return False
    return True
