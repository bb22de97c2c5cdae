"""Lessons about an executor's variants, through the beam search.

An executor may say which variant of the plan each of its kernels realises
(`ExecuteResult.plans`). The search then keeps that plan on the candidate, a failed variant
beside a working one becomes a lesson of its own (naming the variant), and the next executor
call for a kernel of the search receives the experiences the planner saw -- none with the memory
off.

The SiLU kernel and the simulator are real; the executor is scripted (its "variants" are known
kernels) so that the outcomes are known in advance."""

from __future__ import annotations

from search_fixtures import SESSION_LOOP, collect, finished_of, small_config
from silu_variants import WIDE, WRONG

from accelopt.agents.offline.lesson_tags import failed_in_text, variant_in_text
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.search.beam import run_search
from accelopt.search.events import CandidateEvent
from accelopt.search.memory import IN_MEMORY, Memory
from accelopt.search.roles import Agents, ExecuteRequest, ExecuteResult, FixRequest

pytestmark = SESSION_LOOP


class NamedVariants:
    """Writes two variants of every plan, the wide kernel as `factor` 2 and a wrong one as
    `factor` 4, and says so; records the experiences each call received."""

    def __init__(self) -> None:
        self.experiences_seen: list[int] = []

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        self.experiences_seen.append(len(request.experiences))
        plans = [
            request.plan.model_copy(update={"params": {"factor": f}, "title": f"{request.plan.title} by {f}"})
            for f in (2, 4)
        ]
        kernels = [request.kernel.model_copy(update={"text": text}) for text in (WIDE, WRONG)]
        return ExecuteResult(kernels=kernels[: request.samples], plans=plans[: request.samples])

    async def fix(self, request: FixRequest) -> ExecuteResult:
        return ExecuteResult(error="the scripted fixer does not fix")


async def search(
    simulator, silu, memory_in_prompt: int
) -> tuple[list[CandidateEvent], Memory, NamedVariants]:
    kernel, task = silu
    executor = NamedVariants()
    memory = Memory(IN_MEMORY)
    config = small_config(
        beam_width=1,
        plans_per_kernel=1,
        samples_per_plan=2,
        iterations=2,
        fix_attempts=0,
        memory_in_prompt=memory_in_prompt,
    )
    events = await collect(
        run_search(
            kernel, task, Agents(OfflinePlanner(), executor, OfflineSummarizer()), simulator, config, memory
        )
    )
    assert finished_of(events).reason == "completed"
    return [e for e in events if isinstance(e, CandidateEvent)], memory, executor


async def test_a_failed_variant_beside_a_working_one_is_a_lesson_about_that_variant(simulator, silu):
    candidates, memory, executor = await search(simulator, silu, memory_in_prompt=16)
    first_round = [e.candidate for e in candidates if e.candidate.iteration == 1]
    assert {c.plan.params["factor"]: str(c.status) for c in first_round if c.plan} == {
        2: "ok",
        4: "incorrect",
    }
    lessons = {variant_in_text(e.lesson.plan)["factor"]: e for e in memory.list() if e.lesson.plan}
    assert not lessons["4"].positive and failed_in_text(lessons["4"].lesson.plan)
    assert lessons["4"].fast_kernel == WRONG
    assert lessons["2"].positive and lessons["2"].fast_kernel == WIDE
    # The second iteration's executor call saw what the first one learned.
    assert executor.experiences_seen[0] == 0 and executor.experiences_seen[1] >= 2


async def test_with_the_memory_off_the_executor_sees_no_experiences(simulator, silu):
    _, memory, executor = await search(simulator, silu, memory_in_prompt=0)
    assert memory.list()  # the search still learns...
    # ...but nothing is shown to the agents: neither the two iterations' calls nor those for the
    # next plans that replace the kernels the scripted executor writes again (search/claims.py)
    assert len(executor.experiences_seen) >= 2 and set(executor.experiences_seen) == {0}
