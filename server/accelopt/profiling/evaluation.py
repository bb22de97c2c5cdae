"""What a backend returns for one kernel: the verdict and, when it ran, its profile."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, Field

from accelopt.profiling.profile import Profile

EvalStatus = Literal[
    "ok",
    "syntax_error",
    "compile_error",  # an NKI rule broken (error code + line)
    "runtime_error",
    "incorrect",
    "timeout",
    "rejected",  # sandbox policy, a trace that fails verification, or an implausible profile
]


class KernelSource(BaseModel):
    """A kernel is a module (file text) plus the name of its @nki.jit function."""

    text: str
    name: str
    path: str | None = Field(None, description="where the text came from, for messages; never re-read")

    def normalized_hash(self) -> str:
        """Hash that ignores comments, blank lines and trailing whitespace (cache/dedup key)."""
        from accelopt.profiling.normalize import normalize_source

        return hashlib.sha256(f"{self.name}\n{normalize_source(self.text)}".encode()).hexdigest()[:20]


class Evaluation(BaseModel):
    status: EvalStatus
    message: str = ""
    error_code: str | None = Field(
        None, description="NKI compiler error code, e.g. err_num_partition_exceed_arch_limit"
    )
    line: int | None = Field(None, description="1-based line in the kernel's own source")
    max_error: float | None = Field(None, description="worst relative L2 error over outputs and seeds")
    seeds: list[int] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list,
        description="what the user should know that is not a failure: host code left out of the "
        "sandboxed run, warnings the reference raised, a size the task could not apply",
    )
    profile: Profile | None = None
    verified: bool = Field(
        False,
        description="the profile is of a trace a trusted re-run reproduced on inputs the kernel never "
        "saw (False: a profile-only run, whose trace comes from the sandbox unverified)",
    )
    checked_size: str | None = Field(
        None, description="the reference module's size the outputs were checked at (None: not checked)"
    )
    timed_size: str | None = Field(
        None, description="the reference module's size the profile was timed at (None: no sizes)"
    )
    timed_input_shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="the kernel's inputs (parameter name -> shape, [] for a scalar) at the size it was "
        "timed at, when it was checked at one size and timed at another; empty otherwise",
    )
    timed_input_dtypes: dict[str, str] = Field(
        default_factory=dict,
        description="the element type of each array input (parameter name -> dtype, e.g. 'bfloat16') at "
        "the size it was timed at, beside timed_input_shapes (empty when those are)",
    )
    wall_time_s: float = 0.0
    assumed: str | None = Field(
        None, description="the NKI rules and target the evaluation assumed, e.g. 'NKI 0.7 (nki.*) on trn2'"
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok"
