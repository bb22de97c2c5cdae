"""Verified evaluations, the trusted side: re-run a sandboxed run's call log in this process.

The sandboxed worker returns outputs, a trace and the call log of its first numeric run
(`accelopt.nki.calllog`). None of it is trusted. Here the log is re-run by the emulator's own API
functions (`accelopt.nki.rerun`) — no kernel code is imported or executed — on inputs the kernel
never saw, chosen by the backend after the run. The result is trusted: its outputs must match the
reference (the backend judges them like any outputs), and its trace must be exactly the trace the
worker returned, or the evaluation is rejected. Only that trace is ever timed.

Re-runs are serialized: the emulator keeps its running context per process.
"""

from __future__ import annotations

import threading

import numpy as np

from accelopt.nki.rerun import RerunError, compare_traces, rerun
from accelopt.nki.runtime import KernelRun, blas_single_thread
from accelopt.nki.trace import Trace

_ONE_AT_A_TIME = threading.Lock()


class VerificationFailed(Exception):
    """The returned run is not what its calls do; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def rerun_returned_calls(
    trace: Trace, inputs: list[np.ndarray], *, timeout_s: float, max_bytes: int
) -> KernelRun:
    """The trusted re-run of `trace.calls` on `inputs`; raises VerificationFailed when the log
    cannot be re-run or the returned trace is not the one the re-run emits."""
    with _ONE_AT_A_TIME, blas_single_thread():
        try:
            run = rerun(trace, inputs, timeout_s=timeout_s, max_bytes=max_bytes)
        except RerunError as exc:
            raise VerificationFailed(f"the kernel's recorded calls cannot be re-run: {exc}") from None
    mismatch = compare_traces(trace, run.trace)
    if mismatch is not None:
        raise VerificationFailed(
            f"{mismatch}: the trace the sandbox returned is not the one the kernel's calls make"
        )
    return run
