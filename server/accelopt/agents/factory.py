"""Choosing the agents: LLM agents when an endpoint is configured, offline rewrite agents
otherwise (so every feature works on a machine with no key and no network)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from accelopt.agents.llm_config import LLMConfig
from accelopt.search.roles import Agents

AgentsKind = Literal["auto", "llm", "offline"]


class AgentsUnavailable(RuntimeError):
    """The requested agents cannot be built here; the message says what to do."""


CONFIG_FILE_ENDPOINT = "[llm] base_url in the configuration file"


def require_endpoint(config: LLMConfig | None, *, setting: str = CONFIG_FILE_ENDPOINT) -> LLMConfig:
    """`config` when it names an endpoint; otherwise AgentsUnavailable naming `setting`, where
    the caller's user sets it (the CLI's configuration file, the editor's settings)."""
    if config is None or not config.base_url:
        raise AgentsUnavailable(
            f"LLM agents need an endpoint: set {setting} "
            "(any OpenAI-compatible server, e.g. http://localhost:8000/v1)"
        )
    return config


def make_agents(
    config: LLMConfig | None = None,
    *,
    kind: AgentsKind = "auto",
    seed: int = 0,
    transcript: str | Path | None = None,
    on_status: Callable[[str], None] | None = None,
    endpoint_setting: str = CONFIG_FILE_ENDPOINT,
) -> Agents:
    """`auto` = LLM agents if `config` names an endpoint (base_url), offline agents otherwise.
    LLM agents write every exchange to `transcript` (JSONL) and report waiting to `on_status`."""
    if kind == "llm" or (kind == "auto" and config is not None and config.base_url):
        from accelopt.agents.llm import llm_agents
        from accelopt.agents.transcript import Transcript

        return llm_agents(
            require_endpoint(config, setting=endpoint_setting),
            transcript=Transcript(transcript) if transcript else None,
            on_status=on_status,
        )
    from accelopt.agents.offline import offline_agents  # libcst: imported when needed

    return offline_agents(seed=seed)


async def aclose_agents(agents: Agents) -> None:
    """Release what the agents hold (the LLM agents' HTTP connection pool)."""
    closed: set[int] = set()
    for role in (agents.planner, agents.executor, agents.summarizer):
        client = getattr(role, "client", None)
        if client is not None and id(client) not in closed and hasattr(client, "aclose"):
            closed.add(id(client))
            await client.aclose()
