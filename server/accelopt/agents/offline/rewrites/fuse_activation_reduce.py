"""Fold a row sum into the activation that produces the summed tile:
`p = nisa.activation(op=nl.exp, data=s, ...)` then `r = nl.sum(p, axis=1, keepdims=True)` becomes
`p = nisa.activation_reduce(op=nl.exp, data=s, ..., reduce_op=np.add, reduce_res=r)`.

The Scalar Engine adds up the free axis of its result while it writes it (about 64 cycles more,
NKI_NOTES §4), so the separate reduction pass (a full-width Vector Engine instruction) disappears.
Softmax row sums, RMS-norm sums of squares: any activation whose result is then summed along the
free axis. Both spellings of each half are recognised (`nl.exp(x)` or `nisa.activation`, `nl.sum`
or `nisa.tensor_reduce(np.add, ...)`), and the reduction may write a tile (`r = ...`, allocated
[P, 1] here) or a buffer (`part[...] = ...`, written in place by the activation).

Refused when the reduction is not a keepdims sum over the last axis only, when the summed value is
not exactly the activation's result (a different tile, an index that differs, a write to it in
between), when the activation already reduces, or when the tile's partition count is not known
from the source (a tile result needs an allocation of [P, 1]).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.affine import arange_size
from accelopt.agents.offline.facts import ACTIVATION_FUNCTIONS, single_assignment, slice_extent
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    argument,
    base_name,
    dotted,
    keyword,
    positional,
    walk,
)
from accelopt.agents.offline.patterns import Emitter, op_name, render_with
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, reason_or, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

# Keywords of nisa.activation carried over unchanged.
ACTIVATION_KEYWORDS = ("bias", "scale", "dtype", "mask")


@dataclass
class _Fusion:
    producer: cst.SimpleStatementLine | None  # None: the activation is written inside the sum
    activation: cst.Call
    reducer: cst.SimpleStatementLine
    result: cst.BaseExpression  # what the reduction writes: a Name or a buffer subscript
    partitions: str | None  # the [P, 1] allocation's P, when the result is a Name


class FuseActivationReduce(Rewrite):
    name = "fuse_activation_reduce"
    prior = 0.7
    summary = "fold a free-axis sum into the activation that produces the summed tile"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            reduced = _sum_of(view, stmt)
            if reduced is None:
                continue
            summed, result = reduced
            line = view.line(stmt)
            sid = site_id(self.name, line)
            title = (
                f"fold the sum at line {line} into the activation that produces {view.snippet(summed, 30)}"
            )
            place = self.place(sid, line, title)
            fusion = reason_or(_fusion, view, stmt, summed, result)
            if isinstance(fusion, str):
                found.append(place.refused(fusion))
                continue
            if fusion is None:
                continue
            found.append(
                place.site(
                    description=(
                        f"The activation at line {view.line(fusion.producer or stmt)} can add up its own result "
                        f"along the free axis (activation_reduce): the separate sum at line {line} goes."
                    ),
                    relieves=("vector",),
                    payload=fusion,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        fusion: _Fusion = site.payload
        emitter = Emitter(view)
        nisa = emitter.alias("nisa")
        np_alias = emitter.alias("np")
        nl = emitter.alias("nl")
        call = fusion.activation
        callee = view.callee(call)
        if callee.namespace == "nisa":
            op = argument(call, 0, "op")
            data = argument(call, 1, "data")
            kwargs = {k: kw.value for k in ACTIVATION_KEYWORDS if (kw := keyword(call, k)) is not None}
        else:
            op = None
            data = positional(call)[0].value
            kwargs = {k: kw.value for k in ("dtype", "mask") if (kw := keyword(call, k)) is not None}
        assert data is not None
        op_text = view.code(op) if op is not None else f"{nl}.{callee.name}"
        parts = [f"op={op_text}", f"data={view.code(data)}"]
        parts += [f"{k}={view.code(v)}" for k, v in kwargs.items()]
        parts += [f"reduce_op={np_alias}.add", f"reduce_res={view.code(fusion.result)}"]
        fused = cst.parse_expression(f"{nisa}.activation_reduce({', '.join(parts)})")
        allocation = (
            [
                cst.parse_statement(
                    f"{view.code(fusion.result)} = {nl}.ndarray(({fusion.partitions}, 1), dtype={nl}.float32, "
                    f"buffer={nl}.sbuf)\n"
                )
            ]
            if fusion.partitions is not None
            else []
        )
        if fusion.producer is None:
            # `r = nl.sum(nl.exp(x), ...)`: the activation's own result is not kept.
            statement = cst.SimpleStatementLine(body=[cst.Expr(fused)])
            edits: dict[int, object] = {id(fusion.reducer): [*allocation, statement]}
        else:
            edits = {id(call): fused, id(fusion.reducer): None}
            if allocation:
                edits[id(fusion.producer)] = lambda updated: [*allocation, updated]
        return render_with(view, emitter, edits)


def _single_assign(stmt: cst.BaseStatement) -> cst.Assign | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return small
    return None


def _last_axis_only(view: KernelView, axis: cst.BaseExpression | None) -> bool:
    """`axis=1`, `axis=-1`, `axis=(1,)` or `axis=[1]` on a 2-D tile."""
    if axis is None:
        return False
    if isinstance(axis, (cst.Tuple, cst.List)):
        return len(axis.elements) == 1 and _last_axis_only(view, axis.elements[0].value)
    return view.eval_int(axis) in (1, -1)


def _sum_of(
    view: KernelView, stmt: cst.SimpleStatementLine
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(the summed expression, the written result) for `r = nl.sum(x, axis=1, keepdims=True)` or
    `r = nisa.tensor_reduce(np.add, x, axis=(1,), keepdims=True)` (r a Name or a subscript)."""
    assign = _single_assign(stmt)
    if assign is None or not isinstance(assign.value, cst.Call):
        return None
    call = assign.value
    callee = view.callee(call)
    if callee.namespace == "nl" and callee.name == "sum":
        summed = argument(call, 0, "x")
    elif callee.namespace == "nisa" and callee.name == "tensor_reduce":
        if op_name(view, argument(call, 0, "op")) != "add" or keyword(call, "negate") is not None:
            return None
        summed = argument(call, 1, "data")
    else:
        return None
    keep = keyword(call, "keepdims")
    if summed is None or keep is None or dotted(keep.value) != "True":
        return None
    if not _last_axis_only(view, argument(call, 2 if callee.name == "tensor_reduce" else 1, "axis")):
        return None
    if any(keyword(call, k) is not None for k in ("mask", "dtype")):
        return None
    return summed, assign.targets[0].target


def _is_activation(view: KernelView, value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    callee = view.callee(value)
    if callee.namespace == "nisa" and callee.name == "activation":
        return all(keyword(value, k) is None for k in ("reduce_op", "reduce_res", "reduce_cmd"))
    if callee.namespace == "nl" and callee.name in ACTIVATION_FUNCTIONS and callee.name != "copy":
        return len(positional(value)) == 1 and all(
            a.keyword is None or a.keyword.value in ("dtype", "mask") for a in value.args
        )
    return False


def _fusion(
    view: KernelView, reducer: cst.SimpleStatementLine, summed: cst.BaseExpression, result: cst.BaseExpression
) -> _Fusion | None:
    """The activation statement whose result `summed` is, earlier in the same block with nothing
    in between writing it; None when the summed tile is not an activation's result at all."""
    if isinstance(summed, cst.Call):
        if not _is_activation(view, summed):
            return None
        return _Fusion(None, summed, reducer, result, _partitions_for(view, result, summed))
    name = base_name(summed)
    if name is None or not isinstance(summed, (cst.Name, cst.Subscript)):
        return None
    siblings = view.siblings(reducer)
    position = next(i for i, s in enumerate(siblings) if s is reducer)
    text = "".join(view.code(summed).split())
    for index in range(position - 1, -1, -1):
        stmt = siblings[index]
        assign = _single_assign(stmt)
        if assign is not None and "".join(view.code(assign.targets[0].target).split()) == text:
            if not _is_activation(view, assign.value):
                return None
            between = siblings[index + 1 : position]
            result_names = {n.value for n in walk(result) if isinstance(n, cst.Name)}
            for other in between:
                written = view.access(other).writes
                if name in written or (result_names & (written | view.access(other).reads)):
                    raise NotApplicable(
                        f"line {view.line(other)} touches {name} or the sum between the two statements"
                    )
            return _Fusion(stmt, assign.value, reducer, result, _partitions_for(view, result, assign.value))  # type: ignore[arg-type]
        if name in view.access(stmt).writes:
            return None
    return None


def _partitions_for(view: KernelView, result: cst.BaseExpression, activation: cst.Call) -> str | None:
    """None for a buffer result (written in place); the [P, 1] tile's P for a Name result."""
    if not isinstance(result, cst.Name):
        return None
    if _binding_count(view, result.value) != 1:
        raise NotApplicable(f"{result.value} is bound more than once")
    callee = view.callee(activation)
    data = argument(activation, 1, "data") if callee.namespace == "nisa" else positional(activation)[0].value
    partitions = _partition_text(view, data) if data is not None else None
    if partitions is None:
        raise NotApplicable("the partition count of the summed tile is not written in the source")
    return partitions


def _partition_text(view: KernelView, data: cst.BaseExpression) -> str | None:
    """The partition count of a tile: its buffer's par_dim (or first) extent, or the shape the
    source states for it."""
    name = base_name(data)
    if name is None:
        return None
    for stmt in view.simple_statements():
        assign = _single_assign(stmt)
        if (
            assign is not None
            and isinstance(assign.targets[0].target, cst.Name)
            and assign.targets[0].target.value == name
            and view.is_call(assign.value, "nl", "ndarray", "zeros")
        ):
            shape = argument(assign.value, 0, "shape")  # type: ignore[arg-type]
            if not isinstance(shape, cst.Tuple):
                return None
            values = [e.value for e in shape.elements]
            for value in values:
                if isinstance(value, cst.Call) and (dotted(value.func) or "").endswith("par_dim"):
                    return view.code(value.args[0].value)
            indexed = isinstance(data, cst.Subscript) and len(values) > 2
            return None if indexed else view.code(values[0])
    if isinstance(data, cst.Name):
        return _loaded_partitions(view, data.value, depth=0)
    return None


def _loaded_partitions(view: KernelView, name: str, depth: int) -> str | None:
    """The partition extent of a tile loaded by `name = nl.load(x[...])`, looking through
    elementwise steps (`h = nl.add(x_tile, r_tile)`) to the load."""
    value = single_assignment(view, name)
    if not isinstance(value, cst.Call) or depth > 4:
        return None
    if view.is_call(value, "nl", "load"):
        src = argument(value, 0, "src")
        if not isinstance(src, cst.Subscript):
            return None
        for element in src.slice:
            index = element.slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.Name):
                bound = single_assignment(view, index.value.value)
                if isinstance(bound, cst.Call) and dotted(bound.func) == "slice" and len(bound.args) == 2:
                    index = cst.Slice(lower=bound.args[0].value, upper=bound.args[1].value)
            if isinstance(index, cst.Slice):
                extent = slice_extent(view, index)
                return str(extent) if extent is not None else None
            if isinstance(index, cst.Index) and arange_size(view, index.value) is not None:
                return str(arange_size(view, index.value))
            if (
                isinstance(index, cst.Index)
                and view.eval_int(index.value) is None
                and not isinstance(index.value, cst.Name)
            ):
                return None
        return None
    operands = [a.value for a in value.args if a.keyword is None and isinstance(a.value, cst.Name)]
    return _loaded_partitions(view, operands[0].value, depth + 1) if operands else None


def _binding_count(view: KernelView, name: str) -> int:
    count = 0
    for stmt in view.statements():
        if isinstance(stmt, cst.For):
            count += any(isinstance(n, cst.Name) and n.value == name for n in walk(stmt.target))
        elif isinstance(stmt, cst.SimpleStatementLine):
            count += name in view.access(stmt).rebinds
    return count
