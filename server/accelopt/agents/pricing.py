"""Dollar cost of LLM calls from a configurable price table (dollars per million tokens).

No prices are built in: they differ by provider and change often, and a self-hosted endpoint
costs nothing per token. Put your provider's prices in the configuration's `[llm.prices]`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_per_million: float = Field(0.0, ge=0)
    completion_per_million: float = Field(0.0, ge=0)


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prices: dict[str, Price] = Field(default_factory=dict, description="model name -> price")

    def price_for(self, model: str) -> Price | None:
        """Exact model name first, then the longest configured name the model starts with
        (so 'gpt-oss-120b' also prices 'gpt-oss-120b-2025-08')."""
        if model in self.prices:
            return self.prices[model]
        prefixes = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.price_for(model)
        if price is None:
            return 0.0
        return (
            prompt_tokens * price.prompt_per_million + completion_tokens * price.completion_per_million
        ) / 1e6
