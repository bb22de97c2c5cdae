"""Transpose on the Tensor Engine instead of in the DMA: the reverse of transpose_on_dma.

A transposing load (`nl.load_transpose2d(a[r, c])`, `nisa.dma_transpose(a[r, c])`) moves its
bytes in element-sized pieces (NKI_NOTES §4: "much slower than nl.load"; the fast hardware-DGE
transpose of Trainium2 takes only 2-byte dtypes, nki.isa.dma_transpose constraints). When DMA
bounds the kernel, a plain load of the rows followed by a Tensor Engine transpose (a matmul
against an identity, landed in SBUF by a PSUM copy) moves the same bytes at the streaming rate
and puts the transpose on an engine that has room; the planner reads which from the profile.

- `t = nl.load_transpose2d(src)` becomes `t = nl.copy(nisa.nc_transpose(nl.load(src)))`;
- `v[...] = nl.load_transpose2d(src)` into an SBUF tile becomes `v[...] = nisa.nc_transpose(nl.load(src))`
  (a Tensor Engine result assigned into SBUF lands there through a PSUM copy);
- `nisa.dma_transpose(dst=t, src=src)` (nki.*) becomes a `dma_copy` into a rows tile, an
  `nc_transpose` into PSUM and a `tensor_copy` into `t`.

Legal when the region is a 2-D HBM region of known extents that the Tensor Engine can
transpose in one instruction (at most 128 x 128, nki.isa.nc_transpose "Tile size").
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelopt.agents.offline.affine import linear_form
from accelopt.agents.offline.facts import memory_of, slice_extent
from accelopt.agents.offline.kernel_ir import KernelView, argument, base_name, keyword, walk
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id
from accelopt.agents.offline.rewrites.errors import NotApplicable

TENSOR_ENGINE_TRANSPOSE_MAX = 128  # nki.isa.nc_transpose: a Tensor Engine transpose is at most 128 x 128


@dataclass
class _Transpose:
    stmt: cst.SimpleStatementLine
    src: cst.Subscript
    extents: tuple[int, int]  # (rows, columns) of the HBM region
    form: str  # "name" | "tile" | "dst"


class TransposeOnTensorEngine(Rewrite):
    name = "transpose_on_tensor_engine"
    # On the kernels measured (benchmarks/families.py) this move was about even, 0.96-1.13x: try it
    # late. What it gains depends on the dtype: only a 2-byte DMA transpose runs near a copy's rate.
    prior = 0.3
    summary = "load rows and transpose them on the Tensor Engine instead of a slow transposing DMA"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            spotted = _transposing_load(view, stmt)
            if spotted is None:
                continue
            form, call = spotted
            line = view.line(stmt)
            sid = site_id(self.name, line)
            src = argument(call, 0, "src")
            title = f"load the rows of {base_name(src) or 'the region'} and transpose them on the Tensor Engine at line {line}"
            place = self.place(sid, line, title)
            outcome = _plan(view, stmt, form, src)
            if isinstance(outcome, str):
                found.append(place.refused(outcome))
                continue
            found.append(
                place.site(
                    description=(
                        f"The transposing DMA at line {line} moves its bytes element by element; a plain "
                        "load streams them, and the Tensor Engine transposes the tile."
                    ),
                    relieves=("hbm",),
                    payload=outcome,
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        move: _Transpose = site.payload
        nl, nisa = view.alias_for("nl"), view.alias_for("nisa")
        if nl is None or nisa is None:
            raise NotApplicable("the kernel does not import both the NKI language and isa modules")
        src = view.code(move.src)
        small = move.stmt.body[0]
        if move.form == "name":
            assert isinstance(small, cst.Assign)
            value = cst.parse_expression(f"{nl}.copy({nisa}.nc_transpose({nl}.load({src})))")
            return view.render({id(small.value): value})
        if move.form == "tile":
            assert isinstance(small, cst.Assign)
            return view.render({id(small.value): cst.parse_expression(f"{nisa}.nc_transpose({nl}.load({src}))")})
        assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
        dst = keyword(small.value, "dst")
        assert dst is not None
        target = view.code(dst.value)
        stem = base_name(dst.value) or "t"
        taken = {n.value for n in walk(view.module) if isinstance(n, cst.Name)}
        rows, staged = _fresh(f"{stem}_rows", taken), _fresh(f"{stem}_psum", taken)
        table = base_name(move.src)
        r, c = move.extents
        lines = [
            f"{rows} = {nl}.ndarray(({r}, {c}), dtype={table}.dtype, buffer={nl}.sbuf)\n",
            f"{nisa}.dma_copy(dst={rows}, src={src})\n",
            f"{staged} = {nl}.ndarray(({c}, {r}), dtype={table}.dtype, buffer={nl}.psum)\n",
            f"{nisa}.nc_transpose(dst={staged}, data={rows})\n",
            f"{nisa}.tensor_copy(dst={target}, src={staged})\n",
        ]
        new = [cst.parse_statement(text) for text in lines]
        new[0] = new[0].with_changes(leading_lines=move.stmt.leading_lines)
        return view.render({id(move.stmt): new})


def _extent(view: KernelView, element: cst.BaseSlice) -> int | None:
    """Elements an index selects: a slice's length, an `nl.arange(n)` grid's n, 1 for an integer."""
    if isinstance(element, cst.Index):
        form = linear_form(view, element.value)
        if form is not None and form.aranges:
            return form.aranges[0].size if len(form.aranges) == 1 and form.aranges[0].coefficient == 1 else None
    return slice_extent(view, element)


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _transposing_load(view: KernelView, stmt: cst.SimpleStatementLine) -> tuple[str, cst.Call] | None:
    if len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call):
        call = small.value
        legacy_form = view.is_call(call, "nl", "load_transpose2d") or (
            view.is_call(call, "nisa", "dma_transpose") and keyword(call, "dst") is None
        )
        if legacy_form:
            return ("name" if isinstance(small.targets[0].target, cst.Name) else "tile"), call
    if isinstance(small, cst.Expr) and view.is_call(small.value, "nisa", "dma_transpose"):
        assert isinstance(small.value, cst.Call)
        if keyword(small.value, "dst") is not None:
            return "dst", small.value
    return None


def _plan(
    view: KernelView, stmt: cst.SimpleStatementLine, form: str, src: cst.BaseExpression | None
) -> _Transpose | str:
    call = next(c for c in view.calls_in(stmt) if view.callee(c).name in ("load_transpose2d", "dma_transpose"))
    if keyword(call, "axes") is not None or keyword(call, "mask") is not None or keyword(call, "dtype") is not None:
        return "the transposing load has axes, a mask or a dtype cast"
    if not isinstance(src, cst.Subscript) or len(src.slice) != 2:
        return "the transposed region is not a two-dimensional subscript"
    table = base_name(src)
    if table is None or memory_of(view, table) != "hbm":
        return "the transposed region is not in HBM"
    extents = [_extent(view, element.slice) for element in src.slice]
    if any(e is None for e in extents):
        return "the region's extents are not known from the source"
    rows, cols = (int(e) for e in extents if e is not None)
    if max(rows, cols) > TENSOR_ENGINE_TRANSPOSE_MAX:
        return f"a {rows} x {cols} region is larger than one Tensor Engine transpose (128 x 128)"
    if form == "tile":
        small = stmt.body[0]
        assert isinstance(small, cst.Assign)
        target = base_name(small.targets[0].target)
        if target is None or memory_of(view, target) != "sbuf":
            return "the transposed tile is not in SBUF"
    return _Transpose(stmt, src, (rows, cols), form)
