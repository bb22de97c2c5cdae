"""Swap two perfectly nested independent loops.

Which loop is outer decides which operand stays put while the other streams: after the swap, a
load that depended only on the old outer variable becomes invariant in the new inner loop (and
can then be hoisted). Legal for a perfect nest (the outer body is just the inner loop) of
`nl.affine_range` loops, whose iterations NKI already promises are independent, when the inner
range does not depend on the outer variable.
"""

from __future__ import annotations

import libcst as cst

from accelopt.agents.offline.kernel_ir import KernelView, Loop, is_filler, names_in
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, site_id


class LoopInterchange(Rewrite):
    name = "loop_interchange"
    prior = 0.0
    summary = "swap a perfect nest of two independent loops"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for outer in view.loops:
            work = [s for s in outer.body if not is_filler(s)]
            if len(work) != 1 or not isinstance(work[0], cst.For):
                continue
            inner = view.loop_for(work[0])
            if inner is None:
                continue
            sid = site_id(self.name, outer.line, inner.line)
            title = f"interchange the {outer.var} and {inner.var} loops"
            place = self.place(sid, outer.line, title)
            reason = None
            if outer.kind != "affine" or inner.kind != "affine":
                seq = outer if outer.kind != "affine" else inner
                reason = f"the {seq.var} loop is {seq.kind}: its iteration order may matter"
            elif outer.var in names_in(inner.node.iter):
                reason = f"the range of {inner.var} depends on {outer.var}"
            if reason is not None:
                found.append(place.refused(reason))
                continue
            found.append(
                place.site(
                    description=(
                        f"Make {inner.var} the outer loop so that what depends only on {outer.var} "
                        f"changes in the inner loop and what depends only on {inner.var} stays put."
                    ),
                    relieves=("hbm",),
                    payload=(outer, inner),
                )
            )
        return found

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        outer: Loop
        inner: Loop
        outer, inner = site.payload

        def swap_outer(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.For)
            return updated.with_changes(target=inner.node.target, iter=inner.node.iter)

        def swap_inner(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.For)
            return updated.with_changes(target=outer.node.target, iter=outer.node.iter)

        return view.render({id(outer.node): swap_outer, id(inner.node): swap_inner})
