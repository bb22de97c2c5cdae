"""Workers are deterministic: a kernel gets no private source of randomness.

A kernel that can draw a random bit per process can cheat by chance instead of by shape: honest
in the check run and the mirror run of a split evaluation, skipping work in the timing run, one
time in a few. Each of those runs is its own worker, so a per-process bit is all it takes, and a
search that evaluates many candidates would sooner or later rank such a fake. Two sources are
open to plain Python without any import the policy refuses:

- `hash()` of a str or bytes, salted per interpreter unless PYTHONHASHSEED is fixed. The worker
  sets it (`sandbox._worker_environment`), and so cannot run under `-I`, which implies `-E` and
  ignores every PYTHON* variable: it runs under `-s -P` instead (no user site, no script
  directory on the path) in an environment built from nothing, which is what `-E` protected;
- `id()` (and `repr()` of an object), an address, randomized by ASLR. `setarch -R` starts the
  worker with the ADDR_NO_RANDOMIZE personality, which its children inherit through bubblewrap.

With both fixed, a worker's behaviour is a function of its job: what it can still tell apart is
what the job differs in (values present or not, which the mirror run covers, and the shape:
SECURITY.md "Known gaps"). ASLR only hardens memory-corruption exploits of the interpreter, and
native code inside the worker meets the operating-system boundary anyway (SECURITY.md).
"""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess


@functools.lru_cache(maxsize=1)
def fixed_layout_prefix() -> tuple[str, ...]:
    """The command prefix that starts a process with address-space randomization off, if this
    machine has one that works (Linux's `setarch`; a container may refuse the personality)."""
    setarch = shutil.which("setarch")
    if setarch is None or platform.system() != "Linux":
        return ()
    prefix = (setarch, platform.machine(), "-R")
    try:
        probe = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if probe.returncode == 0 else ()


def inside_sandbox_prefix(*, drops_root_inside: bool, nobody: int) -> list[str]:
    """What bubblewrap runs before the interpreter. A root process keeping capabilities loses the
    personality again when it executes the interpreter (the kernel clears it on an exec that
    changes privileges), so when bubblewrap runs as root (`isolation.Isolation.drops_root_inside`)
    `setpriv` gives root up first and `setarch` runs as `nobody`; the worker's own drop
    (`isolation.ROOT_DROP_PRELUDE`) then finds it done and only checks it."""
    fixed = list(fixed_layout_prefix())
    if not fixed or not drops_root_inside:
        return fixed
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []  # the personality would not survive: the worker drops root itself
    return [setpriv, f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", *fixed]
