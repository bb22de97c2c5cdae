"""Fixtures for search tests: the loopback chat server, the real simulator backend, the SiLU
task, LLM agents pointed at the server, and helpers to run a search and inspect processes."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from chat_server import ChatServer, Responder
from silu_variants import BASELINE

from accelopt.agents.factory import aclose_agents
from accelopt.agents.llm import llm_agents
from accelopt.agents.llm_config import LLMConfig
from accelopt.agents.pricing import Price
from accelopt.profiling.backends import get_backend
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.task import Task, task_for_kernel
from accelopt.search.config import SearchConfig
from accelopt.search.events import Finished, SearchEvent
from accelopt.search.roles import Agents

PRICE = Price(prompt_per_million=3.0, completion_per_million=15.0)


@pytest.fixture
def chat_server() -> Iterator[Callable[..., ChatServer]]:
    """Start a scripted chat-completions server on loopback: `server = chat_server(responder)`
    (keyword options as `ChatServer` takes them: models, props, slots)."""
    started: list[ChatServer] = []

    def start(responder: Responder, **options: Any) -> ChatServer:
        server = ChatServer(responder, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# One simulator for the session (its event loop too): it keeps the SiLU task's reference outputs,
# so each test pays only for its own candidates. Modules using it run in the session loop.
SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def simulator() -> AsyncIterator[object]:
    backend = get_backend("simulator", max_workers=2)
    yield backend
    await backend.aclose()


@pytest.fixture
def silu() -> tuple[KernelSource, Task]:
    """The SiLU baseline task (inputs declared beside the kernel: nothing to read from disk)."""
    kernel = KernelSource(text=BASELINE, name="silu_kernel", path="silu_test.py")
    return kernel, task_for_kernel(kernel)


def llm_config(base_url: str, **overrides: object) -> LLMConfig:
    values: dict[str, object] = dict(
        base_url=base_url,
        model="test-model",
        timeout_s=5.0,
        max_retries=2,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        prices={"test-model": PRICE},
    )
    values.update(overrides)
    return LLMConfig(**values)  # type: ignore[arg-type]


@pytest_asyncio.fixture(loop_scope="session")
async def make_llm_agents() -> AsyncIterator[Callable[..., Agents]]:
    made: list[Agents] = []

    def make(base_url: str, **overrides: object) -> Agents:
        agents = llm_agents(llm_config(base_url, **overrides))
        made.append(agents)
        return agents

    yield make
    for agents in made:
        await aclose_agents(agents)


def small_config(**overrides: object) -> SearchConfig:
    values: dict[str, object] = dict(
        beam_width=2,
        plans_per_kernel=2,
        samples_per_plan=2,
        iterations=2,
        fix_attempts=1,
        seeds=2,
        evaluation_timeout_s=60,
        search_id="test",
    )
    values.update(overrides)
    return SearchConfig(**values)  # type: ignore[arg-type]


async def collect(stream: AsyncIterator[SearchEvent]) -> list[SearchEvent]:
    return [event async for event in stream]


def finished_of(events: list[SearchEvent]) -> Finished:
    last = events[-1]
    assert isinstance(last, Finished), f"the last event is {last.kind}, not finished"
    assert sum(isinstance(e, Finished) for e in events) == 1
    return last


def descendants(pid: int | None = None) -> list[int]:
    """Live (non-zombie) processes descended from `pid` (default: this process), from /proc."""
    root = pid or os.getpid()
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        current = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == current]
        found.extend(kids)
        frontier.extend(kids)
    return found


class ProcessWatch:
    """Processes descended from this one that appeared after the watch started (long-lived
    helpers started earlier in the session, e.g. multiprocessing's resource tracker, are not
    ours to judge)."""

    def __init__(self) -> None:
        self.before = set(descendants())

    def new(self) -> list[int]:
        return [p for p in descendants() if p not in self.before]

    def survivors(self, grace_s: float = 0.5) -> list[int]:
        """New processes still alive after `grace_s`: a killed process needs a moment to
        disappear (SIGKILL is delivered asynchronously); a leaked one stays."""
        deadline = time.monotonic() + grace_s
        while (alive := self.new()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return alive


@pytest.fixture
def processes() -> ProcessWatch:
    return ProcessWatch()
