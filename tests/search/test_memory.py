"""The optimization memory on real SQLite files: persistence, selection, concurrent writers from
several processes, a locked database and recovery from a damaged file."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Experience, Lesson
from accelopt.search.kernel_text import kernel_family
from accelopt.search.memory import Memory, MemoryUnavailable, default_memory_path


def experience(
    title: str, *, family: str = "silu", speedup: float = 1.5, slow: str = "", days_old: float = 0
) -> Experience:
    return Experience(
        slow_kernel=slow or f"def {family}_kernel(x):\n    return nl.load(x)  # {title}\n",
        fast_kernel="def k(x):\n    return x\n",
        speedup=speedup,
        lesson=Lesson(title=title, plan=f"do {title}", positive=speedup > 1),
        kernel_family=family,
        task=family,
        created_at=datetime.now(timezone.utc) - timedelta(days=days_old),
    )


def test_rows_persist_across_instances(tmp_path: Path):
    path = tmp_path / "memory.sqlite"
    with Memory(path) as first:
        ids = [first.add(experience(f"lesson {i}")) for i in range(3)]
    with Memory(path) as second:
        assert second.count() == 3
        again = second.get(ids[1])
        assert again is not None and again.lesson.title == "lesson 1" and again.id == ids[1]
        assert [e.lesson.title for e in second.list()] == ["lesson 2", "lesson 1", "lesson 0"]
        assert second.remove(ids[0]) and not second.remove(ids[0])
        assert second.count() == 2
        assert second.clear() == 2 and second.list() == []


def test_default_path_honours_environment(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("ACCELOPT_MEMORY", str(tmp_path / "m.sqlite"))
    assert default_memory_path() == tmp_path / "m.sqlite"
    monkeypatch.delenv("ACCELOPT_MEMORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_memory_path() == tmp_path / "data" / "accelopt" / "memory.sqlite"


def test_kernel_family_strips_decorations():
    assert kernel_family("silu_kernel") == kernel_family("silu_kernel_v3") == "silu"
    assert kernel_family("nki_matmul") == "matmul"


def test_selection_prefers_relevant_and_recent_and_mixes_outcomes(tmp_path: Path):
    with Memory(tmp_path / "m.sqlite") as memory:
        memory.add(experience("old matmul", family="matmul", days_old=300))
        memory.add(experience("silu old", days_old=200))
        memory.add(experience("silu new"))
        memory.add(experience("silu bad", speedup=0.7))
        memory.add(experience("matmul new", family="matmul"))
        kernel = KernelSource(text="def silu_kernel(x):\n    return nl.load(x)\n", name="silu_kernel")
        chosen = memory.select_for_prompt(kernel, limit=3)
        assert [e.lesson.title for e in chosen] == ["silu new", "silu bad", "silu old"]
        assert [e.lesson.title for e in memory.select_for_prompt(kernel, limit=5)][-2:] == [
            "matmul new",
            "old matmul",
        ]
        assert memory.select_for_prompt(kernel, limit=0) == []


def _writer(path: str, worker: int, count: int) -> None:
    with Memory(path, busy_timeout_s=30) as memory:
        for i in range(count):
            memory.add(experience(f"w{worker}-{i}"))


def test_concurrent_writers_from_several_processes(tmp_path: Path):
    path = tmp_path / "shared.sqlite"
    Memory(path).close()
    context = multiprocessing.get_context("fork")  # the children only need the memory module
    workers = [context.Process(target=_writer, args=(str(path), w, 25)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    with Memory(path) as memory:
        rows = memory.list()
        assert len(rows) == 100
        assert len({e.id for e in rows}) == 100
        assert {e.lesson.title for e in rows} == {f"w{w}-{i}" for w in range(4) for i in range(25)}
        assert memory.recovery is None


def test_locked_database_gives_a_clear_error_then_works(tmp_path: Path):
    path = tmp_path / "locked.sqlite"
    memory = Memory(path, busy_timeout_s=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(MemoryUnavailable, match="locked"):
        memory.add(experience("blocked"))
    other.execute("ROLLBACK")
    other.close()
    memory.add(experience("after"))
    assert [e.lesson.title for e in memory.list()] == ["after"]
    memory.close()


def test_garbage_file_is_moved_aside_and_rebuilt(tmp_path: Path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.warns(RuntimeWarning, match="rebuilt it with 0 intact"):
        memory = Memory(path)
    assert memory.recovery is not None and Path(memory.recovery.corrupt_copy).read_bytes().startswith(
        b"this is not"
    )
    memory.add(experience("fresh"))
    assert memory.count() == 1
    memory.close()


def test_damaged_page_keeps_the_intact_rows(tmp_path: Path):
    path = tmp_path / "m.sqlite"
    total = 120
    with Memory(path) as memory:
        for i in range(total):
            memory.add(experience(f"row {i}", slow="x = 1\n" * 300))  # ~2 KB per row: many pages
    page_size = 4096
    pages = path.stat().st_size // page_size
    assert pages > 40
    with path.open("r+b") as handle:  # smash one table page in the middle
        handle.seek(page_size * (pages // 2))
        handle.write(b"\xff" * page_size)
    with pytest.warns(RuntimeWarning, match="intact experience"):
        memory = Memory(path)
    assert memory.recovery is not None
    salvaged = memory.count()
    assert memory.recovery.salvaged == salvaged
    assert total // 2 < salvaged < total
    titles = {e.lesson.title for e in memory.list()}
    assert "row 0" in titles and f"row {total - 1}" in titles  # rows on both sides of the damage
    new_id = memory.add(experience("after recovery"))
    assert memory.get(new_id) is not None
    memory.close()


def test_selection_sees_rows_added_and_removed_by_another_connection(tmp_path: Path):
    path = tmp_path / "m.sqlite"
    kernel = KernelSource(text="def silu_kernel(x):\n    return x\n", name="silu_kernel")
    with Memory(path) as mine, Memory(path) as other:
        first = mine.add(experience("first"))
        assert [e.id for e in mine.select_for_prompt(kernel)] == [first]
        second = other.add(experience("second"))
        assert {e.id for e in mine.select_for_prompt(kernel)} == {first, second}
        other.remove(first)
        assert [e.id for e in mine.select_for_prompt(kernel)] == [second]
