"""Offline agents: the AccelOpt roles played by a catalogue of semantics-preserving libcst
rewrites, for when no LLM endpoint is configured (and in CI)."""

from __future__ import annotations

from accelopt.agents.offline.executor import OfflineExecutor
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.search.roles import Agents


def offline_agents(seed: int = 0) -> Agents:
    return Agents(
        planner=OfflinePlanner(seed=seed),
        executor=OfflineExecutor(),
        summarizer=OfflineSummarizer(),
        name="offline",
    )


__all__ = ["offline_agents"]
