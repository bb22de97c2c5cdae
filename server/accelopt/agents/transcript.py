"""Every exchange with the endpoint, one JSON object a line (`exchanges.jsonl` in a search's
output folder), so a user can see what was asked, what came back and why it was not used."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class Exchange(BaseModel):
    at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    role: str
    attempt: int
    model: str
    request: dict[str, Any] = Field(description="what was sent: messages and sampling parameters")
    queued_s: float = Field(0.0, description="time waiting for a free slot before the request was sent")
    elapsed_s: float = Field(0.0, description="from sending to the reply (or the failure)")
    status: str = Field(description="ok, or the failure's cause")
    error: str | None = None
    finish_reason: str | None = None
    content: str = ""
    reasoning: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_estimated: bool = False


class Transcript:
    """Appends exchanges to a JSONL file; safe to share between concurrent calls."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, exchange: Exchange) -> None:
        line = exchange.model_dump_json() + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line)
