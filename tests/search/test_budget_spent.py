"""The offline planner does not run dry while the budget lasts: once the catalogue has no plan
that writes a kernel the search has not judged, it says so (a PlannerNotice event) and the
tuner's settings take over, so a search whose evaluation budget is larger than what the
catalogue can write spends all of it."""

from __future__ import annotations

from pathlib import Path

from search_fixtures import SESSION_LOOP, collect, finished_of, small_config

from accelopt.agents.offline import offline_agents
from accelopt.agents.offline.catalogue import all_sites
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.task import task_for_kernel
from accelopt.search.beam import run_search
from accelopt.search.budget import Budget
from accelopt.search.events import CandidateEvent, PlannerNotice

pytestmark = SESSION_LOOP


# A compiler-generated matmul (tests/offline/kernels): its loops have known trip counts, so the
# tuner's blocks and loop orders need no guess about the input shapes.
MATMUL = Path(__file__).parents[1] / "offline" / "kernels" / "cg_matmul.py"
INPUTS = "# accelopt: inputs v1=float32[256,256] v2=float32[256,1024] v3=float32[256,1]\n"


async def test_a_budget_larger_than_the_catalogue_is_spent_and_the_tuner_takes_over(simulator):
    kernel = KernelSource(text=INPUTS + MATMUL.read_text(), name="matmul_cg_kernel", path="cg_matmul.py")
    task = task_for_kernel(kernel)
    # Engine choices are left out: the planner proposes only those the timing model expects to
    # pay (engine_choice.py), none on this DMA-bound kernel.
    one_step = sum(
        len(site.variants) for site in all_sites(kernel.text, kernel.name) if site.runs_on is None
    )
    # Past what the catalogue writes on this kernel and its children (the baseline, the first
    # round and the plans left on the winner, whichever kernel the timing model ranks first),
    # so the tuner has to write the rest.
    budget = one_step + 5
    config = small_config(
        beam_width=1,
        plans_per_kernel=3,
        samples_per_plan=1,
        iterations=12,
        fix_attempts=0,
        seeds=1,
        budget=Budget(max_evaluations=budget),
    )
    events = await collect(run_search(kernel, task, offline_agents(), simulator, config))
    finished = finished_of(events)
    # Spent to the last evaluation: the search stops on the budget, or, where the last new
    # setting is exactly the last evaluation the budget allows, because nothing new is left.
    assert finished.evaluations == budget, finished.message
    assert finished.reason in ("budget", "completed")
    notices = [e for e in events if isinstance(e, PlannerNotice)]
    assert notices and "the tuner takes over" in notices[0].message
    tuned = [
        e.candidate
        for e in events
        if isinstance(e, CandidateEvent) and e.candidate.plan and e.candidate.plan.rewrite == "tune"
    ]
    assert tuned and any(c.status == "ok" for c in tuned)
    assert all(c.duplicate_of is None for c in tuned)


# A small two-pass kernel (tests/offline/kernels) whose catalogue and tuner write only a few
# kernels: the search used to pass its iterations repeating judged plans (duplicates, never
# evaluated) and complete its 40 iterations with most of its budget left and no word why.
TWO_PASS = Path(__file__).parents[1] / "offline" / "kernels" / "hw_two_pass.py"


async def test_past_the_tuner_the_planner_composes_rewrites_then_stops_saying_nothing_new_exists(simulator):
    text = "# accelopt: inputs x=float32[256,512]\n" + TWO_PASS.read_text()
    kernel = KernelSource(text=text, name="two_pass_kernel", path="hw_two_pass.py")
    config = small_config(
        beam_width=1,
        plans_per_kernel=2,
        samples_per_plan=1,
        iterations=40,
        fix_attempts=0,
        seeds=1,
        budget=Budget(max_evaluations=40),
    )
    events = await collect(run_search(kernel, task_for_kernel(kernel), offline_agents(), simulator, config))
    finished = finished_of(events)
    notices = [e.message for e in events if isinstance(e, PlannerNotice)]
    children = [e.candidate for e in events if isinstance(e, CandidateEvent) and e.candidate.parent_id]
    # Each source of plans, in turn, said once it takes over: compositions, then the engine moves
    # the timing model expects to slow the kernel; then that nothing new is left.
    assert any("plans now compose" in n for n in notices), notices
    assert any("engine moves the timing model expects to slow" in n for n in notices), notices
    assert any(c.plan and c.plan.rewrite == "compose" and c.status == "ok" for c in children)
    # Every plan wrote a kernel not judged before: nothing repeated, every child evaluated.
    assert children and all(c.duplicate_of is None and c.status != "agent_error" for c in children)
    assert finished.evaluations == len(children) + 1  # and the baseline
    assert finished.reason == "completed" and "no new kernel to judge" in finished.message, finished.message
    assert "every other kernel the offline agents can write from this one has been judged" in finished.message


async def test_with_two_samples_a_plan_with_one_variant_gives_its_second_sample_to_the_next_plan(simulator, silu):
    kernel, task = silu
    # Plan 2 fuses the SiLU chain, a rewrite with one variant: its second sample used to go
    # unwritten, so the iteration judged 3 kernels of the 4 its plans and samples allow.
    config = small_config(beam_width=1, plans_per_kernel=2, samples_per_plan=2, iterations=1, fix_attempts=0, seeds=1)
    events = await collect(run_search(kernel, task, offline_agents(), simulator, config))
    finished = finished_of(events)
    children = [e.candidate for e in events if isinstance(e, CandidateEvent) and e.candidate.parent_id]
    assert finished.reason == "completed", finished.message
    assert len(children) == 2 * 2 and finished.evaluations == 1 + 4
    assert all(c.duplicate_of is None and c.status != "agent_error" for c in children)
    filled = [c for c in children if any("which has no further variant" in n for n in c.agent_notes)]
    assert len(filled) == 1 and filled[0].plan is not None and filled[0].plan.rewrite != "fuse_chain"
