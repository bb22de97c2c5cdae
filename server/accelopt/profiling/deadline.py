"""Trusted work on untrusted data, with a deadline that actually stops it.

The parent parses the worker's trace and runs the timing model on it. Both are linear in the
trace's size, which the kernel chooses: a kernel that records millions of instructions would
otherwise keep the parent busy long after its evaluation timed out. `within()` runs the work in
its own thread and, past the deadline, raises `DeadlineExceeded` in the caller *and* stops the
thread (an asynchronous exception, delivered at its next Python bytecode), so no CPU is spent on
an evaluation that is already over.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The work did not finish in time (and was stopped)."""


class _Stop(BaseException):
    """Raised inside the work's thread; a BaseException so that `except Exception` in the work
    does not swallow it."""


async def within(seconds: float, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a thread of its own, stopped after `seconds` (or when the caller is
    cancelled)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(outcome)  # type: ignore[arg-type]

    def hand_over(outcome: T | None, error: BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(settle, outcome, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    state = _WorkState()

    def run() -> None:
        outcome: T | None = None
        error: BaseException | None = None
        stopped = False
        try:
            outcome = work(*args)
        except _Stop:
            stopped = True
        except BaseException as raised:  # handed to the caller, whatever it is
            error = raised
        while True:  # from here on no stop is sent
            try:
                with state.lock:
                    state.finished = True
                break
            except _Stop:  # one landed before the lock was taken
                stopped = True
        if state.stop_sent and _absorb_pending_stop():
            stopped = True
        if not stopped:
            hand_over(outcome, error)

    thread = threading.Thread(target=run, name="accelopt-bounded-work", daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(asyncio.shield(future), max(0.0, seconds))
    except asyncio.TimeoutError:
        _stop(thread, state)
        raise DeadlineExceeded(f"did not finish within {seconds:.1f} s") from None
    except asyncio.CancelledError:
        _stop(thread, state)
        raise


class _WorkState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished = False
        self.stop_sent = False


def _absorb_pending_stop() -> bool:
    """Takes a `_Stop` sent but not yet delivered to this thread, so that none is left behind.

    A pending asynchronous exception is delivered at the next check of the interpreter's eval
    breaker, which every backward jump makes: a short loop is enough. It must not be cleared with
    `PyThreadState_SetAsyncExc(ident, NULL)`: on CPython 3.11 that leaves the interpreter-wide
    "async exception pending" flag set, and from then on any function run under `sys.settrace`
    spins forever in the tracing dispatch (found through a test that traced a kernel after an
    evaluation had run in the same process)."""
    try:
        for _ in range(10_000):
            pass
    except _Stop:
        return True
    return False


def _stop(thread: threading.Thread, state: _WorkState) -> None:
    """Raise `_Stop` in `thread`, again every 50 ms until it has ended: an asynchronous exception
    that lands in a callback the interpreter runs on that thread (a garbage-collector callback,
    a `__del__`) is reported and dropped, not propagated."""

    def keep_stopping() -> None:
        for _ in range(600):
            with state.lock:
                if state.finished or thread.ident is None or not thread.is_alive():
                    return
                state.stop_sent = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Stop))
            thread.join(0.05)

    threading.Thread(target=keep_stopping, name="accelopt-bounded-work-stop", daemon=True).start()
