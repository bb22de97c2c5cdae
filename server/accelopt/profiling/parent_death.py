"""A child process that must not outlive the process that started it (sandbox workers, the
language server's profile and search processes) asks the kernel for a signal when its parent
exits, however the parent goes (a kill -9 included)."""

from __future__ import annotations

import signal

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(signal_number: int = signal.SIGTERM) -> bool:
    """Linux: deliver `signal_number` to this process when its parent exits. False where the
    kernel cannot do that (not Linux): the caller's other ways of noticing must then do."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal_number)
    except (OSError, AttributeError):
        return False
    return True
