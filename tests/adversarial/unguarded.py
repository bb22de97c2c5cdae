"""Running attack code with the sandbox's Python-level checks off, as if each had a hole: what
the operating system's isolation and the parent's reading of the result files must still hold."""

from __future__ import annotations

from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.worker_protocol import WorkerJob
from profiling.helpers import REFERENCE_BASE


def run_unguarded(sandbox: Sandbox, code: str) -> WorkerOutcome:
    """Run `code` at the module level of a reference module with every Python-level check off.
    The module records what it saw in `RESULT` (returned as the failure message, if any)."""
    job = WorkerJob(
        mode="reference",
        policy="reference",
        source=REFERENCE_BASE + "\n" + code,
        source_path="/nonexistent/attack.py",
        seeds=[1],
        python_guard=False,
    )
    return sandbox.run_sync(sandbox.prepare(job), 60)
