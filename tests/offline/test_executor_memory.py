"""The offline executor's use of the optimization memory: lessons name the parameter variant they
measured, and on a similar site the executor leaves out a variant that failed there (and the
larger factors with it), writes a variant that paid first, and without lessons writes the
variants in the site's own order. The planner does not hold a failed variant against the site's
first choice.

The kernels are small test kernels that are only analysed and rewritten (never run): fast."""

from __future__ import annotations

import re

from accelopt.agents.offline.catalogue import all_sites, get_rewrite
from accelopt.agents.offline.executor import OfflineExecutor
from accelopt.agents.offline.lesson_tags import failed_in_text, variant_in_text
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Experience, Plan
from accelopt.search.roles import ExecuteRequest, FixRequest, PlanRequest

from .helpers import CASES
from .lessons import summarized_experience

# Two kernels of different families with the same widenable column loop: the lessons are learned
# on the compiler-generated one and used on the hand-written one.
LEARNED_ON = KernelSource(name=CASES["cg_silu"].name, text=CASES["cg_silu"].text)
USED_ON = KernelSource(name=CASES["hw_silu"].name, text=CASES["hw_silu"].text)
FAILED = 1 / 1.15  # what the search records for a rejected candidate


def widen_site(kernel: KernelSource):
    return next(s for s in all_sites(kernel.text, kernel.name) if s.rewrite == "widen_free_dim")


async def variant_lesson(
    factor: int, speedup: float, *, failure: str | None = None, id_: int = 1
) -> Experience:
    """The real summarizer's lesson for widening LEARNED_ON's column loop by `factor`."""
    return await summarized_experience(
        LEARNED_ON, widen_site(LEARNED_ON), {"factor": factor}, speedup, id_=id_, failure=failure
    )


def execute(experiences: list[Experience], samples: int = 2):
    site = widen_site(USED_ON)
    assert [v["factor"] for v in site.variants] == [2, 4, 8]
    plan = Plan(title=site.title, rewrite="widen_free_dim", site=site.id, params=dict(site.variants[0]))
    result = OfflineExecutor().execute_now(
        ExecuteRequest(kernel=USED_ON, plan=plan, samples=samples, experiences=experiences)
    )
    assert result.error is None
    assert len(result.plans) == len(result.kernels)
    return result


def widths(result) -> list[int]:
    """The column width of each written kernel, read from its text."""
    found = []
    for kernel in result.kernels:
        match = re.search(r"j \* (\d+) : \(j \+ 1\) \* \1", kernel.text)
        assert match is not None
        found.append(int(match.group(1)))
    return found


async def test_the_lesson_names_the_variant_and_the_failure():
    lesson = (await variant_lesson(4, FAILED, failure="runtime_error (line 12): assertion failed")).lesson
    assert variant_in_text(lesson.plan) == {"factor": "4"}
    assert failed_in_text(lesson.plan)
    ok = (await variant_lesson(2, 1.2)).lesson
    assert variant_in_text(ok.plan) == {"factor": "2"} and not failed_in_text(ok.plan)


def test_without_lessons_the_executor_writes_the_variants_in_the_sites_order():
    result = execute([])
    assert [p.params for p in result.plans] == [{"factor": 2}, {"factor": 4}]
    assert widths(result) == [512, 1024]
    # Each kernel comes with the plan it realises: the title names its own width.
    assert "1024 columns" in result.plans[1].title


async def test_a_variant_that_failed_on_a_similar_kernel_is_left_out_with_the_larger_factors():
    failed = await variant_lesson(4, FAILED, failure="runtime_error (line 12): assertion failed")
    result = execute([failed])
    assert [p.params for p in result.plans] == [{"factor": 2}]
    assert widths(result) == [512]


async def test_a_variant_that_paid_on_a_similar_kernel_is_written_first():
    paid = await variant_lesson(4, 1.3)
    result = execute([paid])
    assert [p.params for p in result.plans] == [{"factor": 4}, {"factor": 2}]
    assert widths(result) == [1024, 512]


async def test_a_variant_that_gave_nothing_makes_room_for_another():
    """One loosely related no-gain record is not enough to leave a variant out; two are."""
    nothing = [await variant_lesson(2, 1.0, id_=i) for i in (2, 3)]
    assert [p.params for p in execute(nothing[:1]).plans] == [{"factor": 2}, {"factor": 4}]
    result = execute(nothing)
    assert [p.params for p in result.plans] == [{"factor": 4}, {"factor": 8}]


async def test_when_every_variant_has_failed_the_plan_is_still_written_once():
    failed = await variant_lesson(2, FAILED, failure="runtime_error: assertion failed")
    result = execute([failed])
    assert [p.params for p in result.plans] == [{"factor": 2}]


async def test_the_fixer_skips_a_variant_that_failed_on_a_similar_kernel():
    site = widen_site(USED_ON)
    plan = Plan(title=site.title, rewrite="widen_free_dim", site=site.id, params={"factor": 2})
    written = get_rewrite("widen_free_dim").apply(USED_ON.text, USED_ON.name, site.id, plan.params)
    request = FixRequest(
        kernel=USED_ON.model_copy(update={"text": written}),
        original=USED_ON,
        plan=plan,
        status="runtime_error",
        message="assertion failed",
    )
    assert OfflineExecutor().fix_now(request).plans[0].params == {"factor": 4}
    failed = await variant_lesson(4, FAILED, failure="runtime_error: assertion failed")
    with_memory = OfflineExecutor().fix_now(request.model_copy(update={"experiences": [failed]}))
    assert with_memory.error is not None and not with_memory.kernels


async def test_the_planner_does_not_hold_a_failed_larger_variant_against_the_site():
    """A block of 4 breaking the shapes is no reason not to widen by 2 (the site's first
    choice); a failure of that first choice is."""
    site = widen_site(USED_ON)

    def position(experiences: list[Experience]) -> int | None:
        count = len(all_sites(USED_ON.text, USED_ON.name))
        plans = (
            OfflinePlanner()
            .plan_now(PlanRequest(kernel=USED_ON, profile=None, experiences=experiences, count=count))
            .plans
        )
        return next((i for i, p in enumerate(plans) if p.site == site.id), None)

    alone = position([])
    larger_failed = await variant_lesson(4, FAILED, failure="runtime_error: assertion failed")
    first_failed = await variant_lesson(2, FAILED, failure="runtime_error: assertion failed")
    assert alone is not None and position([larger_failed]) == alone
    assert position([first_failed]) is None  # a failure of the plan itself: not proposed at all
