"""Size a matmul's PSUM accumulation group to a whole bank: widen the moving free dimension.

A PSUM bank holds 2 KiB per partition, 512 fp32 (NKI_NOTES §3), and one matmul's moving
operand may be up to 512 wide (nl.tile_size.gemm_moving_fmax). A loop `for n in range(N // C)`
whose accumulators are only C < 512 wide issues 512 / C times more matmuls, PSUM copies, loads of
the moving operand and stores than it needs, and reloads the stationary operand that often.
This rewrite makes each iteration of that loop cover `F * C` columns (F times fewer iterations),
widening exactly the values that depend on `n`: the moving operand, the accumulator and what is
computed from it, down to the store. The stationary operand, and everything else that does not
depend on `n`, keeps its shape.

Legal when `n` appears only as a multiple of a tile width in index expressions
(`n * C : (n + 1) * C`, `C * n + nl.arange(C)[None, :]`), no value that depends on `n` is
combined with an on-chip tile that does not (except as a matmul's moving operand beside its
stationary one), the stationary operand does not depend on `n`, the tiles that depend on `n`
are declared inside the loop as 2-D tiles `C` wide, the loop has no masks and no Tensor Engine
instruction other than `nc_matmul`, and `F * C` stays within a bank and the moving-operand limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.affine import arange_size, linear_form
from accelopt.agents.offline.facts import allocation_of, memory_of
from accelopt.agents.offline.kernel_ir import KernelView, Loop, argument, base_name, keyword, names_in, walk
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

PSUM_BANK_FP32 = 512  # 2 KiB per partition per bank / 4 bytes (NKI_NOTES §3)
MOVING_FREE_MAX = 512  # nl.tile_size.gemm_moving_fmax
_OTHER_TENSOR_ENGINE = {"matmul", "nc_transpose", "transpose"}
# Instructions whose result is not as wide as their input: widening the input changes the value.
_NARROWING = {"sum", "max", "min", "mean", "prod", "all", "any", "tensor_reduce", "activation_reduce", "transpose"}


@dataclass
class _Plan:
    loop: Loop
    chunk: int
    factors: list[int]
    scale: list[cst.BaseExpression] = field(default_factory=list)  # constants multiplied by the factor


class FillPsumBank(Rewrite):
    name = "fill_psum_bank"
    prior = 0.8
    summary = "widen a matmul loop's moving tiles so each PSUM accumulation group fills a bank"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            if not any(view.is_call(c, "nisa", "nc_matmul") for c in view.calls_in(loop.node)):
                continue
            outcome = _analyse(view, loop)
            if outcome is None:
                continue
            sid = site_id(self.name, loop.line)
            title = f"widen the {loop.var} loop's PSUM accumulators to fill a bank"
            place = self.place(sid, loop.line, title)
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            wide = outcome.chunk * outcome.factors[0]
            found.append(
                place.site(
                    title=f"widen the {loop.var} loop's PSUM accumulators from {outcome.chunk} to {wide} columns",
                    description=(
                        f"Each iteration of the {loop.var} loop (line {loop.line}) accumulates only "
                        f"{outcome.chunk} fp32 columns in PSUM, a fraction of a 2 KiB bank: wider "
                        "accumulators issue fewer matmuls, copies and DMAs, and reload the stationary "
                        "operand less often."
                    ),
                    variants=[{"factor": f} for f in outcome.factors],
                    relieves=("hbm", "tensor", "latency"),
                    payload=outcome,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        plan: _Plan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        return f"widen the {plan.loop.var} loop's PSUM accumulators from {plan.chunk} to {plan.chunk * factor} columns"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        plan: _Plan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        if factor not in plan.factors:
            raise NotApplicable(f"a factor of {factor} does not fit this loop (possible: {plan.factors})")
        edits: dict[int, object] = {id(e): cst.Integer(str(plan.chunk * factor)) for e in plan.scale}
        trip = plan.loop.trip_expr
        assert trip is not None
        text = view.code(trip)
        text = text if text.replace("_", "").isalnum() else f"({text})"
        edits[id(trip)] = cst.parse_expression(f"{text} // {factor}")
        if view.eval_int(trip) is None:
            check = cst.parse_statement(
                f'assert {text} % {factor} == 0, "the widened {plan.loop.var} loop needs a multiple of {factor} tiles"\n'
            )
            edits[id(plan.loop.node)] = lambda updated: [check, updated]
        return view.render(edits)


def _dependents(view: KernelView, loop: Loop) -> set[str]:
    """Names whose values depend on the loop variable, inside the loop."""
    dep = {loop.var}
    stmts = [s for s in view.statements(loop.node) if isinstance(s, cst.SimpleStatementLine)]
    for _ in range(3):
        for stmt in stmts:
            acc = view.access(stmt)
            if acc.reads & dep:
                dep |= acc.writes
    return dep


def _analyse(view: KernelView, loop: Loop) -> _Plan | str | None:
    var = loop.var
    if loop.trip_expr is None:
        return f"the {var} loop has a start or step"
    uses = [u for u in view.name_uses(var, loop.node) if u is not loop.node.target]
    if not uses:
        return None
    plan = _Plan(loop, 0, [])
    chunk: int | None = None
    elements: list[cst.BaseSlice] = []
    for use in uses:
        element = next((a for a in view.ancestors(use) if isinstance(a, cst.SubscriptElement)), None)
        if element is None:
            return f"{var} is used outside an index at line {view.line(use)}"
        subscript = view.parent(element)
        if not isinstance(subscript, cst.Subscript) or subscript.slice[-1] is not element:
            return None  # it tiles partitions or blocks: not a free-axis loop
        multiply = view.parent(use)
        if isinstance(multiply, cst.BinaryOperation) and isinstance(multiply.operator, cst.Add):
            multiply = view.parent(multiply)  # `(n + 1) * C`
        if not isinstance(multiply, cst.BinaryOperation) or not isinstance(multiply.operator, cst.Multiply):
            return f"{var} is not multiplied by a tile width at line {view.line(use)}"
        if view.eval_int(multiply.right) is not None:
            width_node = multiply.right
        elif view.eval_int(multiply.left) is not None:
            width_node = multiply.left
        else:
            return f"{var} is not multiplied by a constant tile width at line {view.line(use)}"
        width = view.eval_int(width_node)
        assert width is not None
        if chunk is not None and width != chunk:
            return f"{var} offsets tiles of different widths ({chunk} and {width})"
        chunk = width
        if any(width_node is s for s in plan.scale):
            continue
        plan.scale.append(width_node)
        elements.append(element.slice)
    assert chunk is not None
    if chunk >= PSUM_BANK_FP32:
        return None  # already a full bank
    for call in view.calls_in(loop.node):
        callee = view.callee(call)
        if callee.namespace in ("nl", "nisa") and callee.name in _OTHER_TENSOR_ENGINE:
            return f"the loop also runs {callee} on the Tensor Engine"
        if keyword(call, "mask") is not None:
            return "the loop has masked instructions"
        if callee.namespace in ("nl", "nisa") and (
            callee.name in _NARROWING or keyword(call, "reduce_op") is not None or keyword(call, "axis") is not None
        ):
            return f"the loop reduces along an axis ({callee}, line {view.line(call)})"
    plan.chunk = chunk
    # `C * n + nl.arange(C)[None, :]`: the grid beside the offset widens with it.
    for index in elements:
        if isinstance(index, cst.Index):
            form = linear_form(view, index.value)
            if form is None:
                return f"an index of {var} is not affine"
            for grid in form.aranges:
                if grid.size != chunk:
                    return f"an index of {var} mixes tile widths {chunk} and {grid.size}"
                plan.scale.append(_arange_argument(grid.node))
    dep = _dependents(view, loop)
    reason = _check_operands(view, loop, dep)
    if reason is not None:
        return reason
    reason = _collect_tiles(view, loop, dep, plan)
    if reason is not None:
        return reason
    trip = view.eval_int(loop.trip_expr)
    plan.factors = [  # the widest first: the one that fills the bank
        f
        for f in (8, 4, 2)
        if chunk * f <= min(PSUM_BANK_FP32, MOVING_FREE_MAX) and (trip is None or trip % f == 0)
    ]
    if trip is None:
        # The trip count is a guess about the input shape (checked by an assertion): offer the
        # smallest step only, as block_accumulators does; the site comes back on the wider kernel.
        plan.factors = plan.factors[-1:]
    if not plan.factors:
        return "no widening factor divides the trip count within one PSUM bank"
    return plan


def _arange_argument(grid: cst.Subscript) -> cst.BaseExpression:
    call = grid.value
    assert isinstance(call, cst.Call)
    return call.args[0].value


def _check_operands(view: KernelView, loop: Loop, dep: set[str]) -> str | None:
    for stmt in view.simple_statements(loop.node):
        acc = view.access(stmt)
        if not acc.reads & dep:
            continue
        matmul = next((c for c in view.calls_in(stmt) if view.is_call(c, "nisa", "nc_matmul")), None)
        stationary = argument(matmul, 0, "stationary") if matmul is not None else None
        if stationary is not None and names_in(stationary) & dep:
            return f"the matmul's stationary operand at line {view.line(stmt)} depends on {loop.var}"
        allowed = names_in(stationary) if stationary is not None else set()
        fixed = {
            n
            for n in acc.reads - dep - allowed
            if memory_of(view, n) in ("sbuf", "psum") and n not in acc.writes
        }
        if fixed:
            return (
                f"line {view.line(stmt)} combines a value that depends on {loop.var} with "
                f"{sorted(fixed)[0]}, which keeps its width"
            )
    return None


def _collect_tiles(view: KernelView, loop: Loop, dep: set[str], plan: _Plan) -> str | None:
    """The declared widths and free-axis grids of the on-chip tiles that depend on the loop."""
    for name in sorted(dep - {loop.var}):
        stmt = allocation_of(view, name)
        if stmt is None:
            continue  # a value bound by an instruction: its shape follows its operands
        call = cst.ensure_type(cst.ensure_type(stmt.body[0], cst.Assign).value, cst.Call)
        if memory_of(view, name) == "hbm":
            continue
        if not view.contains(loop.node, stmt):
            return f"{name} depends on {loop.var} but is declared outside the loop (line {view.line(stmt)})"
        shape = argument(call, 0, "shape")
        if not isinstance(shape, cst.Tuple) or len(shape.elements) != 2:
            return f"{name} (line {view.line(stmt)}) is not declared as a 2-D tile"
        last = shape.elements[-1].value
        if view.eval_int(last) != plan.chunk:
            return f"{name} (line {view.line(stmt)}) is not {plan.chunk} wide"
        plan.scale.append(last)
        for node in walk(loop.node):
            if isinstance(node, cst.Subscript) and base_name(node) == name and node.value is not None:
                reason = _free_index(view, node, plan)
                if reason is not None:
                    return reason
    return None


def _free_index(view: KernelView, subscript: cst.Subscript, plan: _Plan) -> str | None:
    """Widen the free-axis index of a subscript of a widened tile (a grid or a slice)."""
    if len(subscript.slice) != 2:
        return f"{base_name(subscript)} is indexed with {len(subscript.slice)} axes at line {view.line(subscript)}"
    element = subscript.slice[-1].slice
    if isinstance(element, cst.Slice):
        if element.lower is None and element.upper is None:
            return None
        if element.upper is not None and view.eval_int(element.upper) == plan.chunk and (
            element.lower is None or view.eval_int(element.lower) == 0
        ):
            if all(element.upper is not s for s in plan.scale):
                plan.scale.append(element.upper)
            return None
    if isinstance(element, cst.Index) and arange_size(view, element.value) == plan.chunk:
        argument_node = _arange_argument(element.value)  # type: ignore[arg-type]
        if all(argument_node is not s for s in plan.scale):
            plan.scale.append(argument_node)
        return None
    return f"the free index of {base_name(subscript)} at line {view.line(subscript)} is not a whole tile"
