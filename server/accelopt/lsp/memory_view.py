"""`accelopt/memory`: the optimization memory's experiences, for the client's view."""

from __future__ import annotations

from accelopt.lsp.protocol import ExperienceInfo, MemoryParams, MemoryResult


def list_experiences(path: str | None, params: MemoryParams) -> MemoryResult:
    """Blocking (SQLite): call it in a thread."""
    from accelopt.search.memory import Memory

    with Memory(path) as memory:
        experiences = memory.list(kernel_family=params.kernel_family, limit=params.limit)
        where = str(memory.path)
    return MemoryResult(
        path=where,
        experiences=[
            ExperienceInfo(
                id=exp.id or 0,
                title=exp.lesson.title,
                speedup=exp.speedup,
                positive=exp.positive,
                kernel_family=exp.kernel_family,
                hardware=exp.hardware,
                backend=exp.backend,
                model=exp.model,
                created_at=exp.created_at.isoformat(),
                plan=exp.lesson.plan,
            )
            for exp in experiences
        ],
    )
