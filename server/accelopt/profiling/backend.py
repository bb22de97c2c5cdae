"""The profiling backend contract: turn one kernel (and the task that says what "correct" is)
into an `Evaluation`. The `simulator` backend always works; `neuron` needs a Trainium host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, Field

from accelopt.profiling.evaluation import Evaluation, KernelSource

if TYPE_CHECKING:
    from accelopt.profiling.task import Task


class EvaluationOptions(BaseModel):
    hardware: Literal["trn1", "trn2", "trn3"] = "trn1"
    seeds: int = Field(5, ge=1, description="random inputs checked for correctness")
    timeout_s: float = Field(120.0, gt=0, description="wall-clock limit for one evaluation")
    check_correctness: bool = Field(True, description="False: profile only (trace-only emulation)")
    tolerance: float | None = Field(None, description="relative L2 tolerance; None = the task's")


class Backend(Protocol):
    name: str

    async def evaluate(self, kernel: KernelSource, task: Task, options: EvaluationOptions) -> Evaluation:
        """Never raises for anything the kernel does: a crash, hang or policy violation is an
        Evaluation with the matching status."""
        ...

    async def aclose(self) -> None:
        """Stop every worker this backend started."""
        ...
