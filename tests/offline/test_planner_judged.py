"""The offline planner told which kernels the search has judged: it proposes only plans that
write a new kernel, and once the catalogue has none it says so and proposes tuner settings."""

from __future__ import annotations

from functools import cache

from accelopt.agents.offline.catalogue import all_sites, get_rewrite
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.tuner import realise
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.roles import ExecuteRequest, PlanRequest

from .helpers import CASES, assert_matches_reference

CASE = CASES["cg_matmul"]
KERNEL = KernelSource(text=CASE.text, name=CASE.name, path=CASE.file)


def written(rewrite: str, site: str, params: dict) -> str:
    text = get_rewrite(rewrite).apply(KERNEL.text, KERNEL.name, site, params)
    return KERNEL.model_copy(update={"text": text}).normalized_hash()


# One planner for the module: what each plan writes is computed once and shared, as in a search.
PLANNER = OfflinePlanner()


@cache
def catalogue_kernels() -> frozenset[str]:
    return frozenset(
        written(site.rewrite, site.id, dict(variant))
        for site in all_sites(KERNEL.text, KERNEL.name)
        if "spill" not in site.relieves  # proposed only on a profile that reports spills
        for variant in site.variants
    )


async def test_plans_write_only_kernels_not_yet_judged():
    everything = sorted(catalogue_kernels())
    judged = [KERNEL.normalized_hash(), *everything[:-1]]
    result = await PLANNER.plan(PlanRequest(kernel=KERNEL, profile=None, count=1, judged=judged))
    assert result.notice is None and len(result.plans) == 1
    plan = result.plans[0]
    assert plan.rewrite != "tune"
    assert written(plan.rewrite, plan.site, plan.params) == everything[-1]


async def test_when_the_catalogue_has_nothing_new_the_tuner_takes_over_and_says_so():
    judged = [KERNEL.normalized_hash(), *catalogue_kernels()]
    results = [
        await PLANNER.plan(PlanRequest(kernel=KERNEL, profile=None, count=1, proposal=n, judged=judged))
        for n in range(3)
    ]
    assert all(r.notice and "the tuner takes over" in r.notice for r in results)
    assert len({r.notice for r in results}) == 1  # one message per kernel: the event says it once
    tuned = [r.plans[0] for r in results]
    assert all(p.rewrite == "tune" for p in tuned)
    assert len({p.site for p in tuned}) == 3
    executor_text = []
    for plan in tuned:
        setting = realise(KERNEL.text, KERNEL.name, plan.site or "")
        assert len(setting.steps) >= 2  # a single knob is a catalogue plan, judged already
        assert KERNEL.model_copy(update={"text": setting.text}).normalized_hash() not in judged
        executor_text.append(setting.text)
    assert_matches_reference(CASE, executor_text[0])


async def test_the_executor_applies_a_tuner_plan():
    from accelopt.agents.offline.executor import OfflineExecutor

    judged = [KERNEL.normalized_hash(), *catalogue_kernels()]
    plan = (await PLANNER.plan(PlanRequest(kernel=KERNEL, profile=None, count=1, judged=judged))).plans[0]
    result = await OfflineExecutor().execute(ExecuteRequest(kernel=KERNEL, plan=plan, samples=2))
    assert result.error is None and len(result.kernels) == 1
    assert result.kernels[0].text == realise(KERNEL.text, KERNEL.name, plan.site or "").text
