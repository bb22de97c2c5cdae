"""Remove a copy whose only reader could read the original: `s = nl.copy(acc)` followed by
`nl.exp(s)` becomes `nl.exp(acc)`.

A PSUM -> SBUF copy is needed before a Tensor Engine operand, a DMA or a GpSimd instruction (none
of them can read PSUM), but the Vector and Scalar engines read PSUM directly, and an SBUF -> SBUF
copy is never needed by a reader. Dropping the copy saves an instruction and a tile. A copy that
changes the element type is kept (it rounds).
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import memory_of_expr, single_use_definition
from accelopt.agents.offline.kernel_ir import KernelView, argument, dotted, keyword
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id

# Readers that may take a PSUM operand (Vector/Scalar engine instructions).
PSUM_READERS_NISA = {
    "activation",
    "tensor_scalar",
    "tensor_tensor",
    "tensor_reduce",
    "tensor_copy",
    "reciprocal",
    "activation_reduce",
}
NOT_PSUM_READERS_NL = {"store", "matmul", "transpose", "load", "copy"}


class RemoveCopy(Rewrite):
    name = "remove_copy"
    prior = 0.5
    summary = "remove a PSUM->SBUF or SBUF->SBUF copy whose reader can read the original"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            for use in _reads(view, stmt):
                definition = single_use_definition(view, use)
                if definition is None or not _is_copy(view, definition.value):
                    continue
                copy = definition.value
                assert isinstance(copy, cst.Call)
                source = argument(copy, 0, "data") or argument(copy, 0, "src")
                if source is None:
                    continue
                line = view.line(definition.stmt)
                sid = site_id(self.name, view.where(definition.stmt))
                memory = memory_of_expr(view, source)
                kind = "PSUM→SBUF copy" if memory == "psum" else "copy"
                title = f"remove the {kind} of {view.snippet(source, 30)} at line {line}"
                reason = _refusal(view, copy, source, memory, use)
                if reason is not None:
                    found.append(Refusal(self.name, sid, line, f"cannot {title}: {reason}"))
                    continue
                found.append(
                    Site(
                        self.name,
                        sid,
                        line,
                        title,
                        description=(
                            f"The only reader of the copy (line {view.line(use)}) can read "
                            f"{view.snippet(source, 30)} directly; the copy instruction and its tile go away."
                        ),
                        relieves=("vector", "scalar"),
                        payload=(definition, source, use),
                    )
                )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        definition, source, use = site.payload
        edits: dict[int, object] = {id(definition.stmt): None, id(use): source}
        if definition.alloc is not None:
            edits[id(definition.alloc)] = None
        return view.render(edits)


def _is_copy(view: KernelView, expr: cst.BaseExpression) -> bool:
    return view.is_call(expr, "nl", "copy") or view.is_call(expr, "nisa", "tensor_copy")


def _reads(view: KernelView, stmt: cst.SimpleStatementLine) -> list[cst.BaseExpression]:
    """Names and subscripts read as call arguments in a statement."""
    found: list[cst.BaseExpression] = []
    for call in view.calls_in(stmt):
        for arg in call.args:
            if isinstance(arg.value, (cst.Name, cst.Subscript)):
                found.append(arg.value)
    return found


def _refusal(
    view: KernelView, copy: cst.Call, source: cst.BaseExpression, memory: str | None, use: cst.BaseExpression
) -> str | None:
    dtype = keyword(copy, "dtype")
    if dtype is not None and (dotted(dtype.value) or "").rsplit(".", 1)[-1] != "float32":
        return "the copy converts the element type"
    if keyword(copy, "mask") is not None:
        return "the copy is masked"
    if memory == "hbm":
        return "the source is in HBM"
    arg = view.parent(use)
    reader = view.parent(arg) if arg is not None else None  # Name -> Arg -> Call
    if not isinstance(reader, cst.Call):
        return "its reader is not an instruction"
    callee = view.callee(reader)
    if memory == "psum":
        engine = keyword(reader, "engine")
        if engine is not None and (dotted(engine.value) or "").endswith("gpsimd_engine"):
            return "its reader runs on GpSimd, which cannot read PSUM"
        if callee.namespace == "nisa" and callee.name not in PSUM_READERS_NISA:
            return f"nisa.{callee.name} cannot read PSUM"
        if callee.namespace == "nl" and callee.name in NOT_PSUM_READERS_NL:
            return f"nl.{callee.name} cannot read PSUM"
        if callee.namespace not in ("nl", "nisa"):
            return "its reader is not an NKI instruction"
        others = [
            a.value
            for a in reader.args
            if a.value is not use and isinstance(a.value, (cst.Name, cst.Subscript))
        ]
        if any(memory_of_expr(view, o) == "psum" for o in others):
            return "the reader already takes another PSUM operand"
    return None
