"""The roles the search drives (planner, executor, which also plays the fixer, summarizer) and
the requests and results that pass between them. The search owns this contract; `agents`
implements it twice: LLM agents (`agents/llm.py`) and offline rewrite agents (`agents/offline/`).
Whoever starts a search picks the implementation and hands it in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, Field

from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience, Lesson, Plan


class PlanRequest(BaseModel):
    kernel: KernelSource
    profile: Profile | None
    experiences: list[Experience] = Field(default_factory=list)
    count: int = Field(12, description="how many independent plans to propose (N)")
    hardware: str = "trn1"
    seed: int = 0
    proposal: int = Field(
        0, ge=0, description="which of the N independent planner calls for this kernel (0-based)"
    )
    judged: list[str] = Field(
        default_factory=list,
        description="normalized hashes (KernelSource.normalized_hash) of the kernels the search has "
        "already judged, as of the start of this iteration: a planner that can tell what its plan "
        "would write proposes only new kernels. Empty: the caller does not say",
    )
    input_shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="the kernel's array inputs at the size it is timed at (parameter name -> shape), as "
        "its evaluation reported them: what decides whether a move that keeps data in SBUF fits. "
        "Empty: not known (then no size fact is used)",
    )
    input_dtypes: dict[str, str] = Field(
        default_factory=dict,
        description="the element type of each array input at that size (parameter name -> dtype, e.g. "
        "'bfloat16'): how many bytes a block of it takes. Empty or missing name: 4 bytes assumed",
    )


class ExecuteRequest(BaseModel):
    kernel: KernelSource
    plan: Plan
    profile: Profile | None = None
    samples: int = Field(2, description="how many candidate kernels to write (K)")
    seed: int = 0
    # The same memory experiences the planner saw for this kernel (empty with the memory off):
    # lessons about how a plan's variants fared on similar kernels let an executor write the
    # variants that worked first and leave out the ones that failed there.
    experiences: list[Experience] = Field(default_factory=list)


class FixRequest(BaseModel):
    kernel: KernelSource  # the failing candidate
    original: KernelSource  # the kernel the plan was applied to
    plan: Plan
    status: str
    message: str
    line: int | None = None
    # As in ExecuteRequest: what the memory says about the plan's variants on similar kernels.
    experiences: list[Experience] = Field(default_factory=list)


class SummarizeRequest(BaseModel):
    slow: KernelSource
    fast: KernelSource
    plan: Plan
    speedup: float
    slow_profile: Profile | None = None
    fast_profile: Profile | None = None
    # Set when `fast` was rejected (runtime error, wrong output): what went wrong. `speedup` is then
    # a stand-in below 1 (the search's FAILED_SPEEDUP) and `fast_profile` is None.
    failure: str | None = None
    # The slow kernel's inputs at its timing size (as in PlanRequest), for the lesson's size facts.
    input_shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="the kernel's array inputs at the size it is timed at (parameter name -> shape), as "
        "its evaluation reported them: what decides whether a move that keeps data in SBUF fits. "
        "Empty: not known (then no size fact is used)",
    )
    input_dtypes: dict[str, str] = Field(
        default_factory=dict,
        description="the element type of each array input at that size (parameter name -> dtype, e.g. "
        "'bfloat16'): how many bytes a block of it takes. Empty or missing name: 4 bytes assumed",
    )


class AgentOutput(BaseModel):
    """Every agent call reports its token usage so budgets hold for LLM and offline alike."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0
    model: str = "offline"
    error: str | None = None
    calls: int = Field(0, description="endpoint calls behind this result (0 for offline agents)")
    failures: dict[str, int] = Field(
        default_factory=dict, description="failed endpoint calls by cause (timeout, cut_off, refused, ...)"
    )
    notes: list[str] = Field(
        default_factory=list, description="retries, reply repairs: recorded on candidates"
    )


class PlanResult(AgentOutput):
    plans: list[Plan] = Field(default_factory=list)
    notice: str | None = Field(
        None,
        description="what the planner wants the user to know about how it planned, e.g. that its "
        "catalogue has nothing new for this kernel and the tuner took over (a PlannerNotice event)",
    )
    exhausted: bool = Field(
        False,
        description="no plan because the planner can write no kernel the search has not judged from "
        "this kernel (the notice says why); not a failure: the search stops once every beam kernel is so",
    )


class ExecuteResult(AgentOutput):
    kernels: list[KernelSource] = Field(default_factory=list)
    # Optional, parallel to `kernels`: the plan each kernel realises when the executor refined the
    # requested one (e.g. the parameter variant it chose), so that lessons name what was measured.
    # Empty: every kernel realises the requested plan.
    plans: list[Plan] = Field(default_factory=list)

    def plan_for(self, index: int, requested: Plan) -> Plan:
        return self.plans[index] if index < len(self.plans) else requested


class SummarizeResult(AgentOutput):
    lesson: Lesson | None = None


class Planner(Protocol):
    async def plan(self, request: PlanRequest) -> PlanResult: ...


class Executor(Protocol):
    async def execute(self, request: ExecuteRequest) -> ExecuteResult: ...

    async def fix(self, request: FixRequest) -> ExecuteResult: ...


class Summarizer(Protocol):
    async def summarize(self, request: SummarizeRequest) -> SummarizeResult: ...


@dataclass
class Agents:
    """The three roles together (the executor also plays the fixer)."""

    planner: Planner
    executor: Executor
    summarizer: Summarizer
    name: str = "offline"  # 'offline' or the LLM model names, for labels
