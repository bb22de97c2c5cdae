"""Configuration of the LLM agents: which OpenAI-compatible endpoint, which model and sampling per
role, how long to wait and how often to retry, and what tokens cost.

The API key is never part of the configuration: `api_key_env` names the environment variable
that holds it, and the key is read when the client is created.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from accelopt.agents.endpoint import Preset, StructuredOutput, SystemHandling
from accelopt.agents.pricing import Price, PriceTable

Role = Literal["planner", "executor", "fixer", "summarizer"]
ROLES: tuple[Role, ...] = ("planner", "executor", "fixer", "summarizer")


class RoleSettings(BaseModel):
    """Overrides for one role; unset fields fall back to the top-level values."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1)


class ResolvedRole(BaseModel):
    model: str
    temperature: float
    max_tokens: int
    top_p: float | None


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="NAME of the environment variable holding the key")
    model: str = "gpt-oss-120b"
    temperature: float = Field(1.0, ge=0, le=2)
    max_tokens: int = Field(
        8_192,
        ge=1,
        description="the most tokens a reply may use; lowered per request to what the window leaves",
    )
    top_p: float | None = Field(None, gt=0, le=1)
    preset: Preset | None = Field(
        None, description="openai | vllm | sglang | ollama | llamacpp: defaults for the fields below"
    )
    context_window: int | None = Field(
        None, ge=256, description="prompt + reply tokens the server accepts; None: ask the server"
    )
    concurrency: int | None = Field(
        None, ge=1, description="requests in flight at once (1 for single-slot servers); None: the preset's"
    )
    system_messages: SystemHandling | None = Field(
        None, description="keep | merge (into the first user message) | auto (merge if the template drops them)"
    )
    structured_output: StructuredOutput | None = Field(
        None, description="off | json_schema (response_format for plans and lessons) | auto"
    )
    discover: bool = Field(True, description="ask the server for its window and chat template at start")
    planner: RoleSettings = Field(default_factory=RoleSettings)
    executor: RoleSettings = Field(default_factory=RoleSettings)
    fixer: RoleSettings = Field(default_factory=RoleSettings)
    summarizer: RoleSettings = Field(default_factory=RoleSettings)

    timeout_s: float = Field(
        300.0,
        gt=0,
        description="per request, counted once the request is sent (time queued for a free slot is not counted)",
    )
    max_retries: int = Field(4, ge=0, description="after the first attempt, on 429/5xx/timeouts/bad replies")
    backoff_initial_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    max_reply_chars: int = Field(
        400_000, ge=1_000, description="longer replies are refused as runaway output"
    )
    prices: dict[str, Price] = Field(default_factory=dict, description="model -> dollars per million tokens")

    def role(self, role: Role) -> ResolvedRole:
        settings: RoleSettings = getattr(self, role)
        return ResolvedRole(
            model=settings.model or self.model,
            temperature=self.temperature if settings.temperature is None else settings.temperature,
            max_tokens=settings.max_tokens or self.max_tokens,
            top_p=settings.top_p if settings.top_p is not None else self.top_p,
        )

    @property
    def price_table(self) -> PriceTable:
        return PriceTable(prices=self.prices)

    def api_key(self) -> str:
        """The key from the environment; local servers (vLLM, SGLang, Ollama) accept any value."""
        return os.environ.get(self.api_key_env, "") or "not-needed"

    @property
    def models(self) -> list[str]:
        return sorted({self.role(r).model for r in ROLES})
