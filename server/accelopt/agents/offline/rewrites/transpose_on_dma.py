"""Transpose on the way in: load a tile already transposed instead of transposing it on the
Tensor Engine.

A tile loaded from HBM only to be transposed (`t = nl.load(a[r, c])`, then
`nisa.nc_transpose(t)`, or `nl.transpose`) costs a load, a Tensor Engine pass (a matmul against
an identity) and a PSUM result. The DMA engines can transpose while they copy:
`nl.load_transpose2d(a[r, c])` in `neuronxcc.nki`, `nisa.dma_transpose(dst=..., src=a[r, c])` in
`nki.*` (both: an HBM [F, P] region into an SBUF [P, F] tile). The Tensor Engine is freed; the
DMA moves the same bytes in element-sized pieces, so this pays only while the Tensor Engine is
the busier of the two, which the planner reads from the profile (`relieves`). The hardware DGE
transpose of Trainium2 is fast only for 2-byte dtypes (nki.isa.dma_transpose constraints).

Legal when the loaded tile is read only by the transpose, the transpose is in the same block as
the load with nothing in between writing what the load reads, and the transpose's destination
(when it is a declared tile) is written by nothing else, so it can live in SBUF instead of PSUM.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.facts import allocation_of, memory_of
from accelopt.agents.offline.kernel_ir import KernelView, argument, base_name, keyword, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.nki.apiversion import detect


@dataclass
class _Move:
    load: cst.SimpleStatementLine
    load_alloc: cst.SimpleStatementLine | None  # the loaded tile's declaration, removed with it
    transpose: cst.SimpleStatementLine
    src: cst.BaseExpression  # the HBM region the load reads
    result_alloc: cst.SimpleStatementLine | None  # the transpose's declared destination (PSUM)


class TransposeOnDma(Rewrite):
    name = "transpose_on_dma"
    prior = 0.4
    summary = "load a tile already transposed (DMA transpose) instead of transposing it on the Tensor Engine"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            operand = _transposed_operand(view, stmt)
            if operand is None:
                continue
            tile = base_name(operand)
            if tile is None:
                continue
            line = view.line(stmt)
            sid = site_id(self.name, line)
            title = f"load {tile} transposed by DMA instead of transposing it on the Tensor Engine at line {line}"
            place = self.place(sid, line, title)
            outcome = _plan(view, stmt, tile)
            if outcome is None:
                continue
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            found.append(
                place.site(
                    description=(
                        f"{tile} is loaded at line {view.line(outcome.load)} only to be transposed on the "
                        f"Tensor Engine at line {line}; a transposing DMA loads it in the transposed layout."
                    ),
                    relieves=("tensor",),
                    payload=outcome,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        move: _Move = site.payload
        nl, nisa = view.alias_for("nl"), view.alias_for("nisa")
        src = view.code(move.src)
        small = move.transpose.body[0]
        if isinstance(small, cst.Assign):
            if detect(view.source).legacy:
                if nl is None:
                    raise NotApplicable("the kernel does not import the NKI language module")
                value = cst.parse_expression(f"{nl}.load_transpose2d({src})")
            else:
                if nisa is None:
                    raise NotApplicable("the kernel does not import the NKI isa module")
                value = cst.parse_expression(f"{nisa}.dma_transpose({src})")
            new = move.transpose.with_changes(body=[small.with_changes(value=value)])
        else:
            assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
            if nisa is None:
                raise NotApplicable("the kernel does not import the NKI isa module")
            dst = keyword(small.value, "dst")
            assert dst is not None
            call = cst.parse_expression(f"{nisa}.dma_transpose(dst={view.code(dst.value)}, src={src})")
            new = move.transpose.with_changes(body=[small.with_changes(value=call)])
        edits: dict[int, object] = {id(move.load): None, id(move.transpose): new}
        if move.load_alloc is not None:
            edits[id(move.load_alloc)] = None
        if move.result_alloc is not None:
            edits[id(move.result_alloc)] = _in_sbuf(move.result_alloc, nl or "nl")
        return view.render(edits)


def _transposed_operand(view: KernelView, stmt: cst.SimpleStatementLine) -> cst.BaseExpression | None:
    """The operand of a Tensor Engine transpose statement (`x = transpose(t)`, `x[...] = ...`,
    or `nisa.nc_transpose(dst=x, data=t)`)."""
    if len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    call = small.value if isinstance(small, (cst.Assign, cst.Expr)) else None
    if isinstance(small, cst.Assign) and len(small.targets) != 1:
        return None
    if not isinstance(call, cst.Call):
        return None
    if view.is_call(call, "nisa", "nc_transpose"):
        engine = keyword(call, "engine")
        if engine is not None and "vector" in view.code(engine.value):
            return None
        if isinstance(small, cst.Expr) and keyword(call, "dst") is None:
            return None
        return argument(call, 0, "data")
    if isinstance(small, cst.Assign) and view.is_call(call, "nl", "transpose"):
        return argument(call, 0, "x")
    return None


def _load_into(view: KernelView, stmt: cst.BaseStatement, tile: str) -> cst.BaseExpression | None:
    """The HBM region a DMA load into `tile` reads, if `stmt` is one."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and view.is_call(small.value, "nl", "load"):
        assert isinstance(small.value, cst.Call)
        if base_name(small.targets[0].target) == tile:
            return argument(small.value, 0, "src")
    if isinstance(small, cst.Expr) and view.is_call(small.value, "nisa", "dma_copy"):
        assert isinstance(small.value, cst.Call)
        dst = argument(small.value, 0, "dst")
        if dst is not None and base_name(dst) == tile:
            return argument(small.value, 1, "src")
    return None


def _plan(view: KernelView, transpose: cst.SimpleStatementLine, tile: str) -> _Move | str | None:
    siblings = view.siblings(transpose)
    position = next(i for i, s in enumerate(siblings) if s is transpose)
    load_at = next(
        (i for i in range(position - 1, -1, -1) if _load_into(view, siblings[i], tile) is not None), None
    )
    if load_at is None:
        return None  # not loaded in this block: the operand was computed, or loaded elsewhere
    load = siblings[load_at]
    src = _load_into(view, load, tile)
    assert isinstance(load, cst.SimpleStatementLine) and src is not None
    table = base_name(src)
    if table is None or memory_of(view, table) != "hbm":
        return "the load does not read an HBM tensor"
    if not isinstance(src, cst.Subscript) or len(src.slice) != 2:
        return "the loaded region is not two-dimensional"
    for between in siblings[load_at + 1 : position]:
        written = view.access(between).writes & (names_in(src) | {tile})
        if written:
            return f"{sorted(written)[0]} changes between the load and the transpose"
    load_alloc = allocation_of(view, tile)
    users = {id(view.statement_of(u)) for u in view.name_uses(tile)}
    if users - {id(load), id(transpose), id(load_alloc)}:
        return f"{tile} is also used elsewhere, so its load must stay"
    if load_alloc is not None and not any(s is load_alloc for s in siblings[:load_at]):
        return f"{tile} is declared outside the block of the load"
    result_alloc = None
    small = transpose.body[0]
    target: cst.BaseExpression | None = small.targets[0].target if isinstance(small, cst.Assign) else None
    if target is None:
        assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
        dst = keyword(small.value, "dst")
        target = dst.value if dst is not None else None
    result = base_name(target) if target is not None else None
    if result is None:
        return "the transpose's result has no name"
    if not isinstance(target, cst.Name) or allocation_of(view, result) is not None:
        result_alloc = allocation_of(view, result)
        if result_alloc is None:
            return f"the declaration of {result} is not found"
        writers = [
            s for s in view.simple_statements() if result in view.access(s).writes and s is not result_alloc
        ]
        if len(writers) != 1:
            return f"{result} is written by more than the transpose"
        if memory_of(view, result) != "psum":
            result_alloc = None
    return _Move(load, load_alloc, transpose, src, result_alloc)


def _in_sbuf(alloc: cst.SimpleStatementLine, nl: str) -> cst.SimpleStatementLine:
    small = alloc.body[0]
    assert isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
    args = [
        a.with_changes(value=cst.parse_expression(f"{nl}.sbuf"))
        if a.keyword is not None and a.keyword.value == "buffer"
        else a
        for a in small.value.args
    ]
    return alloc.with_changes(body=[small.with_changes(value=small.value.with_changes(args=args))])
