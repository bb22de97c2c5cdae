"""With no endpoint configured the factory gives the offline agents, and the loop runs on them
unchanged: plans name their rewrite, costs stay zero, the ranking is measured by the simulator."""

from __future__ import annotations

from search_fixtures import SESSION_LOOP, collect, finished_of, small_config

from accelopt.agents.factory import make_agents
from accelopt.agents.llm_config import LLMConfig
from accelopt.search.beam import run_search
from accelopt.search.events import CandidateEvent, CostEvent, Started

pytestmark = SESSION_LOOP


async def test_search_with_the_offline_agents(simulator, silu):
    agents = make_agents(LLMConfig())  # no base_url: offline
    assert agents.name == "offline"
    kernel, task = silu
    events = await collect(
        run_search(kernel, task, agents, simulator, small_config(iterations=1, beam_width=1))
    )
    finished = finished_of(events)
    assert finished.reason == "completed"
    candidates = [e.candidate for e in events if isinstance(e, CandidateEvent)]
    assert candidates and all(
        c.plan is not None and c.plan.rewrite for c in candidates if c.status != "agent_error"
    )
    assert all(e.dollars == 0 and e.prompt_tokens == 0 for e in events if isinstance(e, CostEvent))
    ranked = [r.candidate for r in finished.ranked]
    assert ranked and all(c.status == "ok" for c in ranked)
    assert ranked[0].speedup == max(c.speedup for c in ranked)
    # every candidate event carries the search's ranking so far; the last one is the final list
    rankings = [e.ranking for e in events if isinstance(e, CandidateEvent)]
    assert rankings[-1] == [c.id for c in ranked]
    baseline = next(e.baseline for e in events if isinstance(e, Started))
    latency = {c.id: c.latency_ms for c in [baseline, *candidates]}
    for ranking in rankings:
        assert [latency[i] for i in ranking] == sorted(latency[i] for i in ranking)
