"""Block an output-tile loop: F output tiles per iteration, each with its own PSUM accumulator.

`for j in affine_range(T)` around a Tensor Engine accumulation becomes
`for j_blk in affine_range(T // F)`, and the statements that depend on `j` run in small
`for j_in in affine_range(F)` loops placed where they were (`j = F * j_blk + j_in` rebinds the old
name, so their text barely changes). Everything that does not depend on `j` now runs once per
block instead of once per tile: an operand tile loaded in the K loop feeds F accumulators (the
multi-accumulator blocking of the NKI matmul guides, NKI_NOTES §7). Two more gains come with it:

- a load of a `j`-dependent operand tile `C` columns wide (`x[..., C*j + arange(C)]`) becomes one
  DMA `F*C` wide that the F members slice, and a store of the F output tiles becomes one DMA from
  an SBUF tile gathering them: fewer, larger transfers (chunks of >= 4 KiB per partition stream
  at full rate, NKI_NOTES §4);
- a PSUM accumulator allocated in the loop gets a leading block dimension of F, one bank each.

Refused when the loop is not `affine_range` (its order may matter), when a value computed for
one `j` is used in another part of the loop and is neither an accumulator allocated in the loop
nor a buffer block-indexed by `j`, when an inner loop's range depends on `j`, when control flow
other than loops sits in the nest, or when the F accumulators would not fit the 8 PSUM banks.
A trip count not known from the source gets an assertion (F must divide it), and then only the
smallest block is offered: a larger one is a further guess about the input shapes.
"""

from __future__ import annotations

from accelopt.agents.offline.kernel_ir import (
    KernelView,
)
from accelopt.agents.offline.rewrites.base import Params, Refusal, Rewrite, Site, reason_or, site_id
from accelopt.agents.offline.rewrites.blocking.builder import Builder
from accelopt.agents.offline.rewrites.blocking.legality import analyse_loop, feeds_tensor_engine
from accelopt.agents.offline.rewrites.blocking.plan import BlockPlan
from accelopt.agents.offline.rewrites.errors import NotApplicable


class BlockAccumulators(Rewrite):
    name = "block_accumulators"
    prior = 1.0
    summary = "block an output-tile loop: several PSUM accumulators share each operand load"

    def analyse(self, view: KernelView) -> list[Site | Refusal]:
        found: list[Site | Refusal] = []
        for loop in view.loops:
            if not feeds_tensor_engine(view, loop):
                continue
            sid = site_id(self.name, loop.line)
            title = f"block the {loop.var} loop: several PSUM accumulators per operand load"
            place = self.place(sid, loop.line, title)
            plan = reason_or(analyse_loop, view, loop)
            if isinstance(plan, str):
                found.append(place.refused(plan))
                continue
            loads = sum(len(g.loads) + len(g.inline) for gs in plan.groups.values() for g in gs)
            stores = sum(len(g.stores) for gs in plan.groups.values() for g in gs)
            gains = []
            if plan.shared:
                gains.append(f"{', '.join(plan.shared[:3])} run once per block instead of once per tile")
            if loads or stores:
                gains.append(f"{loads} load(s) and {stores} store(s) become one wide DMA per block")
            found.append(
                place.site(
                    title=f"block the {loop.var} loop by {plan.factors[0]}: {plan.factors[0]} PSUM "
                    "accumulators per operand load",
                    line=_relieved_line(view, plan),
                    description=(
                        f"Each block of the {loop.var} loop (line {loop.line}) computes several output "
                        f"tiles, each in its own PSUM accumulator: {'; '.join(gains)}."
                    ),
                    variants=[{"factor": f} for f in plan.factors],
                    relieves=("hbm", "latency"),
                    payload=plan,
                )
            )
        return found

    def title_for(self, site: Site, params: Params) -> str:
        plan: BlockPlan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        return f"block the {plan.loop.var} loop by {factor}: {factor} PSUM accumulators per operand load"

    def transform(self, view: KernelView, site: Site, params: Params) -> str:
        plan: BlockPlan = site.payload
        factor = int(params.get("factor", plan.factors[0]))
        if factor not in plan.factors:
            raise NotApplicable(f"a block of {factor} does not fit this loop (possible: {plan.factors})")
        return Builder(view, plan, factor).render()


def _relieved_line(view: KernelView, plan: BlockPlan) -> int:
    """The line whose cost the blocking cuts most directly: the first load made wide, else the
    loop header."""
    loads = [
        load.stmt
        for groups in plan.groups.values()
        for g in groups
        for load in [*g.loads.values(), *g.inline]
    ]
    return min((view.line(stmt) for stmt in loads), default=plan.loop.line)
