"""Profile: the facts about one kernel run that agents, the editor and the CLI read.

Field names follow neuron-profile's `summary-json` (NKI_NOTES §5) so that the simulator and the
hardware backend fill the same model; `_percent` fields are fractions in [0, 1].
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from accelopt.hardware.specs import hardware_label
from accelopt.hardware.work import Work

Bound = Literal["hbm", "tensor", "vector", "latency"]
# What limited a run, in the words a person uses (`Bound` is an internal token). The hover, the
# code lens and the MCP tools all say it this way.
BOUND_WORDS: dict[str, str] = {
    "hbm": "HBM-bandwidth bound",
    "tensor": "Tensor Engine bound",
    "vector": "Vector/Scalar bound",
    "latency": "latency bound",
}


def bound_in_words(bound: str) -> str:
    return BOUND_WORDS.get(bound, f"{bound} bound")


BackendName = Literal["simulator", "neuron"]

# The summary-json metrics a Profile carries under neuron-profile's own names: byte and flop
# counts, plain ratios, and engine-active fractions (kept in [0, 1]).
SUMMARY_COUNTS = (
    "hbm_read_bytes",
    "hbm_write_bytes",
    "sbuf_read_bytes",
    "sbuf_write_bytes",
    "psum_read_bytes",
    "psum_write_bytes",
    "spill_save_bytes",
    "spill_reload_bytes",
    "hardware_flops",
    "transpose_flops",
)
SUMMARY_RATIOS = ("mm_arithmetic_intensity", "peak_flops_bandwidth_ratio", "hfu_estimated_percent")
SUMMARY_FRACTIONS = (
    "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent",
    "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent",
    "dma_active_time_percent",
)


class LineCost(BaseModel):
    """Time attributed to one kernel source line (busy engine time of its instructions)."""

    line: int
    time_ms: float
    fraction: float = Field(ge=0.0, le=1.0, description="share of the summed engine busy time")
    instructions: int
    engines: dict[str, float] = Field(default_factory=dict, description="engine -> busy ms from this line")
    text: str = ""


class Profile(BaseModel):
    backend: BackendName
    hardware: str
    latency_ms: float
    # the NKI rules the kernel was read with (accelopt.nki.apiversion), e.g. "NKI 0.7 (nki.*)"
    nki_api: str | None = None

    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    sbuf_read_bytes: int = 0
    sbuf_write_bytes: int = 0
    psum_read_bytes: int = 0
    psum_write_bytes: int = 0
    spill_save_bytes: int = 0
    spill_reload_bytes: int = 0
    hardware_flops: int = 0
    transpose_flops: int = 0
    mm_arithmetic_intensity: float = 0.0
    peak_flops_bandwidth_ratio: float = 0.0
    hfu_estimated_percent: float = Field(
        0.0,
        description="hardware FLOPs utilisation, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )

    tensor_engine_active_time_percent: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kernel's time the tensor engine is busy, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )
    vector_engine_active_time_percent: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kernel's time the vector engine is busy, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )
    scalar_engine_active_time_percent: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kernel's time the scalar engine is busy, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )
    gpsimd_engine_active_time_percent: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kernel's time the gpsimd engine is busy, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )
    dma_active_time_percent: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of the kernel's time a DMA queue is busy, a fraction in [0, 1], not a percentage: 0.275 means 27.5 %",
    )

    instruction_count: int = 0
    dma_transfer_count: int = 0
    # physical NeuronCores the run used: an SPMD grid on a logical core of 2 uses 2 (then the
    # engine busy fractions and the roofline peak are over both)
    physical_cores: int = Field(1, ge=1)

    # Roofline view
    work: Work = Field(default_factory=Work)
    peak_latency_ms: float = 0.0
    percent_of_peak: float = Field(
        0.0,
        ge=0.0,
        description="peak_latency / latency, a fraction, not a percentage: 0.275 means 27.5 % (above 1 for fused vector work that beats the convention's vector peak)",
    )
    bound: Bound = "latency"
    # The dominant term of the roofline itself (vector, tensor or hbm), whatever the run did;
    # `bound` says what actually limited the run. None when unknown (older profiles).
    roofline_bound: Bound | None = None

    lines: list[LineCost] = Field(default_factory=list, description="costliest source lines first")

    @property
    def label(self) -> str:
        """How a number from this profile is to be introduced to a person. A simulated figure
        for hardware the model knows only from its published specs says so."""
        kind = "simulated" if self.backend == "simulator" else "measured"
        where = self.hardware
        if self.backend == "simulator":
            where = hardware_label(self.hardware)
        cores = f", {self.physical_cores} physical cores" if self.physical_cores > 1 else ""
        return f"{kind} on {where}{cores}"

    def summary_fields(self) -> dict[str, float]:
        """The neuron-profile-style metric dictionary the agents read."""
        keys = (
            "latency_ms",
            *SUMMARY_COUNTS,
            *SUMMARY_RATIOS,
            *SUMMARY_FRACTIONS,
            "peak_latency_ms",
            "percent_of_peak",
        )
        return {k: getattr(self, k) for k in keys}
