"""The offline executor: applies a plan's rewrite at its site. K samples are K parameter variants
(the plan's own first, then the site's others); the fixer re-derives the candidate from the
original kernel with a variant that has not been tried. With experiences in the request (the
memory on), the variants are ordered by what they gave on similar kernels and the ones that
failed or gave nothing there are left out (variants.py); every kernel comes back with the plan
it realises, its variant included, so that the lesson learned from it names that variant."""

from __future__ import annotations

import asyncio

from accelopt.agents.offline.catalogue import get_rewrite, title_for
from accelopt.agents.offline.engine_choice import worthwhile_variants
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.site_pattern import patterns_of
from accelopt.agents.offline.variants import order_variants, variant_lessons
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience, Plan
from accelopt.search.roles import ExecuteRequest, ExecuteResult, FixRequest


def _site(plan: Plan, kernel: KernelSource) -> Site:
    rewrite = get_rewrite(plan.rewrite)
    site = rewrite.site_named(kernel.text, kernel.name, plan.site or "")
    if site is not None:
        return site
    reasons = [r.reason for r in rewrite.refusals(kernel.text, kernel.name) if r.id == plan.site]
    raise NotApplicable(
        reasons[0] if reasons else f"{rewrite.name} has no site {plan.site!r} in {kernel.name}"
    )


def _variants(
    plan: Plan,
    site: Site,
    kernel: KernelSource,
    experiences: list[Experience],
    profile: Profile | None = None,
) -> list[Params]:
    ordered: list[Params] = []
    # The plan's own parameters, then the site's other variants (engine moves only where the
    # timing model expects them to pay, engine_choice.py).
    for params in [dict(plan.params), *worthwhile_variants(site, profile)]:
        if params not in ordered:
            ordered.append(params)
    if not experiences or plan.rewrite is None:
        return ordered
    lessons = variant_lessons(
        experiences,
        rewrite=plan.rewrite,
        kernel_name=kernel.name,
        kernel_text=kernel.text,
        bound=profile.bound if profile is not None else None,
        pattern=patterns_of(kernel.text, kernel.name).get(site.id),
    )
    return order_variants(ordered, lessons)


def _realised(plan: Plan, site: Site, params: Params) -> Plan:
    """The plan as applied with `params` (its title names the variant)."""
    if params == plan.params:
        return plan
    return plan.model_copy(update={"params": dict(params), "title": title_for(site, params)})


class OfflineExecutor:
    """Source rewriting is CPU work: both calls run in a worker thread, off the event loop."""

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        return await asyncio.to_thread(self.execute_now, request)

    async def fix(self, request: FixRequest) -> ExecuteResult:
        return await asyncio.to_thread(self.fix_now, request)

    def execute_now(self, request: ExecuteRequest) -> ExecuteResult:
        try:
            site = _site(request.plan, request.kernel)
        except NotApplicable as exc:
            return ExecuteResult(error=exc.reason)
        rewrite = get_rewrite(request.plan.rewrite)
        kernels: list[KernelSource] = []
        plans: list[Plan] = []
        errors: list[str] = []
        variants = _variants(request.plan, site, request.kernel, request.experiences, request.profile)
        for params in variants:
            if len(kernels) >= request.samples:
                break
            try:
                text = rewrite.apply(request.kernel.text, request.kernel.name, site.id, params)
            except NotApplicable as exc:
                errors.append(exc.reason)
                continue
            if all(k.text != text for k in kernels):
                kernels.append(request.kernel.model_copy(update={"text": text}))
                plans.append(_realised(request.plan, site, params))
        return ExecuteResult(
            kernels=kernels,
            plans=plans,
            error=None if kernels else "; ".join(errors) or "no variant applied",
        )

    def fix_now(self, request: FixRequest) -> ExecuteResult:
        """Try the plan's other parameter variants on the original kernel; an offline rewrite
        cannot repair a kernel, only choose differently."""
        try:
            site = _site(request.plan, request.original)
        except NotApplicable as exc:
            return ExecuteResult(error=f"cannot fix: {exc.reason}")
        rewrite = get_rewrite(request.plan.rewrite)
        for params in _variants(request.plan, site, request.original, request.experiences):
            try:
                text = rewrite.apply(request.original.text, request.original.name, site.id, params)
            except NotApplicable:
                continue
            if text != request.kernel.text:
                return ExecuteResult(
                    kernels=[request.original.model_copy(update={"text": text})],
                    plans=[_realised(request.plan, site, params)],
                )
        where = f" at line {request.line}" if request.line else ""
        return ExecuteResult(
            error=(
                f"{rewrite.name} has no other variant to try at {site.id}; the candidate failed with "
                f"{request.status}{where}: {request.message}"
            )
        )
