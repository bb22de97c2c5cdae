"""What one `accelopt mcp` process is configured with: the same choices as `accelopt optimize`
(agents, backend, memory, search defaults, LLM endpoint; `commands/mcp.py` reads them from the
same configuration file and flags), plus the defaults of the profiling tools. Tool arguments
override these per call."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from accelopt.agents.llm_config import LLMConfig
from accelopt.profiling.task import Size
from accelopt.search.config import SearchConfig


class McpSettings(BaseModel):
    agents: Literal["auto", "llm", "offline"] = "auto"
    backend: str = "simulator"
    memory: str | None = Field(None, description="memory database; None: $ACCELOPT_MEMORY or the per-user file")
    search: SearchConfig = Field(default_factory=SearchConfig)
    llm: LLMConfig | None = None
    use_memory: bool = Field(True, description="False: searches neither read nor write the persistent memory")
    size: Size = Field("full", description="input shapes of reference modules, unless a call says otherwise")
    profile_workers: int = Field(2, ge=1, description="sandbox workers for profile_kernel and check_kernel")
    profile_timeout_s: float = Field(120.0, gt=0)
    kept_searches: int = Field(16, ge=1, description="finished searches kept for get_search/get_candidate")
