"""Static facts about values in a kernel that rewrites need to stay legal: which memory a tile
lives in, whether an expression is a tile or a compile-time scalar, a tile's shape when the source
says it, and which single-use definition an operand comes from (so a chain split over several
statements can be fused like one written in a single expression)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.kernel_ir import (
    KernelView,
    argument,
    base_name,
    dotted,
    keyword,
    names_in,
)

# nl.* elementwise functions that the Scalar Engine's activation instruction implements.
ACTIVATION_FUNCTIONS = {
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "gelu_apprx_tanh",
    "relu",
    "square",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "erf",
    "softplus",
    "mish",
    "abs",
    "sign",
    "copy",
}
# Binary elementwise functions that exist as numpy ufuncs usable as tensor_scalar/tensor_tensor ops.
BINARY_FUNCTIONS = {"add", "subtract", "multiply", "divide", "maximum", "minimum"}
OPERATOR_FUNCTIONS: dict[type, str] = {
    cst.Add: "add",
    cst.Subtract: "subtract",
    cst.Multiply: "multiply",
    cst.Divide: "divide",
}
ALLOCATORS = {"ndarray", "zeros", "full", "ones", "empty_like", "zeros_like"}
TENSOR_ENGINE_RESULTS = {"nc_matmul", "matmul", "nc_transpose", "transpose"}


def memory_of_expr(view: KernelView, expr: cst.BaseExpression) -> str | None:
    """'psum' | 'sbuf' | 'hbm' for an expression naming a tensor or producing a tile."""
    if isinstance(expr, cst.Call):
        callee = view.callee(expr)
        if callee.namespace in ("nl", "nisa"):
            if callee.name in ALLOCATORS:
                buf = keyword(expr, "buffer")
                text = dotted(buf.value) if buf is not None else None
                if text is None:
                    return "sbuf"
                leaf = text.rsplit(".", 1)[-1]
                return "psum" if leaf == "psum" else "hbm" if "hbm" in leaf else "sbuf"
            if callee.name in TENSOR_ENGINE_RESULTS:
                return "psum"
            return "sbuf"
        return None
    name = base_name(expr)
    return memory_of(view, name) if name else None


def memory_of(view: KernelView, name: str) -> str | None:
    params = {p.name.value for p in view.func.params.params}
    if name in params:
        return "hbm"
    for stmt in view.simple_statements():
        for small in stmt.body:
            if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
            ):
                return memory_of_expr(view, small.value)
            if (
                isinstance(small, cst.AugAssign)
                and isinstance(small.target, cst.Name)
                and small.target.value == name
                and view.is_call(small.value, "nisa", "nc_matmul")
            ):
                return "psum"
    return None


def is_scalar(view: KernelView, expr: cst.BaseExpression) -> bool:
    """A compile-time number: literals, known constants, numpy scalar constructors."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return is_scalar(view, expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return is_scalar(view, expr.left) and is_scalar(view, expr.right)
    if isinstance(expr, cst.Name):
        if expr.value in view.constants or expr.value in shape_names(view):
            return True
        value = single_assignment(view, expr.value) or module_assignment(view, expr.value)
        return value is not None and is_scalar(view, value)
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute):
        return expr.value.attr.value == "shape"  # x.shape[1]
    if isinstance(expr, cst.Call):
        name = dotted(expr.func) or ""
        head = name.split(".")[0]
        if view.aliases.get(head) == "np" or name.endswith(".type") or name in ("float", "int"):
            return all(is_scalar(view, a.value) or _is_dtype(a.value) for a in expr.args)
        if isinstance(expr.func, cst.Attribute) and isinstance(expr.func.value, cst.Call):
            # np.dtype(np.float32).type(1)
            return all(is_scalar(view, a.value) for a in expr.args)
    return False


def shape_names(view: KernelView) -> set[str]:
    """Names unpacked from a tensor's `.shape` (compile-time integers in NKI)."""
    names: set[str] = set()
    for stmt in view.simple_statements():
        for small in stmt.body:
            if not isinstance(small, cst.Assign):
                continue
            value = small.value
            from_shape = (isinstance(value, cst.Attribute) and value.attr.value == "shape") or (
                isinstance(value, cst.Subscript)
                and isinstance(value.value, cst.Attribute)
                and value.value.attr.value == "shape"
            )
            if from_shape:
                for target in small.targets:
                    names |= names_in(target.target)
    return names


def module_assignment(view: KernelView, name: str) -> cst.BaseExpression | None:
    """The value of a module-level constant (`EPS = 1e-6`)."""
    found = None
    for stmt in view.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
                ):
                    if found is not None:
                        return None
                    found = small.value
    return found


def _is_dtype(expr: cst.BaseExpression) -> bool:
    text = dotted(expr) or ""
    return text.rsplit(".", 1)[-1] in {"float32", "float16", "bfloat16", "int32", "float64"}


def single_assignment(view: KernelView, name: str) -> cst.BaseExpression | None:
    """The value of a name bound exactly once in the kernel by a plain assignment."""
    found: list[cst.BaseExpression] = []
    for stmt in view.statements():
        acc = view.access(stmt) if isinstance(stmt, cst.SimpleStatementLine) else None
        if acc is None:
            if isinstance(stmt, cst.For) and name in names_in(stmt.target):
                return None
            continue
        if name in acc.mutates:
            return None
        if name in acc.rebinds:
            assert isinstance(stmt, cst.SimpleStatementLine)  # the only statements with an access
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if isinstance(target, cst.Name) and target.value == name:
                        found.append(small.value)
                        continue
                if name in view.access(small).rebinds:
                    return None
    return found[0] if len(found) == 1 else None


def is_tile(view: KernelView, expr: cst.BaseExpression) -> bool:
    """An on-chip tile: an NKI call's result, a name bound to one, or an index into an on-chip buffer."""
    if isinstance(expr, cst.Call):
        callee = view.callee(expr)
        return callee.namespace in ("nl", "nisa") and callee.name not in ALLOCATORS
    if isinstance(expr, cst.BinaryOperation):
        return is_tile(view, expr.left) or is_tile(view, expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return is_tile(view, expr.expression)
    name = base_name(expr)
    if name is None:
        return False
    memory = memory_of(view, name)
    return memory in ("sbuf", "psum")


ELEMENTWISE_KEEPING_SHAPE = {
    *ACTIVATION_FUNCTIONS,
    *BINARY_FUNCTIONS,
    "reciprocal",
    "activation",
    "tensor_scalar",
}


def column_shape(
    view: KernelView, expr: cst.BaseExpression, depth: int = 0
) -> tuple[int | None, int | None] | None:
    """(partitions, free) for a 2-D tile when the source states it; None when it does not.
    Elementwise results keep the shape of their first tile operand."""
    if depth > 6:
        return None
    name = base_name(expr)
    if isinstance(expr, cst.Name) and name is not None:
        value = single_assignment(view, name)
        if value is None or not isinstance(value, cst.Call):
            return None
        callee = view.callee(value)
        if callee.namespace == "nl" and callee.name == "load":
            src = argument(value, 0, "src")
            if isinstance(src, cst.Subscript):
                extents = [slice_extent(view, el.slice) for el in src.slice]
                if len(extents) == 2:
                    return (extents[0], extents[1])
        if callee.namespace in ("nl", "nisa") and callee.name in ALLOCATORS:
            shape = argument(value, 0, "shape")
            if isinstance(shape, cst.Tuple) and len(shape.elements) == 2:
                first, second = shape.elements
                return (_dim(view, first.value), _dim(view, second.value))
        if callee.name in ("sum", "max", "min", "mean", "tensor_reduce", "prod"):
            keep = keyword(value, "keepdims")
            if keep is not None and dotted(keep.value) == "True":
                return (None, 1)
        if callee.namespace in ("nl", "nisa") and callee.name in ELEMENTWISE_KEEPING_SHAPE:
            operands = [a.value for a in value.args if a.keyword is None or a.keyword.value == "data"]
            if callee.name == "activation":
                operands = [v for v in [argument(value, 1, "data")] if v is not None]
            for operand in operands:
                if isinstance(operand, (cst.Name, cst.Call)) and not is_scalar(view, operand):
                    inner = column_shape(view, operand, depth + 1) if isinstance(operand, cst.Name) else None
                    if inner is None and isinstance(operand, cst.Call):
                        inner = _call_shape(view, operand, depth + 1)
                    return inner
    return None


def _call_shape(view: KernelView, call: cst.Call, depth: int) -> tuple[int | None, int | None] | None:
    """The shape of an elementwise call's result, from its first tile operand."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value not in ("data", "data1"):
            continue
        value = arg.value
        if is_scalar(view, value):
            continue
        if isinstance(value, cst.Name):
            return column_shape(view, value, depth + 1)
        if isinstance(value, cst.Call):
            callee = view.callee(value)
            if callee.name in ("sum", "max", "min", "mean", "tensor_reduce", "prod"):
                keep = keyword(value, "keepdims")
                return (None, 1) if keep is not None and dotted(keep.value) == "True" else None
            if callee.name in ELEMENTWISE_KEEPING_SHAPE:
                return _call_shape(view, value, depth + 1)
        return None
    return None


def _dim(view: KernelView, expr: cst.BaseExpression) -> int | None:
    if isinstance(expr, cst.Call) and (dotted(expr.func) or "").endswith("par_dim") and expr.args:
        return view.eval_int(expr.args[0].value)
    return view.eval_int(expr)


def slice_extent(view: KernelView, element: cst.BaseSlice) -> int | None:
    """The number of elements a basic index element selects (1 for an integer index)."""
    from accelopt.agents.offline.affine import linear_form

    if isinstance(element, cst.Slice):
        if element.lower is None or element.upper is None or element.step is not None:
            return None
        lo = linear_form(view, element.lower)
        hi = linear_form(view, element.upper)
        if lo is None or hi is None:
            return None
        diff = hi.minus(lo)
        return diff.const if not diff.terms and not diff.aranges else None
    if isinstance(element, cst.Index) and isinstance(element.value, cst.Name):
        # `rows = slice(a, b)` then `x[rows, cols]`: the name stands for a slice, not an integer.
        bound = single_assignment(view, element.value.value)
        if isinstance(bound, cst.Call) and dotted(bound.func) == "slice" and len(bound.args) == 2:
            lower, upper = (a.value for a in bound.args)
            return slice_extent(view, cst.Slice(lower=lower, upper=upper))
    return 1


@dataclass
class Definition:
    """A value computed by an earlier statement and used exactly once, by `use`."""

    stmt: cst.SimpleStatementLine  # the defining statement (removed when inlined)
    value: cst.BaseExpression
    alloc: cst.SimpleStatementLine | None = None  # a buffer allocation only the definition used


def single_use_definition(view: KernelView, use: cst.BaseExpression) -> Definition | None:
    """If `use` (a Name, or a buffer indexed exactly as it was written) is the only reader of a
    value defined by an earlier statement of the same block, and nothing the value depends on
    changes in between, return that definition. Only the same block: inlining a value into a
    nested loop would recompute it every iteration."""
    use_stmt = view.statement_of(use)
    name = base_name(use)
    if use_stmt is None or name is None or not isinstance(use, (cst.Name, cst.Subscript)):
        return None
    if isinstance(use, cst.Subscript) and not isinstance(use.value, cst.Name):
        return None
    siblings = view.siblings(use_stmt)
    if not siblings:
        return None
    position = next(i for i, s in enumerate(siblings) if s is use_stmt)
    for index in range(position - 1, -1, -1):
        candidate = siblings[index]
        small = (
            candidate.body[0]
            if isinstance(candidate, cst.SimpleStatementLine) and len(candidate.body) == 1
            else None
        )
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            if name in view.access(candidate).writes:
                return None
            continue
        target = small.targets[0].target
        if base_name(target) != name:
            continue
        if isinstance(use, cst.Name) != isinstance(target, cst.Name):
            return None
        if isinstance(use, cst.Subscript) and view.code(target) != view.code(use):
            return None
        deps = names_in(small.value) | (names_in(target) - {name})
        for stmt in siblings[index + 1 : position]:
            acc = view.access(stmt)
            if acc.writes & deps or name in acc.writes or name in acc.reads:
                return None
        alloc = None
        expected = 2  # the definition's target and the use
        if isinstance(use, cst.Subscript):
            alloc = allocation_of(view, name)
            if alloc is None:
                return None
            expected = 3
        if len(view.name_uses(name)) != expected or view.destination_of_calls(small.value):
            return None
        return Definition(candidate, small.value, alloc)  # type: ignore[arg-type]
    return None


def allocation_of(view: KernelView, name: str) -> cst.SimpleStatementLine | None:
    """The statement `name = <allocator>(...)` that declares the tile `name`, if there is one."""
    for stmt in view.simple_statements():
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            continue
        small = stmt.body[0]
        if (
            len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and small.targets[0].target.value == name
            and isinstance(small.value, cst.Call)
            and view.callee(small.value).name in ALLOCATORS
        ):
            return stmt
    return None
