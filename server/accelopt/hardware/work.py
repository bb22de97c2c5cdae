"""Work: what a kernel must compute and move, whatever the hardware; the roofline divides it
by a chip's peaks (`roofline.peak_latency`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Work(BaseModel):
    """The work a kernel must do, for the roofline (AccelOpt's convention, NKI_NOTES §6)."""

    matmul_flops: float = 0.0
    vector_flops: float = 0.0
    hbm_bytes: float = 0.0
    source: Literal["task", "trace"] = "trace"
    # The part of matmul_flops with bf16/fp16/fp8/tf32 operands, which the Tensor Engine runs
    # at 4x the fp32 rate (the §6 convention assumes fp32 everywhere; 0 = all fp32).
    matmul_flops_full_rate: float = 0.0
