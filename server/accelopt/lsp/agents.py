"""The agents a search from the editor uses: offline unless the settings name an LLM endpoint.

Kept free of LSP imports: the search process (search_process.py) builds its agents here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from accelopt.lsp.config import AgentSettings

if TYPE_CHECKING:
    from accelopt.agents.llm_config import LLMConfig
    from accelopt.search.roles import Agents


# Where an editor user sets the endpoint (VS Code's setting; the server's own key for other clients).
ENDPOINT_SETTING = "`accelopt.llm.baseUrl` (the server setting `agents.baseUrl`) or [llm] base_url in the configuration file"


class AgentsRefused(Exception):
    """The configured agents cannot be made (e.g. LLM agents without an endpoint)."""


def check_agents(agents: AgentSettings, mode: Literal["offline", "llm"] | None) -> None:
    """Refuse, before a search process is started for them, agents that cannot be made: the
    factory's own check, so the server and the search process say the same thing."""
    if (mode or agents.mode) != "llm":
        return
    from accelopt.agents.factory import AgentsUnavailable, require_endpoint

    try:
        require_endpoint(llm_config(agents), setting=ENDPOINT_SETTING)
    except (AgentsUnavailable, ValueError) as exc:  # ValueError: settings the LLM config rejects
        raise AgentsRefused(str(exc)) from exc


def llm_config(agents: AgentSettings) -> LLMConfig:
    """The LLM agents' configuration: the configuration file's [llm] (the same file and loader as
    the CLI's, so the same defaults, prices and limits), overlaid by the editor's settings where
    they are set. The key stays in its environment variable."""
    from accelopt.agents.llm_config import ROLES, LLMConfig
    from accelopt.agents.run_config import ConfigError, load_run_config

    try:
        from_file = load_run_config(agents.config_file).llm if agents.config_file else None
    except ConfigError as exc:
        raise AgentsRefused(str(exc)) from exc
    data: dict[str, Any] = from_file.model_dump(exclude_unset=True) if from_file else {}
    if agents.base_url:
        data["base_url"] = agents.base_url
    if agents.api_key_env:
        data["api_key_env"] = agents.api_key_env
    if agents.model:
        data["model"] = agents.model
    for role, model in agents.models.items():
        if role in ROLES:
            data[role] = {"model": model}
    return LLMConfig.model_validate(data)


def make_search_agents(agents: AgentSettings, mode: Literal["offline", "llm"] | None, seed: int) -> Agents:
    """The configured agents (a request may ask for offline or LLM ones); refused with the
    factory's explanation when they cannot be made (e.g. LLM agents without an endpoint)."""
    from accelopt.agents.factory import AgentsUnavailable, make_agents

    kind = mode or agents.mode
    try:
        if kind == "llm":
            return make_agents(llm_config(agents), kind="llm", seed=seed, endpoint_setting=ENDPOINT_SETTING)
        return make_agents(None, kind="offline", seed=seed)
    except AgentsUnavailable as exc:
        raise AgentsRefused(str(exc)) from exc
