"""The configuration file of `accelopt optimize` (TOML or JSON) and its validation.

agents = "auto"              # auto | llm | offline
backend = "simulator"
memory = "~/work/.accelopt/memory.sqlite"   # per-workspace memory; default: per user

[search]                     # SearchConfig fields
beam_width = 4
[search.budget]
max_dollars = 5.0

[llm]                        # LLMConfig fields; the key stays in the environment
base_url = "http://localhost:8000/v1"
api_key_env = "MY_ENDPOINT_KEY"
model = "Qwen3-Coder-480B"
[llm.executor]
temperature = 0.6
[llm.prices."Qwen3-Coder-480B"]
prompt_per_million = 0.4
completion_per_million = 1.6
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelopt.agents.llm_config import LLMConfig
from accelopt.search.config import SearchConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 needs the backport
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the field."""


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: Literal["auto", "llm", "offline"] = "auto"
    backend: str = "simulator"
    ray: str | None = Field(
        None, description="run evaluations as Ray tasks: 'local' (a private loopback cluster) or a cluster address"
    )
    memory: str | None = Field(None, description="memory database; default $ACCELOPT_MEMORY or per user")
    search: SearchConfig = Field(default_factory=SearchConfig)
    llm: LLMConfig | None = None


def load_run_config(path: str | Path | None) -> RunConfig:
    if path is None:
        return RunConfig()
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the configuration: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"{file}: {problems}") from exc
