"""An asyncio event loop on its own thread, for engine work the server only awaits.

The language server's loop must answer a hover in milliseconds whatever the engine is doing.
Kernels run in sandboxed worker processes, but the engine also does CPU work in-process
(offline agents rewriting source with libcst, the timing model digesting a trace), and any of
it on the server's loop would freeze the editor for seconds. So profiles and each search run
on loops of their own; the server's loop only awaits their results. (The GIL is shared, but the
interpreter switches threads every few milliseconds, so a busy engine thread delays a hover by
milliseconds, not by the length of its work.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on this thread's loop and await its result from the caller's loop.
        Cancelling the caller cancels the coroutine on this loop too."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what still runs on the loop, stop it and wait for the thread to end."""
        if not self.loop.is_running():
            return

        async def cancel_everything() -> None:
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        try:
            await asyncio.wait_for(self.run(cancel_everything()), timeout_s)
        except (TimeoutError, asyncio.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, timeout_s)
