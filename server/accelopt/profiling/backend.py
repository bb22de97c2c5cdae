"""The profiling backend contract: turn one kernel (and the task that says what "correct" is)
into an `Evaluation`. The `simulator` backend always works; `neuron` needs a Trainium host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, Field

from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.task import Task


class EvaluationOptions(BaseModel):
    hardware: Literal["trn1", "trn2", "trn3"] | None = Field(
        None,
        description="target; None: the kernel's own (legacy neuronxcc.nki kernels trn1, nki.* kernels "
        "trn2: accelopt.nki.apiversion)",
    )
    seeds: int = Field(5, ge=1, description="random inputs checked for correctness")
    timeout_s: float = Field(120.0, gt=0, description="wall-clock limit for one evaluation")
    check_correctness: bool = Field(True, description="False: profile only (trace-only emulation)")
    tolerance: float | None = Field(None, description="relative L2 tolerance; None = the task's")


def resolved_hardware(options: EvaluationOptions, kernel: KernelSource) -> Literal["trn1", "trn2", "trn3"]:
    """The target a figure for `kernel` is produced on: the one asked for, else the kernel's."""
    from accelopt.nki.apiversion import default_hardware

    return options.hardware or default_hardware(kernel.text)


def assumed(options: EvaluationOptions, kernel: KernelSource) -> str:
    """Which NKI rules and target an evaluation of `kernel` assumes, in words."""
    from accelopt.nki.apiversion import detect

    return f"{detect(kernel.text).label} on {resolved_hardware(options, kernel)}"


class Backend(Protocol):
    name: str

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        """Never raises for anything the kernel does: a crash, hang or policy violation is an
        Evaluation with the matching status."""
        ...

    async def aclose(self) -> None:
        """Stop every worker this backend started."""
        ...
