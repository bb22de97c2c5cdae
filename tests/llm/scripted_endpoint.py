"""A scripted "model" for whole-search tests: it answers planner, executor, fixer and summarizer
requests (told apart by the ROLE line of the system prompt) from a script, and can inject
endpoint faults into chosen calls."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from chat_server import ChatRequest, Reply

WIDEN = {
    "title": "Widen the tiles to 512 columns",
    "description": "Four times fewer DMA transfers and instructions.",
}
ONE_TILE = {"title": "Load each row block as one tall tile", "description": "Use 256 rows per tile."}


def code(text: str, prose: str = "Here is the kernel.") -> Reply:
    return Reply(content=f"{prose}\n```python\n{text}```\n")


def lesson_reply() -> Reply:
    lesson = {
        "title": "Wider tiles amortise DMA overhead",
        "plan": "Load and store 128 x 512 tiles instead of 128 x 128 ones.",
        "before": "nl.load(x[i*128:(i+1)*128, j*128:(j+1)*128])",
        "after": "nl.load(x[i*128:(i+1)*128, j*512:(j+1)*512])",
    }
    return Reply(content=json.dumps(lesson))


def proposal(request: ChatRequest) -> int:
    match = re.search(r"Proposal (\d+)", request.user)
    return int(match.group(1)) if match else 1


def variant(request: ChatRequest) -> int:
    match = re.search(r"variant (\d+) of", request.user)
    return int(match.group(1)) if match else 1


@dataclass
class ScriptedEndpoint:
    """`answer(role, request)` gives the normal reply; `faults[(role, n)]` replaces the n-th
    (1-based) request of a role with a fault reply."""

    answer: Callable[[str, ChatRequest], Reply]
    faults: dict[tuple[str, int], Reply] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    served: list[tuple[str, Reply]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: ChatRequest) -> Reply:
        with self._lock:
            self.counts[request.role] += 1
            fault = self.faults.get((request.role, self.counts[request.role]))
        reply = fault or self.answer(request.role, request)
        with self._lock:
            self.served.append((request.role, reply))
        return reply

    def billed(self, timeout_s: float) -> tuple[int, int]:
        """Prompt and completion tokens of every reply the client actually received."""
        with self._lock:
            ok = [r for _, r in self.served if r.status == 200 and r.body is None and r.delay_s < timeout_s]
        return sum(r.prompt_tokens for r in ok), sum(r.completion_tokens for r in ok)
