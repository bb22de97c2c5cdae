"""The models a search produces and its agents exchange: plans, candidates, lessons."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, Field

from accelopt.profiling.evaluation import EvalStatus, KernelSource
from accelopt.profiling.profile import Profile


class Plan(BaseModel):
    """A one-step optimization plan proposed by a planner."""

    title: str = Field(description="short name, e.g. 'hoist the weight load out of the m loop'")
    description: str = Field("", description="what to change and why, in a few sentences")
    # Offline agents name the rewrite and where to apply it; LLM plans leave these empty.
    rewrite: str | None = None
    site: str | None = None
    params: dict[str, int | float | str | bool] = Field(default_factory=dict)
    lesson_ids: list[int] = Field(default_factory=list, description="memory experiences that informed it")


class Lesson(BaseModel):
    """What a summarizer distilled from a slow -> fast (or fast -> slow) pair."""

    title: str
    plan: str = Field(description="the one-step change, stated so it can be reapplied elsewhere")
    before: str = Field("", description="short snippet of the slow kernel")
    after: str = Field("", description="short snippet of the fast kernel")
    positive: bool = True


class Experience(BaseModel):
    """One row of the optimization memory."""

    id: int | None = None
    slow_kernel: str
    fast_kernel: str
    speedup: float = Field(
        description="measured slow/fast latency ratio; for a failed candidate a stand-in below 1 that "
        "only orders it among negative lessons (see `failure`), never shown as a measurement"
    )
    lesson: Lesson
    failure: str | None = Field(
        None, description="how the candidate failed, when it did (no speedup was measured)"
    )
    kernel_family: str = ""
    task: str = ""
    hardware: str = "trn1"
    backend: str = "simulator"
    model: str = "offline"
    bound: str = Field("", description="roofline bound of the slow kernel, for relevance when selecting")
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def positive(self) -> bool:
        return self.lesson.positive


class Candidate(BaseModel):
    id: str
    parent_id: str | None
    iteration: int
    kernel: KernelSource
    plan: Plan | None = None
    # "agent_error": the agent produced no kernel (endpoint failure, reply without code); the
    # candidate then holds its parent's kernel and `message` says what went wrong.
    status: EvalStatus | Literal["pending", "agent_error"] = "pending"
    message: str = ""
    line: int | None = None
    latency_ms: float | None = None
    speedup: float | None = Field(None, description="baseline latency / this latency")
    percent_of_peak: float | None = Field(
        None,
        description="roofline peak latency / latency, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )
    profile: Profile | None = None
    checked_size: str | None = Field(None, description="the reference size its outputs were checked at")
    timed_size: str | None = Field(None, description="the reference size its latency was timed at")
    timed_input_shapes: dict[str, list[int]] = Field(
        default_factory=dict, description="its inputs' shapes at the timed size, when checked at another"
    )
    timed_input_dtypes: dict[str, str] = Field(
        default_factory=dict,
        description="its array inputs' element types at the timed size (beside the shapes)",
    )
    evaluation_notes: list[str] = Field(
        default_factory=list, description="the evaluation's notes: what was checked and timed where, warnings"
    )
    fix_attempts: int = 0
    # The chain of plans from the baseline to this candidate (oldest first) and the lessons used.
    rationale: list[Plan] = Field(default_factory=list)
    lessons_used: list[int] = Field(default_factory=list)
    fixed_from: str | None = Field(None, description="id of the failing candidate this one repairs")
    duplicate_of: str | None = Field(None, description="an earlier candidate with the same normalized source")
    agent_notes: list[str] = Field(
        default_factory=list, description="what happened in the agent calls behind it (retries, parse fixes)"
    )


class RankedCandidate(BaseModel):
    rank: int
    candidate: Candidate
