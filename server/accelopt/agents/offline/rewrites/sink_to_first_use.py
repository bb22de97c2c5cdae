"""Move a tile's producer down to just before the tile's first use, so that its live range no
longer spans the tiles made in between: the way to remove spills by reordering.

`a = load(x); b = load(y); ea = exp(a); store(p, ea); eb = exp(b)` holds a, b and ea at once;
with `b = load(y)` moved below the store it holds a and ea, then b and eb. When those tiles
exceed SBUF the compiler spills one to HBM and reloads it (the timing model: Belady spilling over
logical buffers that live from their first access to their last, profiling/compiler_model.py), so
the reordered kernel does without the spill traffic. Without spills, producing a tile early is
prefetching, and moving it later only delays it: the site says it relieves spills, and the
planner proposes it only when the profile reports them (planner.py).

Legal when the producer is one statement that writes only its tile (a name, or a declared
buffer through one subscript), and the statements it moves past neither mention the tile nor
write anything the producer reads (an HBM tensor it loads from included).
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.facts import ALLOCATORS
from accelopt.agents.offline.kernel_ir import KernelView, base_name, is_filler, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


class SinkToFirstUse(Rewrite):
    name = "sink_to_first_use"
    prior = 0.4
    summary = "move a tile's producer down to its first use (shorter live range, no spill)"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for stmt in view.simple_statements():
            tile = self._produced_tile(view, stmt)
            if tile is None:
                continue
            siblings = view.siblings(stmt)
            at = next(i for i, s in enumerate(siblings) if s is stmt)
            first_use = next(
                (i for i in range(at + 1, len(siblings)) if tile in names_in(siblings[i])), None
            )
            if first_use is None:
                continue
            passed = [s for s in siblings[at + 1 : first_use] if not is_filler(s)]
            if not any(self._makes_a_tile(view, s) for s in passed):
                continue  # nothing made in between: moving it shortens no overlap
            sid = site_id(self.name, view.where(stmt))
            title = f"move the producer of {tile} (line {view.line(stmt)}) down to its first use (line {view.line(siblings[first_use])})"
            reads = view.access(stmt).reads - {tile}
            clash = next((s for s in passed if view.access(s).writes & reads), None)
            if clash is not None:
                found.append(
                    Refusal(self.name, sid, view.line(stmt), f"cannot {title}: line {view.line(clash)} "
                            f"writes {', '.join(sorted(view.access(clash).writes & reads))}, which it reads")
                )
                continue
            found.append(
                Site(
                    self.name,
                    sid,
                    view.line(stmt),
                    title,
                    description=(
                        f"{tile} is made {len(passed)} statement(s) before it is needed; made where it "
                        "is first used, it is not live while the tiles in between are, which removes "
                        "a spill when they do not all fit SBUF."
                    ),
                    relieves=("spill", "hbm"),
                    payload=(stmt, siblings[first_use]),
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        stmt, before = site.payload

        def insert(updated: cst.CSTNode) -> object:
            assert isinstance(updated, cst.BaseStatement)
            return [stmt.with_changes(leading_lines=[]), updated]

        return view.render({id(stmt): None, id(before): insert})

    def _produced_tile(self, view: KernelView, stmt: cst.SimpleStatementLine) -> str | None:
        """The tile a statement makes, if making it is all the statement does."""
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            return None
        small = stmt.body[0]
        if len(small.targets) != 1 or not isinstance(small.value, cst.Call):
            return None
        callee = view.callee(small.value)
        if callee.namespace not in ("nl", "nisa") or callee.name in ALLOCATORS:
            return None
        target = small.targets[0].target
        tile = base_name(target)
        if tile is None or not isinstance(target, (cst.Name, cst.Subscript)):
            return None
        if isinstance(target, cst.Subscript) and not isinstance(target.value, cst.Name):
            return None
        if view.access(stmt).writes != {tile} or view.destination_of_calls(small.value):
            return None
        # A loop variable or a name bound by an enclosing statement is not a tile.
        if view.loop_of_node(stmt) is not None and tile == view.loop_of_node(stmt).var:  # type: ignore[union-attr]
            return None
        return tile

    def _makes_a_tile(self, view: KernelView, stmt: cst.BaseStatement) -> bool:
        return isinstance(stmt, cst.SimpleStatementLine) and self._produced_tile(view, stmt) is not None
