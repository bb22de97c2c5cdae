"""A search in a child process of the language server, streaming its SearchEvents back.

Why a process: the search does CPU work in-process (offline agents rewriting source, the timing
model), and in the server's process that work competes with the editor's requests for the
interpreter lock: several concurrent searches pushed hover latencies to hundreds of ms. In a
child process, the server's loop only reads lines from a pipe.

The child runs trusted engine code only (the same as `accelopt optimize`); kernels still run
in the sandboxed workers its backend starts. Protocol, one JSON document per line:
  parent -> child stdin:  the SearchJob, then optionally "cancel"
  child -> parent stdout: SearchEvent JSON lines, or {"kind": "failed", "message": ...}
The child dies with the server: it asks the kernel for SIGTERM when its parent exits, and it
stops its search when its stdin closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from accelopt.lsp.children import start_child, stdin_lines
from accelopt.profiling.parent_death import die_with_parent

if TYPE_CHECKING:
    from accelopt.lsp.search_job import SearchJob
    from accelopt.search.events import SearchEvent

log = logging.getLogger(__name__)

CANCEL = b"cancel\n"


class SearchProcessFailed(RuntimeError):
    pass


async def start_search_process() -> asyncio.subprocess.Process:
    """A child that imports the engine and then waits for its job (so one can be started ahead
    of need: the imports are most of the time a search takes to get going)."""
    return await start_child("accelopt.lsp.search_process")


class SearchProcesses:
    """Hands out search processes, keeping one spare started ahead when asked to."""

    def __init__(self, keep_spare: bool) -> None:
        self.keep_spare = keep_spare
        self._spare: asyncio.Task[asyncio.subprocess.Process] | None = None

    def prime(self) -> None:
        if self.keep_spare and self._spare is None:
            self._spare = asyncio.create_task(start_search_process())

    async def take(self) -> asyncio.subprocess.Process:
        spare, self._spare = self._spare, None
        self.prime()
        if spare is not None:
            try:
                child = await spare
                if child.returncode is None:
                    return child
            except OSError:
                log.exception("the spare search process did not start")
        return await start_search_process()

    async def close(self) -> None:
        spare, self._spare = self._spare, None
        if spare is None:
            return
        spare.cancel()
        with contextlib.suppress(BaseException):
            child = await spare
            if child.returncode is None:
                child.kill()
                await child.wait()


async def search_events(
    job: SearchJob,
    cancel: asyncio.Event,
    child: asyncio.subprocess.Process,
    grace_s: float = 20.0,
) -> AsyncIterator[SearchEvent]:
    """The events of `job` run by `child` (from SearchProcesses.take), as SearchEvent models.
    Setting `cancel` asks the search to stop (it still reports Finished); cancelling the
    consumer, or a child that does not stop within `grace_s` of being asked, kills it."""
    from accelopt.search.events import search_event_adapter

    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(job.model_dump_json().encode() + b"\n")
    await child.stdin.drain()

    async def forward_cancel() -> None:
        await cancel.wait()
        with contextlib.suppress(ConnectionError):
            assert child.stdin is not None
            child.stdin.write(CANCEL)
            await child.stdin.drain()
        await asyncio.sleep(grace_s)
        log.warning("search process %s ignored its cancel for %.0f s; killing it", child.pid, grace_s)
        with contextlib.suppress(ProcessLookupError):
            child.kill()

    forwarder = asyncio.create_task(forward_cancel())
    failure: str | None = None
    try:
        while line := await child.stdout.readline():
            data = json.loads(line)
            if data.get("kind") == "failed":
                failure = data.get("message", "the search process failed")
                continue
            yield search_event_adapter.validate_python(data)
        returncode = await child.wait()
        if failure or returncode != 0:
            raise SearchProcessFailed(failure or f"the search process exited with status {returncode}")
    finally:
        forwarder.cancel()
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


# -- the child ---------------------------------------------------------------------------------


def warm_imports() -> None:
    """What a search imports once its job is known (the offline agents with libcst, the
    simulator backend): done while the spare process waits, that is 1-2 s less between a click
    on Optimize and the first candidate. The LLM agents are not warmed: their first answer takes
    longer than their import anyway."""
    import accelopt.agents.factory
    import accelopt.agents.offline
    import accelopt.profiling.simulator  # noqa: F401


async def _run_child() -> int:
    from accelopt.lsp.agents import make_search_agents
    from accelopt.lsp.engine import close_backend
    from accelopt.lsp.search_job import SearchJob
    from accelopt.profiling.ray_backend import backend_for
    from accelopt.search.beam import run_search
    from accelopt.search.events import search_event_adapter
    from accelopt.search.memory import Memory

    warm_imports()
    reader = await stdin_lines()
    first = await reader.readline()
    if not first.strip():
        return 0  # a spare whose server went away before giving it a job
    job = SearchJob.model_validate_json(first)
    out = sys.stdout.buffer

    def emit(data: bytes) -> None:
        out.write(data + b"\n")
        out.flush()

    cancel = asyncio.Event()

    async def watch_stdin() -> None:
        while line := await reader.readline():
            if line.strip() == CANCEL.strip():
                cancel.set()
        cancel.set()  # stdin closed: the server is gone

    watcher = asyncio.create_task(watch_stdin())
    memory = None
    backend = None
    try:
        agents = make_search_agents(job.agents, job.agents_mode, job.config.seed)
        backend = backend_for(job.backend, max_workers=job.workers, ray=job.ray)
        try:
            memory = Memory(job.memory_path)
        except Exception:
            log.exception("optimization memory unavailable; searching without it")
        async for event in run_search(
            job.kernel, job.task, agents, backend, job.config, memory=memory, cancel=cancel
        ):
            emit(search_event_adapter.dump_json(event))
        return 0
    except Exception as exc:
        log.exception("search failed")
        emit(json.dumps({"kind": "failed", "message": f"{type(exc).__name__}: {exc}"}).encode())
        return 1
    finally:
        watcher.cancel()
        if backend is not None:
            await close_backend(backend)
        if memory is not None:
            memory.close()


def main() -> int:
    die_with_parent()
    if os.getppid() == 1:  # the parent died before we could ask to follow it
        return 1
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="search %(levelname)s %(message)s")
    return asyncio.run(_run_child())


if __name__ == "__main__":
    sys.exit(main())
