"""Widen the free dimension each iteration of a tiling loop covers: `factor` times fewer, larger
instructions and DMA transfers (each pays a fixed cost, NKI_NOTES §4).

A loop `for j in range(T)` whose variable only offsets tiles along a free (non-partition) axis,
`j * C : (j + 1) * C` or `C * j + nl.arange(C)[None, :]`, becomes `range(T // factor)` with
offsets `factor * C` and tiles `factor * C` wide: every `C`-wide grid, slice and tile shape in the
loop body is scaled, masks included. The hand-written spelling `c0 = j * C` followed by slices
`c0 : c0 + C` is understood too, as long as `c0` is used for nothing else. The same number as
the partition extent (square tiles, `x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]`) is
left as it is: only the free-axis spelling is widened. Refused when the variable is used any other way, when it
tiles the partition axis, when the loop feeds the Tensor Engine, when a buffer it fills is also
used outside the loop, or when the wider tiles would overflow PSUM (2 KiB per partition) or SBUF.
A trip count not known from the source gets an assertion, so a shape that does not divide fails
loudly rather than silently skipping columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from accelopt.agents.offline.affine import arange_size, linear_form
from accelopt.agents.offline.facts import ALLOCATORS, memory_of_expr
from accelopt.agents.offline.kernel_ir import KernelView, Loop, argument, base_name, children, walk
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

FACTORS = (2, 4, 8)
PSUM_PARTITION_BYTES = 2048
SBUF_PARTITION_BYTES = 180_224
TENSOR_ENGINE_APIS = {"nc_matmul", "matmul", "nc_transpose", "transpose"}


@dataclass
class _Widening:
    loop: Loop
    chunk: int
    multiplies: list[cst.BinaryOperation] = field(default_factory=list)  # `C * j` whose C scales
    aranges: list[cst.Call] = field(default_factory=list)  # `nl.arange(C)` on a free axis
    shapes: list[cst.BaseExpression] = field(default_factory=list)  # a tile shape's free extent C
    widths: list[cst.BaseExpression] = field(default_factory=list)  # `C` in `c0 : c0 + C`
    factors: list[int] = field(default_factory=list)


class WidenFreeDim(Rewrite):
    name = "widen_free_dim"
    prior = 1.0
    summary = "make each iteration of a free-axis tiling loop cover a wider tile"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            outcome = _analyse(view, loop)
            if outcome is None:
                continue
            sid = site_id(self.name, loop.line)
            title = f"widen the tiles of the {loop.var} loop"
            place = self.place(sid, loop.line, title)
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            found.append(
                place.site(
                    title=f"{title} from {outcome.chunk} to {outcome.chunk * outcome.factors[0]} columns",
                    description=(
                        f"Each iteration of the {loop.var} loop (line {loop.line}) handles {outcome.chunk} "
                        "columns; covering more per iteration issues fewer, larger instructions and DMAs."
                    ),
                    variants=[{"factor": f} for f in outcome.factors],
                    relieves=("hbm", "vector", "scalar", "latency"),
                    payload=outcome,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        widening: _Widening = site.payload
        factor = int(params.get("factor", 2))
        return f"widen the tiles of the {widening.loop.var} loop from {widening.chunk} to {widening.chunk * factor} columns"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        widening: _Widening = site.payload
        factor = int(params.get("factor", widening.factors[0]))
        if factor not in widening.factors:
            raise NotApplicable(f"a factor of {factor} does not fit this loop (possible: {widening.factors})")
        edits: dict[int, object] = {}
        for mul in widening.multiplies:
            const_left = view.eval_int(mul.left) is not None
            side = mul.left if const_left else mul.right
            scaled = _scaled(view, side, factor)
            edits[id(side)] = scaled
        for call in widening.aranges:
            arg = call.args[0]
            edits[id(arg.value)] = _scaled(view, arg.value, factor)
        for extent in [*widening.shapes, *widening.widths]:
            edits[id(extent)] = _scaled(view, extent, factor)
        loop = widening.loop
        trip = loop.trip_expr
        assert trip is not None
        edits[id(trip)] = cst.parse_expression(f"{_paren(view.code(trip))} // {factor}")
        prefix: list[cst.BaseStatement] = []
        if view.eval_int(trip) is None:
            prefix.append(
                cst.parse_statement(
                    f"assert {_paren(view.code(trip))} % {factor} == 0, "
                    f'"the widened {loop.var} loop needs a multiple of {factor} tiles"\n'
                )
            )
        if prefix:
            edits[id(loop.node)] = lambda updated: [*prefix, updated]
        return view.render(edits)


def _paren(text: str) -> str:
    return text if text.replace("_", "").isalnum() else f"({text})"


def _scaled(view: KernelView, expr: cst.BaseExpression, factor: int) -> cst.BaseExpression:
    value = view.eval_int(expr)
    if isinstance(expr, (cst.Integer, cst.UnaryOperation)) and value is not None:
        return cst.parse_expression(str(value * factor))
    return cst.parse_expression(f"{_paren(view.code(expr))} * {factor}")


def _analyse(view: KernelView, loop: Loop) -> _Widening | str | None:
    var = loop.var
    uses = [u for u in view.name_uses(var, loop.node) if u is not loop.node.target]
    if not uses:
        return None
    if loop.trip_expr is None:
        return f"the {var} loop has a start or step"
    for call in view.calls_in(loop.node):
        callee = view.callee(call)
        if callee.namespace in ("nl", "nisa") and callee.name in TENSOR_ENGINE_APIS:
            return f"the loop feeds the Tensor Engine ({callee}) whose operand sizes are fixed"
    chunk: int | None = None
    widening = _Widening(loop, 0)
    for use in uses:
        if _in_loop_indices(view, use):
            continue
        root: cst.BaseExpression = use
        parent = view.parent(root)
        while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)):
            root = parent
            parent = view.parent(root)
        form = linear_form(view, root)
        coef = form.coefficient(var) if form is not None else 0
        if form is None or coef == 0:
            return f"{var} is used in `{view.snippet(root, 40)}` (line {view.line(use)}), not only as a tile offset"
        if isinstance(parent, cst.Assign):
            size, reason = _offset_name_chunk(view, loop, root, parent, widening)
        else:
            size, reason = _context_chunk(view, root, parent, abs(coef))
        if reason is not None:
            return reason
        if size is None:
            continue  # a block index of a buffer
        mul = _multiply_of(view, use, var)
        if mul is None:
            return f"{var} is not multiplied by a tile width in `{view.snippet(root, 40)}`"
        if chunk is not None and size != chunk:
            return f"{var} offsets tiles of different widths ({chunk} and {size})"
        chunk = size
        widening.multiplies.append(mul)
    if chunk is None:
        return f"{var} never offsets a free-axis tile"
    widening.chunk = chunk
    reason = _collect_scaled(view, loop, widening)
    if reason is not None:
        return reason
    reason = _unexplained_width(view, loop, widening)
    if reason is not None:
        return reason
    widening.factors = _factors(view, loop, widening)
    if not widening.factors:
        return "no widening factor fits the trip count and the on-chip memory limits"
    return widening


def _unexplained_width(view: KernelView, loop: Loop, widening: _Widening) -> str | None:
    """Any other spelling of the tile width in the loop body (a broadcast shape, the index of the
    last column) would silently keep the old width: refuse rather than guess its meaning."""
    scaled: list[cst.CSTNode] = [
        *widening.shapes,
        *widening.widths,
        *(c.args[0].value for c in widening.aranges),
    ]
    for mul in widening.multiplies:
        scaled.append(mul.left if view.eval_int(mul.left) is not None else mul.right)
    covered = {id(n) for n in scaled} | {id(n) for n in _partition_widths(view, loop)}

    def width_in(stmt: cst.CSTNode) -> bool:
        stack = [stmt]
        while stack:
            node = stack.pop()
            if id(node) in covered:
                continue
            if isinstance(node, (cst.Integer, cst.Name)) and view.eval_int(node) == widening.chunk:
                return True
            stack.extend(children(node))
        return False

    for stmt in view.statements(loop.node):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        if width_in(stmt):
            return (
                f"the tile width {widening.chunk} also appears as `{view.snippet(stmt, 50)}` "
                f"(line {view.line(stmt)}), which this rewrite cannot interpret"
            )
    return None


def _partition_widths(view: KernelView, loop: Loop) -> list[cst.CSTNode]:
    """Where the loop body spells the partition extent, which widening leaves as it is: the
    partition element of a subscript (`x[i * 128 : (i + 1) * 128, j * 128 : ...]`), a partition
    grid `nl.arange(128)[:, None]` and the first extent of a tile allocated in the loop. Square
    tiles are common, and the same number there is not a free-axis width. An element that uses
    the widened loop's variable is not one of them (that loop is refused earlier anyway)."""
    found: list[cst.CSTNode] = []
    for sub in _subscripts(loop.node):
        if view.is_call(sub.value, "nl", "arange"):
            if not _free_axis(view, sub):
                found.append(sub)
            continue
        for el in sub.slice:
            if _is_partition_element(view, sub, el) and not view.name_uses(loop.var, el):
                found.append(el)
    for stmt in view.simple_statements(loop.node):
        for call in view.calls_in(stmt):
            if view.callee(call).namespace in ("nl", "nisa") and view.callee(call).name in ALLOCATORS:
                shape = argument(call, 0, "shape")
                if isinstance(shape, (cst.Tuple, cst.List)) and len(shape.elements) >= 2:
                    found.append(shape.elements[0].value)
    return found


def _in_loop_indices(view: KernelView, use: cst.Name) -> bool:
    for anc in view.ancestors(use):
        if isinstance(anc, cst.Arg):
            return anc.keyword is not None and anc.keyword.value == "loop_indices"
        if isinstance(anc, cst.BaseStatement):
            return False
    return False


def _multiply_of(view: KernelView, use: cst.Name, var: str) -> cst.BinaryOperation | None:
    """The `C * (j + k)` node scaling the loop variable by a constant."""
    node: cst.CSTNode = use
    parent = view.parent(node)
    while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)):
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply):
            other = parent.right if parent.left is node else parent.left
            if view.eval_int(other) is not None:
                return parent
            return None
        node = parent
        parent = view.parent(node)
    return None


def _context_chunk(
    view: KernelView, root: cst.BaseExpression, parent: cst.CSTNode | None, coef: int
) -> tuple[int | None, str | None]:
    """The tile width the offset steps over, checked against where the expression is used."""
    form = linear_form(view, root)
    assert form is not None
    if isinstance(parent, cst.Index):
        element = view.parent(parent)
        subscript = view.parent(element) if element is not None else None
        free = [a for a in form.aranges if _free_axis(view, a.node)]
        part = [a for a in form.aranges if not _free_axis(view, a.node)]
        if part:
            return None, "the loop variable tiles the partition axis"
        if free:
            if free[0].size != coef:
                return None, f"the offset step {coef} differs from the tile width {free[0].size}"
            return coef, None
        if isinstance(subscript, cst.Subscript) and coef == 1:
            return None, None  # a block index into a buffer with block dimensions
        return None, f"`{view.snippet(root, 40)}` is an index, not a tile offset"
    if isinstance(parent, cst.Slice):
        lower, upper = parent.lower, parent.upper
        if lower is None or upper is None:
            return None, "an open slice"
        lo, hi = linear_form(view, lower), linear_form(view, upper)
        if lo is None or hi is None or not hi.minus(lo).is_constant or hi.minus(lo).const != coef:
            return None, "the slice is not one tile of width equal to its step"
        element = view.parent(parent)
        subscript = view.parent(element) if element is not None else None
        if isinstance(subscript, cst.Subscript) and _is_partition_element(view, subscript, element):
            return None, "the loop variable tiles the partition axis"
        return coef, None
    if isinstance(parent, cst.Arg):
        call = view.parent(parent)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "slice":
            return _named_slice_chunk(view, call, coef)
        return None, f"`{view.snippet(root, 40)}` is passed to a call"
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        free = [a for a in form.aranges if _free_axis(view, a.node)]
        if free and free[0].size == coef:
            return coef, None
        if not form.aranges:
            return None, "a mask compares the loop variable alone"
        return None, "a mask on the partition axis moves with the loop variable"
    return None, f"`{view.snippet(root, 40)}` is used as a value"


def _offset_name_chunk(
    view: KernelView, loop: Loop, root: cst.BaseExpression, assign: cst.Assign, widening: _Widening
) -> tuple[int | None, str | None]:
    """`c0 = j * C` bound once inside the loop, then only ever the start of a `c0 : c0 + C`
    free-axis slice: the tile width is C, and each `C` after `c0 +` scales with the offsets."""
    value = f"`{view.snippet(root, 40)}` is used as a value"
    form = linear_form(view, root)
    if form is None or len(form.terms) != 1 or form.const or form.aranges:
        return None, value
    width = abs(form.coefficient(loop.var))
    stmt = view.statement_of(assign)
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or stmt is None:
        return None, value
    name = assign.targets[0].target.value
    if not view.contains(loop.node, stmt) or _binding_count(view, name) != 1:
        return None, f"{value}: {name} is not bound once, in the {loop.var} loop body"
    widths: list[cst.BaseExpression] = []
    for use in view.name_uses(name):
        parent = view.parent(use)
        if isinstance(parent, cst.AssignTarget) and view.statement_of(use) is stmt:
            continue  # the binding itself
        if isinstance(parent, cst.Slice) and parent.lower is use and view.contains(loop.node, use):
            stop = _stop_width(view, parent.upper, name)
            element = view.parent(parent)
            subscript = view.parent(element) if element is not None else None
            if stop is not None and view.eval_int(stop) == width and isinstance(subscript, cst.Subscript):
                if _is_partition_element(view, subscript, element):
                    return None, "the loop variable tiles the partition axis"
                widths.append(stop)
                continue
        grand = view.parent(parent) if parent is not None else None
        if isinstance(grand, cst.Slice) and grand.upper is parent and _is_name(grand.lower, name):
            continue  # the `c0` of a `c0 : c0 + C` stop, checked with its start
        return None, (
            f"{value}: {name} = {view.snippet(root, 30)} is used in "
            f"`{view.snippet(parent or use, 40)}` (line {view.line(use)}), not only as the start of "
            f"a `{name} : {name} + {width}` slice"
        )
    if not widths:
        return None, f"{value}: {name} never starts a tile slice"
    widening.widths.extend(widths)
    return width, None


def _stop_width(view: KernelView, upper: cst.BaseExpression | None, name: str) -> cst.BaseExpression | None:
    """The `C` of a slice stop written `name + C` or `C + name`."""
    if not isinstance(upper, cst.BinaryOperation) or not isinstance(upper.operator, cst.Add):
        return None
    if _is_name(upper.left, name) and view.eval_int(upper.right) is not None:
        return upper.right
    if _is_name(upper.right, name) and view.eval_int(upper.left) is not None:
        return upper.left
    return None


def _is_name(expr: cst.CSTNode | None, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _binding_count(view: KernelView, name: str) -> int:
    """How many statements in the kernel assign `name` (loop targets included)."""
    count = 0
    for stmt in view.statements():
        if isinstance(stmt, cst.For):
            count += any(_is_name(n, name) for n in walk(stmt.target))
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                count += sum(any(_is_name(n, name) for n in walk(t.target)) for t in small.targets)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                count += _is_name(small.target, name)
    return count


def _named_slice_chunk(view: KernelView, call: cst.Call, coef: int) -> tuple[int | None, str | None]:
    if len(call.args) != 2:
        return None, "a slice() with a step"
    lo, hi = linear_form(view, call.args[0].value), linear_form(view, call.args[1].value)
    if lo is None or hi is None or not hi.minus(lo).is_constant or hi.minus(lo).const != coef:
        return None, "the slice is not one tile of width equal to its step"
    stmt = view.statement_of(call)
    name = None
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
        target = stmt.body[0].targets[0].target
        name = target.value if isinstance(target, cst.Name) else None
    if name is None:
        return None, "slice() is not bound to a name"
    for use in view.name_uses(name):
        if view.statement_of(use) is stmt:
            continue
        index = view.parent(use)
        element = view.parent(index) if index is not None else None
        subscript = view.parent(element) if element is not None else None
        if not isinstance(subscript, cst.Subscript):
            return None, f"{name} is used outside an index"
        if _is_partition_element(view, subscript, element):
            return None, f"{name} tiles the partition axis"
    return coef, None


def _is_partition_element(view: KernelView, subscript: cst.Subscript, element: cst.CSTNode | None) -> bool:
    """The first element that is not a plain integer index is the partition axis."""
    for el in subscript.slice:
        index = el.slice
        if isinstance(index, cst.Index) and _is_integer_index(view, index.value):
            continue
        return el is element
    return False


def _is_integer_index(view: KernelView, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name):
        value = _slice_binding(view, expr.value)
        return value is None  # a name bound to slice(...) is a slice; other names are integers
    form = linear_form(view, expr)
    return form is not None and not form.aranges


def _slice_binding(view: KernelView, name: str) -> cst.Call | None:
    for stmt in view.simple_statements():
        for small in stmt.body:
            if (
                isinstance(small, cst.Assign)
                and any(isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets)
                and isinstance(small.value, cst.Call)
                and isinstance(small.value.func, cst.Name)
                and small.value.func.value == "slice"
            ):
                return small.value
    return None


def _free_axis(view: KernelView, arange_subscript: cst.Subscript) -> bool:
    """`nl.arange(n)[None, :]`: the `:` is not in the first (partition) position."""
    for position, el in enumerate(arange_subscript.slice):
        if isinstance(el.slice, cst.Slice):
            return position > 0
    return False


def _collect_scaled(view: KernelView, loop: Loop, widening: _Widening) -> str | None:
    chunk = widening.chunk
    touched: set[str] = set()
    # Buffers whose widened grid is not on their last axis (e.g. the head axis fold_loop adds in
    # front of the columns): their allocated extent on that axis would have to grow as well.
    inner_axis: dict[str, int] = {}
    for node in _subscripts(loop.node):
        grids = [el for el in node.slice if isinstance(el.slice, cst.Index)]
        for el in grids:
            for sub in _arange_subscripts(view, el.slice.value):  # type: ignore[attr-defined]
                if arange_size(view, sub) == chunk and _free_axis(view, sub):
                    call = sub.value
                    assert isinstance(call, cst.Call)
                    if all(c is not call for c in widening.aranges):
                        widening.aranges.append(call)
                    name = base_name(node)
                    if name is not None:
                        touched.add(name)
                        if el is not node.slice[-1]:
                            inner_axis.setdefault(name, view.line(node))
    # Masks and other expressions may hold free-axis grids outside subscripts.
    for sub in _arange_subscripts(view, loop.node):
        if arange_size(view, sub) == chunk and _free_axis(view, sub):
            call = sub.value
            if all(c is not call for c in widening.aranges):
                widening.aranges.append(call)  # type: ignore[arg-type]
    for name in sorted(touched):
        allocation = _allocation(view, name)
        if allocation is None:
            continue  # a kernel argument (HBM): its own shape is what it is
        stmt, call = allocation
        if memory_of_expr(view, call) == "hbm":
            continue  # a DRAM tensor: only the tiles moving in and out change
        if name in inner_axis:
            return (
                f"the {chunk}-wide grid of {name} (line {inner_axis[name]}) is not on its last axis: "
                f"its allocation (line {view.line(stmt)}) would have to widen on an inner axis"
            )
        extent = _free_extent(view, call)
        if extent is None:
            return f"the free size of {name} (line {view.line(stmt)}) is not written as a number"
        if view.eval_int(extent) != chunk:
            continue  # wider than a tile already: the offsets address it
        if not view.contains(loop.node, stmt):
            outside = [
                u
                for u in view.name_uses(name)
                if not view.contains(loop.node, u) and view.statement_of(u) is not stmt
            ]
            if outside:
                return f"{name} is also used outside the loop (line {view.line(outside[0])})"
        if all(e is not extent for e in widening.shapes):
            widening.shapes.append(extent)
    # Tiles allocated in the loop body with the chunk as free size (hand-written style).
    for stmt in view.simple_statements(loop.node):
        for call in view.calls_in(stmt):
            if view.callee(call).namespace in ("nl", "nisa") and view.callee(call).name in ALLOCATORS:
                extent = _free_extent(view, call)
                if (
                    extent is not None
                    and view.eval_int(extent) == chunk
                    and all(e is not extent for e in widening.shapes)
                ):
                    widening.shapes.append(extent)
    return None


def _allocation(view: KernelView, name: str) -> tuple[cst.SimpleStatementLine, cst.Call] | None:
    for stmt in view.simple_statements():
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            continue
        small = stmt.body[0]
        if (
            any(isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets)
            and isinstance(small.value, cst.Call)
            and view.callee(small.value).name in ALLOCATORS
        ):
            return stmt, small.value
    return None


def _free_extent(view: KernelView, call: cst.Call) -> cst.BaseExpression | None:
    """The last element of an allocation's shape (resolving a shape held in a name)."""
    shape = argument(call, 0, "shape")
    if isinstance(shape, cst.Name):
        name = shape.value
        for stmt in view.simple_statements():
            for small in stmt.body:
                if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
                ):
                    shape = small.value
    if isinstance(shape, (cst.Tuple, cst.List)) and shape.elements:
        return shape.elements[-1].value
    return None


def _subscripts(root: cst.CSTNode) -> list[cst.Subscript]:
    return [n for n in walk(root) if isinstance(n, cst.Subscript)]


def _arange_subscripts(view: KernelView, root: cst.CSTNode) -> list[cst.Subscript]:
    return [s for s in _subscripts(root) if view.is_call(s.value, "nl", "arange")]


def _factors(view: KernelView, loop: Loop, widening: _Widening) -> list[int]:
    trip = view.eval_int(loop.trip_expr) if loop.trip_expr is not None else None
    psum = False
    tiles = 0
    for stmt in view.simple_statements(loop.node):
        for call in view.calls_in(stmt):
            callee = view.callee(call)
            if callee.namespace in ("nl", "nisa") and callee.name in ALLOCATORS:
                psum |= memory_of_expr(view, call) == "psum"
        tiles += 1
    buffers = {base_name(s) for s in _subscripts(loop.node) if memory_of_expr(view, s) == "psum"}
    psum |= bool(buffers - {None})
    element_bytes = 4
    factors = []
    for factor in FACTORS:
        width = widening.chunk * factor * element_bytes
        if trip is not None and trip % factor:
            continue
        if psum and width > PSUM_PARTITION_BYTES:
            continue
        if width * max(1, min(tiles, 8)) > SBUF_PARTITION_BYTES:
            continue
        factors.append(factor)
    return factors
