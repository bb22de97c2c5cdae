"""What the beam search writes to the optimization memory besides clear wins and losses, and
the order in which it expands its beam.

- A candidate the backend rejected and a step with no gain both cost an evaluation for nothing:
  they become negative experiences, and the offline planner then proposes that rewrite after
  the others on a kernel like this one.
- The beam's kernels are expanded best first whatever the memory lookups cost: a lookup that
  takes longer for the best kernel must not let the second-best one plan first.

The SiLU kernel and the simulator are real; the executor is scripted (it "writes" known kernels
for the offline planner's plans) so that the outcomes are known in advance.
"""

from __future__ import annotations

import time

from search_fixtures import SESSION_LOOP, collect, finished_of, small_config
from silu_variants import BASELINE, MEDIUM, WIDE, WRONG

from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.profiling.backend import Backend, EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.profiling.task import Task
from accelopt.search.beam import FAILED_SPEEDUP, run_search
from accelopt.search.candidate import Experience
from accelopt.search.events import IterationEvent, LessonEvent
from accelopt.search.memory import IN_MEMORY, Memory
from accelopt.search.roles import Agents, ExecuteRequest, ExecuteResult, FixRequest, PlanRequest, PlanResult

pytestmark = SESSION_LOOP

# The baseline with its intermediate renamed: a different kernel doing exactly the same work.
SAME_WORK = BASELINE.replace("result", "silu_value")


class ScriptedExecutor:
    """Writes a fixed kernel per rewrite name; the fixer has nothing to offer."""

    def __init__(self, by_rewrite: dict[str, str]) -> None:
        self.by_rewrite = by_rewrite

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        text = self.by_rewrite.get(request.plan.rewrite or "")
        if text is None:
            return ExecuteResult(error=f"no scripted kernel for {request.plan.rewrite}")
        return ExecuteResult(kernels=[request.kernel.model_copy(update={"text": text})])

    async def fix(self, request: FixRequest) -> ExecuteResult:
        return ExecuteResult(error="the scripted fixer does not fix")


async def baseline_profile(simulator: Backend, kernel: KernelSource, task: Task) -> Profile:
    evaluation = await simulator.evaluate(kernel, task, EvaluationOptions(seeds=2))
    assert evaluation.ok and evaluation.profile is not None
    return evaluation.profile


def planner_order(kernel: KernelSource, profile: Profile, experiences: list[Experience]) -> list[str]:
    request = PlanRequest(kernel=kernel, profile=profile, experiences=experiences, count=3)
    result = OfflinePlanner().plan_now(request)
    assert result.error is None
    return [p.rewrite or "" for p in result.plans]


async def test_a_failed_candidate_and_a_no_gain_step_become_negative_lessons(simulator, silu):
    kernel, task = silu
    profile = await baseline_profile(simulator, kernel, task)
    first, second, third = planner_order(kernel, profile, [])
    executor = ScriptedExecutor({first: WRONG, second: SAME_WORK})
    agents = Agents(OfflinePlanner(), executor, OfflineSummarizer())
    memory = Memory(IN_MEMORY)
    config = small_config(beam_width=1, plans_per_kernel=2, samples_per_plan=1, iterations=1, fix_attempts=0)
    events = await collect(run_search(kernel, task, agents, simulator, config, memory=memory))
    assert finished_of(events).reason == "completed"

    stored = {e.lesson.plan.split(":")[0].split()[0]: e for e in memory.list()}
    assert set(stored) == {f"rewrite={first}", f"rewrite={second}"}
    failed, no_gain = stored[f"rewrite={first}"], stored[f"rewrite={second}"]
    assert not failed.positive and failed.speedup == FAILED_SPEEDUP
    assert "failed, incorrect" in failed.lesson.plan
    assert failed.fast_kernel == WRONG
    assert not no_gain.positive and 1 / 1.15 < no_gain.speedup < 1.04
    assert len([e for e in events if isinstance(e, LessonEvent)]) == 2

    # With those lessons, the planner proposes the untried rewrite first, the two that cost an
    # evaluation for nothing after it.
    assert planner_order(kernel, profile, memory.list())[0] == third


class SlowForTheBest(Memory):
    """An empty memory whose lookup takes longer for the faster kernels: with lookups racing,
    the slower beam kernel would plan first."""

    def select_for_prompt(self, kernel: KernelSource, *args: object, **kwargs: object) -> list[Experience]:
        time.sleep({WIDE: 0.4, MEDIUM: 0.2}.get(kernel.text, 0.0))
        return []


class RecordingPlanner(OfflinePlanner):
    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    async def plan(self, request: PlanRequest) -> PlanResult:
        self.kernels.append(request.kernel.text)
        return await super().plan(request)


async def test_the_beam_is_expanded_best_first_whatever_the_lookups_cost(simulator, silu):
    kernel, task = silu
    first, second, _ = planner_order(kernel, await baseline_profile(simulator, kernel, task), [])
    planner = RecordingPlanner()
    agents = Agents(planner, ScriptedExecutor({first: WIDE, second: MEDIUM}), OfflineSummarizer())
    config = small_config(
        beam_width=2,
        plans_per_kernel=2,
        samples_per_plan=1,
        iterations=2,
        fix_attempts=0,
        max_concurrent_agent_calls=1,
    )
    events = await collect(
        run_search(kernel, task, agents, simulator, config, memory=SlowForTheBest(IN_MEMORY))
    )
    assert finished_of(events).reason == "completed"
    first_beam = next(e.beam for e in events if isinstance(e, IterationEvent))
    assert len(first_beam) == 2
    # The N plans of each beam kernel, best kernel first; the calls after them ask for the next
    # plans that replace kernels judged before (the scripted executor writes WIDE and MEDIUM
    # again), in the same order (search/claims.py).
    second_round = planner.kernels[2:6]
    assert second_round == [WIDE, WIDE, MEDIUM, MEDIUM]
    replacements = planner.kernels[6:]
    assert replacements and replacements == sorted(replacements, key=[WIDE, MEDIUM].index)


class TwoVariants(ScriptedExecutor):
    """Writes two samples per plan: the scripted kernel and the wrong one."""

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        written = await super().execute(request)
        wrong = request.kernel.model_copy(update={"text": WRONG})
        return written.model_copy(update={"kernels": [*written.kernels, wrong]})


async def test_a_failed_variant_of_a_plan_that_worked_is_not_held_against_the_plan(simulator, silu):
    kernel, task = silu
    first, *_ = planner_order(kernel, await baseline_profile(simulator, kernel, task), [])
    agents = Agents(OfflinePlanner(), TwoVariants({first: WIDE}), OfflineSummarizer())
    memory = Memory(IN_MEMORY)
    config = small_config(beam_width=1, plans_per_kernel=1, samples_per_plan=2, iterations=1, fix_attempts=0)
    events = await collect(run_search(kernel, task, agents, simulator, config, memory=memory))
    assert finished_of(events).reason == "completed"
    stored = memory.list()
    assert len(stored) == 1 and stored[0].positive and stored[0].fast_kernel == WIDE
