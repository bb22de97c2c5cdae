"""Choosing the agents: LLM agents when an endpoint is configured, offline rewrite agents
otherwise (so every feature works on a machine with no key and no network)."""

from __future__ import annotations

from typing import Literal

from accelopt.agents.llm_config import LLMConfig
from accelopt.search.roles import Agents

AgentsKind = Literal["auto", "llm", "offline"]


class AgentsUnavailable(RuntimeError):
    """The requested agents cannot be built here; the message says what to do."""


def make_agents(config: LLMConfig | None = None, *, kind: AgentsKind = "auto", seed: int = 0) -> Agents:
    """`auto` = LLM agents if `config` names an endpoint (base_url), offline agents otherwise."""
    if kind == "llm" or (kind == "auto" and config is not None and config.base_url):
        if config is None or not config.base_url:
            raise AgentsUnavailable(
                "LLM agents need an endpoint: set [llm] base_url in the configuration file "
                "(any OpenAI-compatible server, e.g. http://localhost:8000/v1)"
            )
        from accelopt.agents.llm import llm_agents

        return llm_agents(config)
    try:
        from accelopt.agents.offline import offline_agents  # type: ignore[attr-defined]
    except ImportError as exc:
        raise AgentsUnavailable(
            "the offline agents are not available in this build yet; configure an LLM endpoint "
            "([llm] base_url) and use --agents llm"
        ) from exc
    return offline_agents(seed=seed)


async def aclose_agents(agents: Agents) -> None:
    """Release what the agents hold (the LLM agents' HTTP connection pool)."""
    closed: set[int] = set()
    for role in (agents.planner, agents.executor, agents.summarizer):
        client = getattr(role, "client", None)
        if client is not None and id(client) not in closed and hasattr(client, "aclose"):
            closed.add(id(client))
            await client.aclose()
