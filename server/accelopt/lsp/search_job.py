"""What the server hands a search process: everything a search needs, as one validated model
(the first JSON line on the child's stdin).

Its own module because it names the Task model, whose import (numpy among it) the server pays
only once a search is asked for, not at start-up."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from accelopt.lsp.config import AgentSettings
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.task import Task
from accelopt.search.config import SearchConfig


class SearchJob(BaseModel):
    kernel: KernelSource
    task: Task
    config: SearchConfig
    agents: AgentSettings
    agents_mode: Literal["offline", "llm"]
    backend: str
    workers: int
    memory_path: str | None
    ray: str | None = None  # evaluations as Ray tasks: 'local' or a cluster address
