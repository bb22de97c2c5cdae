"""The profiles behind hover, code lens and diagnostics, computed in one long-lived child process.

The simulator backend runs kernels in sandboxed workers, but it digests their traces (timing
model, metrics) in the calling process; in the server's process that CPU work would compete
with the editor's requests for the interpreter lock. So the server keeps one child for profiles
and talks to it in JSON lines:
  parent -> child:  {"id": N, "kernel": KernelSource, "settings": ServerSettings}
                    {"cancel": N}
  child -> parent:  {"id": N, "outcome": ProfileOutcome}
Jobs run concurrently in the child (its backend bounds the sandbox workers). The child dies
with the server (SIGTERM on parent death, or end of its stdin); a child that dies first is
restarted on the next request, and the requests it held answer with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import sys
from typing import Any

from accelopt.lsp.children import start_child, stdin_lines
from accelopt.lsp.config import ServerSettings
from accelopt.lsp.engine import ProfileOutcome, profile_kernel
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.parent_death import die_with_parent

log = logging.getLogger(__name__)


class ProfileProcess:
    """The server's door to profiles: `await profile(kernel, settings)` from any number of tasks;
    they run in one child process, so the timing model's CPU work never shares the server's
    interpreter (searches run in child processes of their own, search_process.py)."""

    def __init__(self) -> None:
        self._child: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[ProfileOutcome]] = {}
        self._ids = itertools.count(1)
        self._starting = asyncio.Lock()

    async def _ensure_child(self) -> asyncio.subprocess.Process:
        async with self._starting:
            if self._child is None or self._child.returncode is not None:
                self._child = await start_child("accelopt.lsp.profile_process")
                self._reader = asyncio.create_task(self._read(self._child))
            return self._child

    async def _read(self, child: asyncio.subprocess.Process) -> None:
        assert child.stdout is not None
        while line := await child.stdout.readline():
            data = json.loads(line)
            future = self._pending.pop(data["id"], None)
            if future is not None and not future.done():
                future.set_result(ProfileOutcome.model_validate(data["outcome"]))
        code = await child.wait()
        # The child is gone: whatever it held will never be answered.
        for key, future in list(self._pending.items()):
            if not future.done():
                future.set_result(
                    ProfileOutcome(
                        kernel_name="", error=f"the profile process exited (status {code})", transient=True
                    )
                )
            self._pending.pop(key, None)

    async def _send(self, child: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
        assert child.stdin is not None
        child.stdin.write(json.dumps(message).encode() + b"\n")
        await child.stdin.drain()

    async def profile(
        self, kernel: KernelSource, settings: ServerSettings, *, with_schedule: bool = False
    ) -> ProfileOutcome:
        outcome = await self._profile(kernel, settings, with_schedule)
        if not outcome.kernel_name:
            outcome.kernel_name = kernel.name
        return outcome

    async def _profile(self, kernel: KernelSource, settings: ServerSettings, with_schedule: bool) -> ProfileOutcome:
        child = await self._ensure_child()
        job = next(self._ids)
        future: asyncio.Future[ProfileOutcome] = asyncio.get_running_loop().create_future()
        self._pending[job] = future
        try:
            await self._send(
                child,
                {
                    "id": job,
                    "kernel": kernel.model_dump(mode="json"),
                    "settings": settings.model_dump(mode="json"),
                    "schedule": with_schedule,
                },
            )
            return await future
        except asyncio.CancelledError:
            self._pending.pop(job, None)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await asyncio.shield(self._send(child, {"cancel": job}))
            raise
        except ConnectionError as exc:
            self._pending.pop(job, None)
            return ProfileOutcome(
                kernel_name=kernel.name, error=f"the profile process is gone: {exc}", transient=True
            )

    async def aclose(self) -> None:
        child, self._child = self._child, None
        if child is None or child.returncode is not None:
            return
        assert child.stdin is not None
        child.stdin.close()  # the child closes its backend and exits
        try:
            await asyncio.wait_for(child.wait(), 10)
        except (TimeoutError, asyncio.TimeoutError):
            child.kill()
            await child.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


# -- the child ---------------------------------------------------------------------------------


async def _serve() -> None:
    reader = await stdin_lines()
    out = sys.stdout.buffer
    backends: dict[tuple[str, int], Any] = {}
    running: dict[int, asyncio.Task[None]] = {}

    async def one(job: int, kernel: KernelSource, settings: ServerSettings, with_schedule: bool) -> None:
        outcome = await profile_kernel(kernel, settings, backends, with_schedule=with_schedule)
        out.write(json.dumps({"id": job, "outcome": outcome.model_dump(mode="json")}).encode() + b"\n")
        out.flush()

    try:
        while line := await reader.readline():
            message = json.loads(line)
            if "cancel" in message:
                task = running.pop(message["cancel"], None)
                if task is not None:
                    task.cancel()
                continue
            job = message["id"]
            task = asyncio.create_task(
                one(
                    job,
                    KernelSource.model_validate(message["kernel"]),
                    ServerSettings.model_validate(message["settings"]),
                    bool(message.get("schedule")),
                )
            )
            running[job] = task
            task.add_done_callback(functools.partial(_forget, running, job))
    finally:
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        for backend in backends.values():
            with contextlib.suppress(Exception):
                await backend.aclose()


def _forget(running: dict[int, asyncio.Task[None]], job: int, _done: asyncio.Task[None]) -> None:
    running.pop(job, None)


def main() -> int:
    die_with_parent()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="profiles %(levelname)s %(message)s")
    asyncio.run(_serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
