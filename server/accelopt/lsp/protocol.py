"""The custom LSP messages between the AccelOpt server and its editor client.

Both halves follow this file: the Python server (accelopt/lsp) and the TypeScript client
(extension/src). Field names are camelCase on the wire, as LSP's are.

Requests (client -> server)
  accelopt/optimize      OptimizeParams -> OptimizeResult   (long-running; work-done progress with
                          the client's workDoneToken; cancellable with $/cancelRequest or by
                          cancelling the progress)
  accelopt/cancel        CancelParams -> null               (stop a search by id)
  accelopt/memory        MemoryParams -> MemoryResult
  accelopt/candidates    CandidatesParams -> CandidatesNotification (current list, on demand)
  accelopt/timeline      TimelineParams -> TimelineResult    (the engine timeline of one kernel)
  accelopt/searchTree    SearchTreeParams -> SearchTree | null (every candidate of a search, by parent)

Notifications (server -> client)
  accelopt/candidates    CandidatesNotification             (the current ranked list, sent whenever it changes)
  accelopt/searchState   SearchStateNotification            (started / iteration / finished)

Commands (workspace/executeCommand)
  accelopt.optimize         [uri, kernelName]               -> OptimizeStarted (the search runs on, with
                                                               server-initiated progress)
  accelopt.applyCandidate   [searchId, candidateId]         -> ApplyResult (server sends workspace/applyEdit)
  accelopt.applyHunks       [searchId, candidateId, hunks]  -> ApplyResult (only the changes `hunks` names)
  accelopt.candidateHunks   [searchId, candidateId]         -> Hunk[] (the candidate's changes, one by one)
  accelopt.rejectCandidate  [searchId, candidateId]         -> null (drops it; a candidates notification follows)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from accelopt.profiling.schedule_view import Schedule


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class SearchOptions(WireModel):
    """Per-request overrides of the configured search parameters (all optional)."""

    agents: Literal["offline", "llm"] | None = None
    beam_width: int | None = None
    plans_per_candidate: int | None = None
    samples_per_plan: int | None = None
    iterations: int | None = None
    max_evaluations: int | None = None
    budget_usd: float | None = None
    wall_time_s: float | None = None
    seed: int | None = None


class OptimizeParams(WireModel):
    uri: str
    kernel_name: str
    options: SearchOptions = Field(default_factory=SearchOptions)
    work_done_token: str | int | None = None


class OptimizeResult(WireModel):
    search_id: str
    reason: str  # Finished.reason: completed | budget | early_stop | target_reached | cancelled | error
    message: str = ""
    best_speedup: float | None = None
    candidates: int = 0
    # The LLM agents' endpoint calls (made, usable, failures by cause); None for offline agents.
    agent_calls: str | None = None
    agent_failures: int = 0


class OptimizeStarted(WireModel):
    """What the `accelopt.optimize` command answers at once (added: the command's result)."""

    search_id: str | None  # None: the search was refused (message says why)
    message: str = ""


class CancelParams(WireModel):
    search_id: str


class CandidateInfo(WireModel):
    id: str
    rank: int
    speedup: float | None
    latency_ms: float | None
    percent_of_peak: float | None
    status: str
    title: str  # the last plan's title, for labels
    rationale: list[str]  # plan titles from the baseline to this candidate
    text: str  # full text of the document with this candidate in place of the kernel
    diff: str  # unified diff against the document as it was when the search started
    backend: str  # "simulator" or "neuron": which backend measured the numbers
    hardware: str


class CandidatesNotification(WireModel):
    search_id: str
    uri: str
    kernel_name: str
    document_version: int | None
    running: bool
    candidates: list[CandidateInfo]


class CandidatesParams(WireModel):
    search_id: str


SearchPhase = Literal["started", "iteration", "finished"]


class SearchStateNotification(WireModel):
    search_id: str
    uri: str
    kernel_name: str
    state: SearchPhase
    iteration: int = 0
    total_iterations: int = 0
    best_speedup: float | None = None
    dollars: float = 0.0
    message: str = ""


class ApplyResult(WireModel):
    applied: bool
    message: str = ""


class Hunk(WireModel):
    """One change of a candidate against the text its search started from: lines `start_line` to
    `end_line` (1-based, inclusive; an insertion has end_line = start_line - 1) become `added`."""

    index: int
    start_line: int
    end_line: int
    removed: list[str]
    added: list[str]


class SearchTreeParams(WireModel):
    search_id: str


class TreeNode(WireModel):
    id: str
    parent_id: str | None
    iteration: int
    title: str  # the plan that made it ("baseline" for the root)
    status: str
    speedup: float | None = None
    in_beam: bool = False  # kept for the next iteration (the beam's survivors)
    duplicate_of: str | None = None


class SearchTree(WireModel):
    """Every candidate of a search with its parent, for the live search view."""

    search_id: str
    kernel_name: str
    running: bool
    iteration: int
    total_iterations: int
    nodes: list[TreeNode]
    best_by_iteration: list[float] = Field(default_factory=list, description="best speedup after each iteration")


class TimelineParams(WireModel):
    uri: str
    kernel_name: str


class TimelineLine(WireModel):
    line: int
    fraction: float  # share of the summed engine busy time
    text: str = ""


class TimelineResult(WireModel):
    """The engine timeline of a kernel as it is in the editor now; `schedule` is None when the
    kernel could not be profiled, and `message` says why."""

    kernel_name: str
    schedule: Schedule | None = None
    lines: list[TimelineLine] = Field(default_factory=list)
    message: str = ""


class MemoryParams(WireModel):
    limit: int = 100
    kernel_family: str | None = None


class ExperienceInfo(WireModel):
    id: int
    title: str
    speedup: float
    positive: bool
    kernel_family: str
    hardware: str
    backend: str
    model: str
    created_at: str
    plan: str


class MemoryResult(WireModel):
    experiences: list[ExperienceInfo]
    path: str
