"""Shared helpers for the sandbox tests: jobs with small reference modules, orphan checks."""

from __future__ import annotations

import os

from accelopt.profiling.worker_protocol import WorkerJob

# A minimal reference module; tests append code to its module level.
REFERENCE_BASE = """
import numpy as np

def get_inputs(size="full"):
    return [np.arange(6, dtype=np.float32).reshape(2, 3)]

def forward(x):
    return x * 2

def transform_to_nki_inputs(inputs):
    return list(inputs)

def transform_nki_outputs(kernel_out, ref_out):
    return [kernel_out], [ref_out]
"""


def reference_job(extra: str = "", path: str = "/nonexistent/evil_ref.py", seeds=(1,)) -> WorkerJob:
    return WorkerJob(
        mode="reference",
        policy="reference",
        source=REFERENCE_BASE + extra,
        source_path=path,
        seeds=list(seeds),
    )


def process_gone(pid: int) -> bool:
    """True when neither the process nor anything in its process group is alive."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return not os.path.exists(f"/proc/{pid}")
    return False


def worker_pid(pid: int, timeout_s: float = 10.0) -> int:
    """The worker process itself under the sandbox's `pid`: under OS isolation that pid is
    bubblewrap's and the worker two levels down, so follow first children until the worker."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = pid
        while True:
            try:
                with open(f"/proc/{current}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if argv and not argv[0].endswith(b"bwrap") and b"accelopt.profiling.worker" in b" ".join(argv):
                    return current
                with open(f"/proc/{current}/task/{current}/children", encoding="ascii") as f:
                    children = f.read().split()
            except OSError:
                break
            if not children:
                break
            current = int(children[0])
        time.sleep(0.01)
    raise AssertionError(f"no worker process under {pid}")
