"""The parent's own work on a kernel's data is bounded in time: a trace too big to read and time
within the evaluation's timeout ends the evaluation as a timeout, and the work stops."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.trace import Trace
from accelopt.profiling.deadline import DeadlineExceeded, within
from accelopt.profiling.simulator import _Analysis, _Failed

from .kernels import body


def _spin(stop_seen: list[str]) -> None:
    try:
        while True:
            pass
    finally:
        stop_seen.append(threading.current_thread().name)


async def test_work_past_its_deadline_is_stopped_not_abandoned():
    seen: list[str] = []
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await within(0.2, _spin, seen)
    assert time.monotonic() - started < 2
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen == ["accelopt-bounded-work"]


async def test_results_and_errors_come_back_unchanged():
    assert await within(5, sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await within(5, lambda: 1 / 0)


async def test_reading_a_huge_trace_is_cut_at_the_evaluation_budget():
    """Reading a real trace of 20000 recorded instructions, twenty times over (the work of a trace
    twenty times that size, whatever this machine's speed): with 2 s left of the evaluation it
    ends as a timeout at the budget, not when the reading is done."""
    runtime.install_aliases()
    text = body(
        """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
for i in range(10000):
    nl.store(out, value=nl.load(x))
return out
"""
    )
    fn = runtime.load_kernel(text, "double_kernel", "/virtual/huge.py")
    x = np.ones((128, 256), np.float32)
    trace_json = runtime.run_kernel(fn, [x], numerics=False, kernel_name="double_kernel").trace.to_json()
    # One read timed here, so the bound follows this machine's speed and load at the moment
    # (a fixed 3 s of slack failed once on a loaded machine).
    one_started = time.monotonic()
    Trace.from_json(trace_json)
    one_read_s = time.monotonic() - one_started
    analysis = _Analysis(timeout_s=2.0, worker_s=2.0)
    started = time.monotonic()
    with pytest.raises(_Failed) as failed:
        await analysis.run(lambda: [Trace.from_json(trace_json) for _ in range(20)])
    # stopped at its next bytecode: after at most one more C-level json.loads of this trace
    # (twice the timed read and a second of slack)
    bound_s = 2.0 + 2 * one_read_s + 1.0
    assert time.monotonic() - started < bound_s
    assert failed.value.evaluation.status == "timeout"
    assert "reading and timing the kernel's trace took longer than the 2 s" in failed.value.evaluation.message


_TRACE_AFTER_BOUNDED_WORK = """
import asyncio, sys
from accelopt.profiling.deadline import DeadlineExceeded, within

def spin():
    while True:
        pass

async def both():
    await within(5, sum, [1, 2])
    try:
        await within(0.1, spin)
    except DeadlineExceeded:
        pass
    await asyncio.sleep(0.3)  # the stopped thread has ended

asyncio.run(both())
calls = []
sys.settrace(lambda frame, event, arg: calls.append(event))
def traced():
    return 1
traced()
sys.settrace(None)
print(calls.count("call"))
"""


def test_bounded_work_leaves_nothing_pending_for_traced_code(tmp_path):
    """Finished and stopped work leave the interpreter as they found it: a debugger or coverage
    tool tracing code afterwards runs normally (clearing a pending stop the wrong way once made
    every traced call spin forever)."""
    script = tmp_path / "after.py"
    script.write_text(_TRACE_AFTER_BOUNDED_WORK)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 1
