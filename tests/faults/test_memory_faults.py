"""A memory database locked by another process for the whole search: the search still completes,
its lessons are reported (without an id) and nothing is lost from the database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from chat_server import ChatRequest, Reply
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from search_fixtures import SESSION_LOOP, collect, finished_of, small_config
from silu_variants import WIDE

from accelopt.search.beam import run_search
from accelopt.search.candidate import Experience, Lesson
from accelopt.search.events import LessonEvent
from accelopt.search.memory import Memory

pytestmark = SESSION_LOOP


def steady(role: str, request: ChatRequest) -> Reply:
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role in ("executor", "fixer"):
        return code(WIDE)
    return lesson_reply()


async def test_locked_memory_does_not_stop_the_search(
    chat_server, simulator, silu, make_llm_agents, tmp_path: Path
):
    path = tmp_path / "memory.sqlite"
    with Memory(path) as setup:
        kept = setup.add(
            Experience(
                slow_kernel="a = 1\n",
                fast_kernel="b = 1\n",
                speedup=1.2,
                lesson=Lesson(title="an older lesson", plan="keep me"),
                kernel_family="silu",
            )
        )
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock throughout
    server = chat_server(ScriptedEndpoint(steady))
    kernel, task = silu
    memory = Memory(path, busy_timeout_s=0.2)
    try:
        config = small_config(iterations=1, plans_per_kernel=1, samples_per_plan=1)
        events = await collect(
            run_search(kernel, task, make_llm_agents(server.base_url), simulator, config, memory)
        )
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert finished_of(events).reason == "completed", finished_of(events).message
    lessons = [e for e in events if isinstance(e, LessonEvent)]
    assert lessons and all(e.experience_id is None for e in lessons)
    # the planner still read the memory (readers are not blocked in WAL mode)
    assert f"lesson {kept} (helped" in server.requests_for("planner")[0].user
    assert [e.lesson.title for e in memory.list()] == ["an older lesson"]
    memory.close()
