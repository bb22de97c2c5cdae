"""Two plans of one iteration that write the same kernel: the later one in the iteration's order
(beam kernel, then proposal) gets its beam kernel's next plan instead, so the evaluation slot is
spent on a kernel not judged yet, and which plan keeps the kernel does not depend on which
agent answered first."""

from __future__ import annotations

import asyncio

from search_fixtures import SESSION_LOOP, collect, finished_of, small_config

from accelopt.agents.offline import offline_agents
from accelopt.search.beam import run_search
from accelopt.search.claims import IterationClaims
from accelopt.search.events import CandidateEvent

pytestmark = SESSION_LOOP


async def test_a_kernel_two_beam_kernels_write_is_judged_once_and_the_later_plan_is_replaced(simulator, silu):
    kernel, task = silu
    # Iteration 2 grows both the fused and the widened SiLU: one's "widen" and the other's "fuse"
    # write the same kernel, which used to be recorded as a duplicate and not evaluated (6 of 7).
    config = small_config(beam_width=2, plans_per_kernel=2, samples_per_plan=1, iterations=2, fix_attempts=0, seeds=1)
    events = await collect(run_search(kernel, task, offline_agents(), simulator, config))
    finished = finished_of(events)
    children = {e.candidate.id: e.candidate for e in events if isinstance(e, CandidateEvent) and e.candidate.parent_id}
    assert finished.reason == "completed", finished.message
    assert len(children) == 2 + 4
    assert all(c.duplicate_of is None for c in children.values())
    assert len({c.kernel.normalized_hash() for c in children.values()}) == len(children)
    assert finished.evaluations == 1 + len(children)
    replacements = [c for c in children.values() if any("replaces a kernel" in n for n in c.agent_notes)]
    assert len(replacements) == 1 and replacements[0].iteration == 2


async def test_the_earlier_branch_keeps_a_shared_kernel_whichever_finishes_writing_first():
    key = ("kernel",)
    for delays in ([0.02, 0.0], [0.0, 0.02]):
        claims = IterationClaims([("judged",)], branches=2, first_proposal=4)
        won: dict[int, bool] = {}

        async def branch(slot: int, delay: float, claims: IterationClaims = claims, won: dict[int, bool] = won) -> None:
            await asyncio.sleep(delay)  # the agents' answer, slower or faster
            await claims.wait_turn(slot)
            won[slot] = claims.claim(key)
            claims.done(slot)

        await asyncio.gather(*(branch(slot, delay) for slot, delay in enumerate(delays)))
        assert won == {0: True, 1: False}
        assert not claims.claim(("judged",))  # judged before the iteration: nobody's to claim
    # The replacement plans of one beam kernel are numbered past the N every iteration asks for.
    assert [claims.next_proposal(0), claims.next_proposal(0), claims.next_proposal(1)] == [4, 5, 4]
    claims.exhausted(1)
    assert claims.next_proposal(1) is None
