"""The offline executor: applies a plan's rewrite at its site. K samples are K parameter variants
(the plan's own first, then the site's others); the fixer re-derives the candidate from the
original kernel with a variant that has not been tried."""

from __future__ import annotations

import asyncio

from accelopt.agents.base import ExecuteRequest, ExecuteResult, FixRequest
from accelopt.agents.offline.catalogue import get_rewrite
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Plan


def _site(plan: Plan, kernel: KernelSource) -> Site:
    rewrite = get_rewrite(plan.rewrite)
    for site in rewrite.sites(kernel.text, kernel.name):
        if site.id == plan.site:
            return site
    reasons = [r.reason for r in rewrite.refusals(kernel.text, kernel.name) if r.id == plan.site]
    raise NotApplicable(
        reasons[0] if reasons else f"{rewrite.name} has no site {plan.site!r} in {kernel.name}"
    )


def _variants(plan: Plan, site: Site) -> list[Params]:
    ordered: list[Params] = []
    for params in [dict(plan.params), *site.variants]:
        if params not in ordered:
            ordered.append(params)
    return ordered


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
        errors: list[str] = []
        for params in _variants(request.plan, site):
            if len(kernels) >= request.samples:
                break
            try:
                text = rewrite.apply(request.kernel.text, request.kernel.name, site.id, params)
            except NotApplicable as exc:
                errors.append(exc.reason)
                continue
            if all(k.text != text for k in kernels):
                kernels.append(request.kernel.model_copy(update={"text": text}))
        return ExecuteResult(
            kernels=kernels, error=None if kernels else "; ".join(errors) or "no variant applied"
        )

    def fix_now(self, request: FixRequest) -> ExecuteResult:
        """Try the plan's other parameter variants on the original kernel; an offline rewrite
        cannot repair a kernel, only choose differently."""
        try:
            site = _site(request.plan, request.original)
        except NotApplicable as exc:
            return ExecuteResult(error=f"cannot fix: {exc.reason}")
        rewrite = get_rewrite(request.plan.rewrite)
        for params in _variants(request.plan, site):
            try:
                text = rewrite.apply(request.original.text, request.original.name, site.id, params)
            except NotApplicable:
                continue
            if text != request.kernel.text:
                return ExecuteResult(kernels=[request.original.model_copy(update={"text": text})])
        where = f" at line {request.line}" if request.line else ""
        return ExecuteResult(
            error=(
                f"{rewrite.name} has no other variant to try at {site.id}; the candidate failed with "
                f"{request.status}{where}: {request.message}"
            )
        )
