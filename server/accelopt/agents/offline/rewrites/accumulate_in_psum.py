"""Accumulate a contraction in PSUM instead of adding each partial product on the Vector Engine.

A contraction loop that takes every matmul's result out of PSUM and adds it to an SBUF sum
(`p = nisa.nc_matmul(a, b)` then `acc[...] = nl.add(acc, p)`, in any spelling: `acc += p`,
`nisa.tensor_tensor(acc, p, op=add)`, destination passing) pays a Vector Engine pass per step,
and in a sequential loop the next matmul waits for it. The Tensor Engine can add into its PSUM
tile itself (an accumulation group, NKI_NOTES §3): the partial products go to one PSUM
accumulator declared before the loop (`p += nisa.nc_matmul(...)`; in destination passing the
default accumulation mode already adds every write after the first), and the add runs once, after the loop, with the same text.

Legal when the partial product is used only by that add, the sum is touched by nothing else in
the loop and is indexed the same way in every iteration, and the accumulator fits one PSUM bank
(2 KiB per partition, 512 fp32: NKI_NOTES §3). The sum of the partial products is then formed in
fp32 in PSUM, then added once to the SBUF sum: the same value up to rounding order.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.facts import allocation_of, memory_of
from accelopt.agents.offline.kernel_ir import (
    KernelView,
    Loop,
    argument,
    base_name,
    dotted,
    keyword,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

PSUM_BANK_BYTES = 2048  # per partition (NKI_NOTES §3; hardware/specs.py psum_bank_bytes)


@dataclass
class _Accumulation:
    loop: Loop
    matmul: cst.SimpleStatementLine
    add: cst.SimpleStatementLine
    product: str  # the partial product's name
    alloc: cst.SimpleStatementLine | None  # the product's PSUM declaration inside the loop
    shape: tuple[str, str] | None  # (partitions, free) source text, when the product has no declaration


class AccumulateInPsum(Rewrite):
    name = "accumulate_in_psum"
    prior = 0.8
    summary = "accumulate a contraction's matmuls in one PSUM tile instead of a Vector add per step"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            for stmt in loop.body:
                if not isinstance(stmt, cst.SimpleStatementLine):
                    continue
                parts = _add_parts(view, stmt)
                if parts is None:
                    continue
                total, product = parts
                matmul = _matmul_into(view, loop, stmt, product)
                if matmul is None:
                    continue
                line = view.line(stmt)
                sid = site_id(self.name, line)
                title = f"accumulate {product} in PSUM across the {loop.var} loop instead of adding it to {total}"
                place = self.place(sid, line, title)
                outcome = _plan(view, loop, matmul, stmt, total, product)
                if isinstance(outcome, str):
                    found.append(place.refused(outcome))
                    continue
                found.append(
                    place.site(
                        description=(
                            f"Every {loop.var} iteration copies the matmul of line {view.line(matmul)} out of "
                            f"PSUM and adds it to {total} on the Vector Engine (line {line}). Accumulate the "
                            "matmuls in one PSUM tile and add it once after the loop."
                        ),
                        relieves=("vector", "latency"),
                        payload=outcome,
                    )
                )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        acc: _Accumulation = site.payload
        nl = view.alias_for("nl")
        if nl is None:
            raise NotApplicable("the kernel does not import the NKI language module")
        destination_passing = isinstance(acc.matmul.body[0], cst.Expr)
        if acc.alloc is not None and destination_passing:
            # nki.* nc_matmul with accumulate=None overwrites on the first write to a location
            # and accumulates on later ones (nki.isa.nc_matmul, "Accumulation mode"): declared
            # once before the loop, the tile needs no zero fill and the call no change.
            declare = acc.alloc.with_changes(leading_lines=())
        elif acc.alloc is not None:
            declare = _zeroed(view, acc.alloc, nl)
        else:
            assert acc.shape is not None
            parsed = cst.parse_statement(
                f"{acc.product} = {nl}.zeros(({acc.shape[0]}, {acc.shape[1]}), dtype={nl}.float32, buffer={nl}.psum)\n"
            )
            assert isinstance(parsed, cst.SimpleStatementLine)
            declare = parsed
        edits: dict[int, object] = {
            id(acc.add): None,
            id(acc.loop.node): lambda updated: [declare, updated, acc.add.with_changes(leading_lines=())],
        }
        if not destination_passing:
            edits[id(acc.matmul)] = _accumulating(acc.matmul)
        if acc.alloc is not None:
            edits[id(acc.alloc)] = None
        return view.render(edits)


def _is_add(view: KernelView, op: cst.BaseExpression | None) -> bool:
    text = dotted(op) if op is not None else None
    return text is not None and text.rsplit(".", 1)[-1] == "add" and text.split(".")[0] in (
        view.alias_for("nl"),
        view.alias_for("np"),
        "np",
        "nl",
    )


def _add_parts(view: KernelView, stmt: cst.SimpleStatementLine) -> tuple[str, str] | None:
    """(sum, product) names for a statement adding a product into a running sum in place."""
    if len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
        total, product = base_name(small.target), base_name(small.value)
        if total and product and total != product and isinstance(small.value, (cst.Name, cst.Subscript)):
            return total, product
        return None
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call):
        target = small.targets[0].target
        return _binary_add(view, small.value, target)
    if isinstance(small, cst.Expr) and view.is_call(small.value, "nisa", "tensor_tensor"):
        assert isinstance(small.value, cst.Call)
        dst = keyword(small.value, "dst")
        return _binary_add(view, small.value, dst.value) if dst is not None else None
    return None


def _binary_add(view: KernelView, call: cst.Call, target: cst.BaseExpression) -> tuple[str, str] | None:
    if view.is_call(call, "nl", "add"):
        x, y = argument(call, 0, "x"), argument(call, 1, "y")
    elif view.is_call(call, "nisa", "tensor_tensor") and _is_add(view, argument(call, 2, "op")):
        x, y = argument(call, 0, "data1"), argument(call, 1, "data2")
    else:
        return None
    total = base_name(target)
    if x is None or y is None or total is None:
        return None
    squash = "".join(view.code(target).split())
    for same, other in ((x, y), (y, x)):
        same_text = "".join(view.code(same).split())
        if base_name(same) == total and (same_text == squash or isinstance(same, cst.Name)):
            product = base_name(other)
            if product and product != total and isinstance(other, (cst.Name, cst.Subscript)):
                return total, product
    return None


def _matmul_into(
    view: KernelView, loop: Loop, add: cst.SimpleStatementLine, product: str
) -> cst.SimpleStatementLine | None:
    """The statement of the loop body, before `add`, that writes `product` with a matmul."""
    for stmt in loop.body:
        if stmt is add:
            return None
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            if base_name(small.targets[0].target) == product and view.is_call(small.value, "nisa", "nc_matmul"):
                return stmt
        if isinstance(small, cst.Expr) and view.is_call(small.value, "nisa", "nc_matmul"):
            assert isinstance(small.value, cst.Call)
            dst = keyword(small.value, "dst")
            if dst is not None and base_name(dst.value) == product:
                return stmt
    return None


def _plan(
    view: KernelView,
    loop: Loop,
    matmul: cst.SimpleStatementLine,
    add: cst.SimpleStatementLine,
    total: str,
    product: str,
) -> _Accumulation | str:
    call = next(c for c in view.calls_in(matmul) if view.is_call(c, "nisa", "nc_matmul"))
    accumulate = keyword(call, "accumulate")
    if accumulate is not None:
        return "the matmul sets its accumulation mode itself"
    alloc = allocation_of(view, product)
    if alloc is not None and not any(s is alloc for s in loop.body):
        return f"{product} is declared outside the {loop.var} loop"
    if alloc is not None and memory_of(view, product) != "psum":
        return f"{product} is not a PSUM tile"
    users = {id(view.statement_of(u)) for u in view.name_uses(product)}
    if users - {id(matmul), id(add), id(alloc)}:
        return f"{product} is used by more than the add"
    body_writes = view.access(loop.node).writes
    for stmt in loop.body:
        if stmt is add:
            continue
        if total in view.access(stmt).reads | view.access(stmt).writes:
            return f"{total} is also used at line {view.line(stmt)} in the loop"
    add_reads = view.access(add).reads - {total, product}
    changing = (add_reads & body_writes) | ({loop.var} & view.access(add).reads)
    if changing:
        return f"the add reads {sorted(changing)[0]}, which changes from one iteration to the next"
    if loop.trip_expr is not None and view.eval_int(loop.trip_expr) == 1:
        return f"the {loop.var} loop runs once"
    shape_text: tuple[str, str] | None = None
    free: int | None
    if alloc is not None:
        free = _free_elements(view, alloc)
    else:
        shape_text = _declared_shape(view, total)
        if shape_text is None:
            return f"the shape of {total} is not known from the source"
        free = view.eval_int(cst.parse_expression(shape_text[1]))
    if free is None:
        return "the accumulator's width is not known from the source"
    if free * 4 > PSUM_BANK_BYTES:
        return f"an fp32 accumulator {free} wide does not fit one 2 KiB PSUM bank"
    return _Accumulation(loop, matmul, add, product, alloc, shape_text)


def _declared_shape(view: KernelView, name: str) -> tuple[str, str] | None:
    """(partitions, free) text of a 2-D tile's declaration."""
    stmt = allocation_of(view, name)
    if stmt is None:
        return None
    small = stmt.body[0]
    assert isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
    shape = argument(small.value, 0, "shape")
    if not isinstance(shape, cst.Tuple) or len(shape.elements) != 2:
        return None
    return view.code(shape.elements[0].value), view.code(shape.elements[1].value)


def _free_elements(view: KernelView, alloc: cst.SimpleStatementLine) -> int | None:
    small = alloc.body[0]
    assert isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
    shape = argument(small.value, 0, "shape")
    if not isinstance(shape, cst.Tuple) or not shape.elements:
        return None
    free = 1
    for element in shape.elements[1:]:
        value = view.eval_int(element.value)
        if value is None:
            return None
        free *= value
    return free


def _zeroed(view: KernelView, alloc: cst.SimpleStatementLine, nl: str) -> cst.SimpleStatementLine:
    """The product's declaration as a zero-filled PSUM accumulator."""
    small = alloc.body[0]
    assert isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
    call = small.value.with_changes(func=cst.parse_expression(f"{nl}.zeros"))
    return alloc.with_changes(body=[small.with_changes(value=call)], leading_lines=())


def _accumulating(matmul: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`p = nisa.nc_matmul(...)` as `p += nisa.nc_matmul(...)` (one accumulation group)."""
    small = matmul.body[0]
    assert isinstance(small, cst.Assign)
    return matmul.with_changes(
        body=[cst.AugAssign(target=small.targets[0].target, operator=cst.AddAssign(), value=small.value)]
    )
