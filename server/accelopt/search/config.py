"""How a search runs: beam shape, memory selection, concurrency, budgets and stopping rules.

Defaults follow the published AccelOpt NKIBench runs (B=6, N=12, K=2, T=16, F=2, 16 experiences
in the prompt, at most 8 new per iteration with at most half positive).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Budget(BaseModel):
    """Hard limits; the search stops with reason "budget" when one is reached.

    Dollars and tokens are checked before each agent call, so one call already in flight may
    overshoot them; evaluations are reserved before they start and never overshoot.
    """

    model_config = ConfigDict(extra="forbid")

    max_dollars: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)
    max_evaluations: int | None = Field(None, ge=0, description="backend evaluations, cache hits excluded")
    max_wall_time_s: float | None = Field(None, gt=0)


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    beam_width: int = Field(6, ge=1, description="B: kernels kept after each iteration")
    plans_per_kernel: int = Field(12, ge=1, description="N: independent planner calls per beam kernel")
    samples_per_plan: int = Field(2, ge=1, description="K: candidate kernels the executor writes per plan")
    iterations: int = Field(16, ge=0, description="T")
    fix_attempts: int = Field(2, ge=0, description="F: fixer attempts for a failing candidate")

    memory_in_prompt: int = Field(16, ge=0, description="experiences shown to the planner")
    new_experiences_per_iteration: int = Field(8, ge=0)
    positive_threshold: float = Field(
        1.04, gt=1.0, description="slow/fast speedup above which a pair is a positive lesson"
    )
    negative_threshold: float = Field(
        1 / 1.15, gt=0.0, lt=1.0, description="speedup below which a pair is a negative lesson"
    )

    hardware: Literal["trn1", "trn2", "trn3"] = "trn1"
    seeds: int = Field(5, ge=1, description="random inputs per correctness check")
    evaluation_timeout_s: float = Field(120.0, gt=0)
    max_concurrent_evaluations: int = Field(2, ge=1)
    max_concurrent_agent_calls: int = Field(8, ge=1)

    budget: Budget = Field(default_factory=Budget)
    patience: int | None = Field(None, ge=1, description="stop after P iterations without a faster kernel")
    target_percent_of_peak: float | None = Field(
        None, gt=0, description="stop once the best kernel reaches this fraction of roofline peak"
    )
    max_consecutive_agent_failures: int | None = Field(
        24,
        ge=1,
        description="stop with reason 'error' after this many planner failures in a row (endpoint down)",
    )
    ranked_limit: int = Field(50, ge=1, description="candidates listed in the final ranking")
    seed: int = 0
    search_id: str | None = Field(None, description="fixed id for the search; random when None")


def fixable(status: str) -> bool:
    """Statuses the fixer is asked to repair (timeouts and sandbox rejections are not)."""
    return status in ("syntax_error", "compile_error", "runtime_error", "incorrect")
