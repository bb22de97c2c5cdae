"""SIGTERM and SIGHUP end the language server in order, as a `shutdown` would.

Editors and their plugin hosts often stop a server with SIGTERM (or it gets SIGHUP when the
terminal it runs in goes away) instead of `shutdown` and `exit`. Python's default is to die on
the spot: the search processes would then be killed by their parent-death signal in the middle
of an evaluation, with nobody closing their sandboxed workers. Here the signal asks every search
to stop, waits (bounded) for them to close their backends, stops the profile process, and exits
with status 0.

Before `initialize` nothing has been started, so the signal simply ends the process; from
`initialize` on, the handlers live in the serving event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# The searches get SearchManager's own bound to stop; this is a last resort for the whole close.
CLOSE_TIMEOUT_S = 30.0


def end_at_once_on_signals() -> None:
    """Until the loop takes over: nothing to close, so exit (not die by the signal)."""
    for signum in ENDING_SIGNALS:
        signal.signal(signum, lambda *_: os._exit(0))


def close_on_signals(close: Callable[[], Awaitable[None]], before: Callable[[], None]) -> None:
    """In the running loop: on a signal, `before()` (stop talking to the client), then `close()`
    and exit."""
    loop = asyncio.get_running_loop()
    ending: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if ending:
            return  # a second signal while closing changes nothing
        log.info("%s: stopping the searches and exiting", signal.Signals(signum).name)
        before()
        ending.append(loop.create_task(close_and_exit(close)))

    for signum in ENDING_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)


async def close_and_exit(close: Callable[[], Awaitable[None]], code: int = 0) -> None:
    try:
        await asyncio.wait_for(close(), timeout=CLOSE_TIMEOUT_S)
    except Exception:
        log.exception("closing the server failed")
    finally:
        logging.shutdown()
        # Not sys.exit: the protocol's reader thread is blocked reading stdin (still open), and
        # a normal interpreter exit would wait for it forever.
        os._exit(code)
