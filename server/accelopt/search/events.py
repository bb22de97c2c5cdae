"""SearchEvent: the stream every search emits. The CLI renders it as progress, the language
server forwards it as notifications, tests assert on it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from accelopt.search.candidate import Candidate, Lesson, RankedCandidate
from accelopt.search.config import SearchConfig


class Started(BaseModel):
    kind: Literal["started"] = "started"
    search_id: str
    kernel_name: str
    backend: str
    hardware: str
    agents: str
    baseline: Candidate
    config: SearchConfig


class CandidateEvent(BaseModel):
    kind: Literal["candidate"] = "candidate"
    search_id: str
    candidate: Candidate
    ranking: list[str] = Field(
        default_factory=list,
        description="the search's ranking after this candidate: ids of the best correct candidates, one "
        "per distinct kernel, fastest first (rank = place + 1), as long as the final list",
    )


class IterationEvent(BaseModel):
    kind: Literal["iteration"] = "iteration"
    search_id: str
    iteration: int
    total_iterations: int
    best_speedup: float
    best_percent_of_peak: float | None = Field(
        None, description="the best candidate's roofline peak latency / latency, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %"
    )
    beam: list[str] = Field(default_factory=list, description="candidate ids in the next beam")
    evaluations: int = 0


class LessonEvent(BaseModel):
    kind: Literal["lesson"] = "lesson"
    search_id: str
    lesson: Lesson
    speedup: float | None = Field(None, description="the measured speedup; None when the candidate failed")
    failure: str | None = None
    experience_id: int | None = None


class PlannerNotice(BaseModel):
    """The planner changed how it plans for a beam kernel (the offline catalogue had no new plan
    and the tuner took over, or neither had anything new): said once per kernel and iteration."""

    kind: Literal["planner_notice"] = "planner_notice"
    search_id: str
    iteration: int
    candidate_id: str = Field(description="the beam kernel the planner was planning for")
    message: str


class CostEvent(BaseModel):
    kind: Literal["cost"] = "cost"
    search_id: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0


class EndpointCalls(BaseModel):
    """What the agents' endpoint calls came to: made, failed by cause, tokens. Offline agents make
    none; a search whose every call failed says so here (and the CLI exits non-zero)."""

    calls: int = 0
    failed: int = 0
    failures: dict[str, int] = Field(default_factory=dict, description="cause -> count")
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def succeeded(self) -> int:
        return self.calls - self.failed

    def describe(self) -> str:
        if not self.calls:
            return "no endpoint calls"
        causes = ", ".join(f"{count} {cause.replace('_', ' ')}" for cause, count in sorted(self.failures.items()))
        tokens = f"{self.prompt_tokens + self.completion_tokens:,} tokens"
        failed = f"; {self.failed} failed ({causes})" if self.failed else ""
        return f"{self.calls} endpoint calls, {self.succeeded} usable{failed}; {tokens}"


StopReason = Literal["completed", "budget", "early_stop", "target_reached", "cancelled", "error"]


class Finished(BaseModel):
    kind: Literal["finished"] = "finished"
    search_id: str
    reason: StopReason
    message: str = ""
    ranked: list[RankedCandidate] = Field(default_factory=list)
    evaluations: int = 0
    wall_time_s: float = 0.0
    endpoint: EndpointCalls = Field(default_factory=EndpointCalls)


SearchEvent = Annotated[
    Started | CandidateEvent | IterationEvent | LessonEvent | PlannerNotice | CostEvent | Finished,
    Field(discriminator="kind"),
]
search_event_adapter: TypeAdapter[SearchEvent] = TypeAdapter(SearchEvent)
