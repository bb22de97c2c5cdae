"""What one `accelopt mcp` process is configured with: the run configuration of `accelopt
optimize` (agents, backend, Ray, memory, search defaults, LLM endpoint: the same file and flags),
plus the defaults of the profiling tools. Tool arguments override these per call."""

from __future__ import annotations

from pydantic import BaseModel, Field

from accelopt.agents.run_config import RunConfig
from accelopt.profiling.task import Size


class McpSettings(BaseModel):
    run: RunConfig = Field(default_factory=RunConfig)
    use_memory: bool = Field(True, description="False: searches neither read nor write the persistent memory")
    size: Size = Field("full", description="input shapes of reference modules, unless a call says otherwise")
    profile_workers: int = Field(2, ge=1, description="sandbox workers for profile_kernel and check_kernel")
    profile_timeout_s: float = Field(120.0, gt=0)
    kept_searches: int = Field(16, ge=1, description="finished searches kept for get_search/get_candidate")
