"""The structured results of the MCP tools (their output schemas).

Every figure comes from the engine's own models (`Profile`, `Evaluation`, `Candidate`,
`Experience`, `HardwareSpec`) and says which backend and hardware produced it. Units are in the
field names; percentages are 0-100 (the engine's fractions times 100), said so in each field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Hardware = Literal["trn1", "trn2", "trn3"]  # hardware/specs.py HARDWARE_NAMES


class EngineBusy(BaseModel):
    """How long each engine was busy, as a percentage (0-100) of the kernel's latency."""

    tensor_percent: float
    vector_percent: float
    scalar_percent: float
    gpsimd_percent: float
    dma_percent: float


class LineCostInfo(BaseModel):
    line: int = Field(description="1-based line in the kernel's file")
    source: str = Field(description="the text of that line")
    busy_us: float = Field(description="engine busy time attributed to the line, microseconds")
    share_percent: float = Field(description="share (0-100) of the kernel's summed engine busy time")
    engines_us: dict[str, float] = Field(description="engine -> busy microseconds from this line")


class ProfileReport(BaseModel):
    backend_label: str = Field(description="where the numbers come from, e.g. 'simulated on trn1'")
    latency_us: float = Field(description="kernel latency, microseconds")
    roofline_peak_latency_us: float = Field(
        description="the least latency the roofline allows for this kernel's work, microseconds"
    )
    percent_of_peak: float = Field(
        description="percent of roofline peak: roofline peak latency / latency x 100 (above 100 only for fused vector work that beats the convention's vector peak)"
    )
    bound: str = Field(description="what limited the run, in words, e.g. 'HBM-bandwidth bound'")
    roofline_bound: str | None = Field(
        None, description="the resource the roofline itself says the work needs most, in words"
    )
    engine_busy: EngineBusy
    hbm_read_bytes: int
    hbm_write_bytes: int
    instructions: int
    dma_transfers: int
    costliest_lines: list[LineCostInfo] = Field(description="the source lines that cost the most, worst first")
    summary: str = Field(description="the headline in one sentence")


class Diagnostic(BaseModel):
    line: int | None = Field(None, description="1-based line in the kernel's file, when known")
    severity: Literal["error", "warning"]
    code: str = Field(description="the NKI compiler error code (e.g. err_num_partition_mismatch) or the status")
    message: str
    source: str = Field("", description="the text of that line")


class Correctness(BaseModel):
    checked: bool
    correct: bool | None = Field(None, description="None when not checked or the kernel did not run")
    seeds: int = Field(0, description="random inputs the outputs were compared on")
    max_relative_error: float | None = Field(None, description="worst relative L2 error over outputs and seeds")
    tolerance: float | None = None
    reference: str = Field(description="what the outputs were compared with")


class ProfileResult(BaseModel):
    kernel_name: str
    path: str | None
    status: str = Field(description="ok, syntax_error, compile_error, runtime_error, incorrect, timeout, rejected")
    message: str = ""
    line: int | None = Field(None, description="1-based line of the failure, when the kernel failed")
    correctness: Correctness
    profile: ProfileReport | None = Field(None, description="None when the kernel did not run to the end")


class CheckResult(BaseModel):
    kernel_name: str
    path: str | None
    passed: bool = Field(description="no NKI rule broken and the outputs match the reference")
    status: str
    message: str = Field("", description="why it did not pass (e.g. which output differs, by how much)")
    diagnostics: list[Diagnostic]
    correctness: Correctness
    backend_label: str


class KernelEdit(BaseModel):
    """Replace lines start_line..end_line (1-based, inclusive) of the original file with new_text;
    end_line = start_line - 1 inserts before start_line. Edits are listed bottom-up, so applying
    them in order keeps the line numbers of the remaining ones valid."""

    start_line: int
    end_line: int
    new_text: str


class CandidateSummary(BaseModel):
    rank: int
    id: str
    speedup: float = Field(description="baseline latency / this candidate's latency")
    latency_us: float
    percent_of_peak: float | None = Field(None, description="percent of roofline peak (above 100 only for fused vector work)")
    bound: str | None = None
    title: str = Field(description="the last plan that produced it")
    rationale: list[str] = Field(description="the chain of plans from the original kernel, oldest first")
    diff: str = Field(description="unified diff against the kernel the search started from")
    backend_label: str


class OptimizeResult(BaseModel):
    search_id: str
    kernel_name: str
    path: str | None
    running: bool = Field(description="true while the search is still going (only from get_search)")
    reason: str = Field(
        description="why it ended: completed, budget, early_stop, target_reached, cancelled, error"
    )
    message: str = ""
    agents: str
    backend_label: str
    baseline_latency_us: float | None = None
    baseline_percent_of_peak: float | None = Field(None, description="percent of roofline peak (above 100 only for fused vector work)")
    best_speedup: float | None = None
    evaluations: int
    wall_time_s: float
    lessons_learned: int = Field(description="lessons the search wrote to the optimization memory")
    candidates: list[CandidateSummary] = Field(
        description="correct candidates faster or different than the original, fastest first"
    )
    note: str = Field(
        "", description="how to use the result: nothing was written to disk; apply a candidate yourself"
    )


class CandidateDetail(BaseModel):
    search_id: str
    id: str
    rank: int | None = Field(None, description="place in the search's ranking; None when not ranked")
    parent_id: str | None
    iteration: int
    status: str
    message: str = ""
    line: int | None = None
    speedup: float | None = None
    title: str = ""
    rationale: list[str] = Field(default_factory=list, description="plans from the original kernel, oldest first")
    plan_description: str = ""
    text: str = Field(description="the candidate's whole file")
    diff: str = Field(description="unified diff against the kernel the search started from")
    edits: list[KernelEdit] = Field(description="line edits that turn the original file into `text`")
    profile: ProfileReport | None = None


class LessonInfo(BaseModel):
    id: int | None
    title: str
    plan: str
    positive: bool = Field(description="true when the change made the kernel faster")
    speedup: float
    kernel_family: str
    hardware: str
    backend: str
    before: str = ""
    after: str = ""


class MemoryResult(BaseModel):
    memory: str = Field(description="the optimization memory database searched")
    total_experiences: int
    lessons: list[LessonInfo] = Field(description="most relevant first")


class TargetInfo(BaseModel):
    name: str
    description: str
    partitions: int
    tensor_clock_ghz: float
    vector_clock_ghz: float
    scalar_clock_ghz: float
    gpsimd_clock_ghz: float
    tensor_bf16_tflops: float
    roofline_matmul_tflops: float = Field(description="fp32 Tensor Engine peak the roofline uses")
    roofline_vector_gflops: float
    roofline_hbm_gb_per_s: float
    hbm_gb_per_s: float = Field(description="this core's share of the chip's HBM bandwidth")
    sbuf_kib_per_partition: float
    psum_kib_per_partition: float
    psum_banks: int
    dma_engines: int
    spec_sheet: str = Field(description="resource URI of the full spec sheet")


class TargetsResult(BaseModel):
    targets: list[TargetInfo]
    backends: list[str] = Field(description="profiling backends this server knows")
    default_backend: str
