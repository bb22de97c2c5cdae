"""A `return` that ends the body of an NKI device loop returns after the loop.

The NKI compiler does not run an ``nl.affine_range`` / ``nl.sequential_range`` body once per
iteration: it traces the body once, with the loop variable symbolic, and emits a hardware loop.
A ``return`` as the body's last statement therefore ends the kernel only after the whole loop
(the Neuron SDK's own ``layout-dynamic-loop`` example is written so, with its ``return`` indented
into the loop). The emulator runs iterations one by one, where the same ``return`` would stop
after the first; this rewrite moves such a ``return`` to just after its loop, which is what the
traced kernel does (inferred from the tracing model; the docs do not spell this case out).

Only the unconditional last statement of the loop body moves, and only when the body holds no
other ``return``: an early return under a condition has no single traced meaning, and plain
``range`` / ``nl.static_range`` loops are unrolled Python, where the return means what it says.
"""

from __future__ import annotations

import ast

_TRACED_LOOPS = frozenset({"affine_range", "sequential_range"})


def might_need_hoisting(text: str) -> bool:
    """A cheap test on the source text, so only kernels that could need the rewrite are parsed."""
    return "return" in text and any(name in text for name in _TRACED_LOOPS)


def hoist_loop_tail_returns(tree: ast.Module) -> bool:
    """Move each traced loop's trailing ``return`` to just after the loop, in place; whether any
    moved. Line numbers are kept, so errors still point at the kernel's own lines."""
    moved = False
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and _hoist_in(block):
                moved = True
    return moved


def _hoist_in(block: list[ast.stmt]) -> bool:
    moved = False
    index = 0
    while index < len(block):
        loop = block[index]
        index += 1
        if not (isinstance(loop, ast.For) and _is_traced_loop(loop.iter) and not loop.orelse):
            continue
        tail = loop.body[-1]
        if not isinstance(tail, ast.Return) or _returns_in(loop.body[:-1]):
            continue
        loop.body.pop()
        if not loop.body:
            loop.body.append(ast.copy_location(ast.Pass(), tail))
        block.insert(index, tail)
        index += 1
        moved = True
    return moved


def _is_traced_loop(iterator: ast.expr) -> bool:
    if not isinstance(iterator, ast.Call):
        return False
    func = iterator.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _TRACED_LOOPS


def _returns_in(nodes: list[ast.stmt]) -> bool:
    """Whether a ``return`` of the enclosing function is among `nodes` (a nested function's
    own returns do not count)."""
    pending: list[ast.AST] = list(nodes)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return False
