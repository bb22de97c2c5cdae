"""The server's settings: `initializationOptions`, overlaid by `workspace/configuration` (section
"accelopt"), both in the client's camelCase.

Secrets never pass through here: the LLM API key is named by its environment variable
(`agents.apiKeyEnv`), and only the agent factory reads that variable.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from accelopt.lsp.protocol import SearchOptions, WireModel


class AgentSettings(WireModel):
    mode: Literal["offline", "llm"] = "offline"
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    model: str | None = Field(None, description="the model every role uses unless `models` names another")
    models: dict[str, str] = Field(
        default_factory=dict, description="role (planner/executor/summarizer) -> model"
    )
    api_key_env: str | None = Field(None, description="NAME of the environment variable holding the API key")
    config_file: str | None = Field(
        None,
        description="the configuration file of `accelopt optimize --config` (TOML or JSON): its [llm] and "
        "[search] apply in the editor too; the settings above win where they are set",
    )


class SearchSettings(SearchOptions):
    """Defaults for every search started from this editor (a request's options win)."""

    correctness_seeds: int | None = Field(None, ge=1)
    fix_attempts: int | None = Field(None, ge=0)
    max_concurrent_evaluations: int | None = Field(None, ge=1)
    evaluation_timeout_s: float | None = Field(None, gt=0)


class ServerSettings(WireModel):
    backend: Literal["simulator", "neuron"] = "simulator"
    # "auto": the kernel's own target (legacy neuronxcc.nki kernels trn1, nki.* kernels trn2)
    hardware: Literal["auto", "trn1", "trn2", "trn3"] = "auto"
    input_size: Literal["full", "small"] = Field(
        "full",
        description="input shapes kernels are timed at (reference modules define both); at 'full' a "
        "search checks outputs at the module's small shapes when it has them (profiling/real_size.py)",
    )
    profile_timeout_s: float = Field(60.0, gt=0)
    ray: str | None = Field(
        None, description="searches evaluate on Ray: 'local' (a private loopback cluster) or a cluster address"
    )
    profile_workers: int = Field(
        1, ge=1, description="sandbox workers reserved for hover/diagnostic profiles"
    )
    agents: AgentSettings = Field(default_factory=AgentSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    prestart_search_process: bool = Field(
        True, description="keep one search process started ahead (faster first candidate, ~100 MB idle)"
    )
    memory_path: str | None = Field(
        None, description="optimization memory (SQLite); None = the per-user default"
    )
    max_candidates: int = Field(
        5, ge=1, description="ranked candidates sent to the client and offered as actions"
    )
    diagnostics_delay_s: float = Field(0.3, ge=0, description="debounce between a save and re-emulation")
    # Trust (see accelopt.lsp.trust): read from initializationOptions only.
    workspace_trusted: bool = Field(
        False, description="the editor's word that the workspace is trusted (VS Code: workspace.isTrusted)"
    )
    trusted_folders: list[str] = Field(
        default_factory=list, description="folders whose kernels may run, for editors without workspace trust"
    )

    def redacted(self) -> dict[str, Any]:
        """What may be written to a log (no secrets exist here, but endpoints can embed tokens)."""
        data = self.model_dump(by_alias=True)
        if data["agents"].get("baseUrl"):
            data["agents"]["baseUrl"] = "<set>"
        return data


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value  # null too: "no budget" in a newer layer clears an older budget
    return merged


def unknown_keys(data: Any, model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Setting names in `data` that `model` (ServerSettings by default) does not have, dotted."""
    model = model or ServerSettings
    if not isinstance(data, dict):
        return []
    known: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        known[name] = info
        if info.alias:
            known[info.alias] = info
        known[to_camel(name)] = info
    found: list[str] = []
    for key, value in data.items():
        field = known.get(key)
        if field is None:
            found.append(prefix + key)
            continue
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found += unknown_keys(value, inner, f"{prefix}{key}.")
    return found


def merge_settings(*layers: dict[str, Any] | None) -> ServerSettings:
    """Later layers win key by key (a null value included); a missing layer changes nothing."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if isinstance(layer, dict):
            merged = _deep_merge(merged, layer)
    return ServerSettings.model_validate(merged)


def hardware_for(settings: ServerSettings, kernel_text: str) -> Literal["trn1", "trn2", "trn3"]:
    """The target figures for a kernel are produced on: the setting, or the kernel's default."""
    from accelopt.nki.apiversion import default_hardware

    return default_hardware(kernel_text) if settings.hardware == "auto" else settings.hardware
