"""Operating-system isolation for the sandboxed worker: what this machine offers, and the command.

On Linux with bubblewrap (`bwrap`, Debian package `bubblewrap`) and user namespaces, every worker
runs in its own user, mount, PID, network, IPC and UTS namespaces:

- as uid/gid 65534 inside its user namespace, with no capabilities and no-new-privileges;
- on a filesystem that holds only the system's `/usr` (and its `/lib*` links), `ld.so.cache`, the
  Python installation, the accelopt package and the job folder, all read-only except the job's
  `out/` and `work/`; a private `/proc` and a minimal `/dev`; nothing of the user's home, the
  repository or the virtual environment is writable, and nothing else of them is visible;
- with an empty network namespace and the seccomp filter of `accelopt.profiling.seccomp` (no
  process creation but threads, no sockets of any family, no `mknod`, no `ptrace`, ...);
- as one PID namespace whose init is bubblewrap: when it dies (the worker ended, or the parent
  killed the group), the kernel kills every process left in the namespace.

When the server runs as root, bubblewrap itself runs as `nobody` if `nobody` can execute the
interpreter, so the worker's uid outside its namespace is not root either. Otherwise (e.g. Python
under `/root`, unreadable by `nobody` on the host) bubblewrap runs as root without a user
namespace, sets up the other namespaces and the read-only root (where the directories above the
bound paths are its own, world-readable), keeps only the capabilities to change uid and gid, and
the worker's first statement gives up root for uid/gid 65534 for good, before it reads its job:
a real non-root uid outside too (see SECURITY.md).

Where bubblewrap or user namespaces are missing (macOS, a locked-down kernel), `detect()` says
what is missing, and the sandbox falls back to the process-level limits and, when `unshare`
works, a network namespace; the tool prints that at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from accelopt.profiling import determinism, seccomp
from accelopt.profiling.worker_protocol import DEFAULT_SCRATCH_BYTES

NOBODY = 65534
# How every worker's interpreter starts, the isolation probe's too: no user site, no script
# directory on sys.path, no bytecode writes (`-I` minus `-E`, which would ignore the fixed
# PYTHONHASHSEED: determinism.py; the environment is built from nothing instead).
INTERPRETER_FLAGS = ("-s", "-P", "-B")
_SYSTEM_DIRS = ("/usr",)
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)

IsolationKind = Literal["namespaces", "network-only", "process"]


@dataclass(frozen=True)
class Isolation:
    """What the worker gets on this machine, in words a user can act on."""

    kind: IsolationKind
    bwrap: str | None = None
    bwrap_as_nobody: bool = False
    # root: bubblewrap runs privileged (no user namespace) and the worker drops to 65534 itself
    drops_root_inside: bool = False
    missing: str = ""
    # what runs before the interpreter inside bubblewrap to switch address-space randomization
    # off (determinism.py); empty when this machine refused it inside the sandbox, where a
    # prefix that only worked outside would stop every worker from starting
    fixed_layout: tuple[str, ...] = ()

    @property
    def worker_is_nobody(self) -> bool:
        """The worker runs as uid 65534 on the machine too, so its job folder must be readable
        by everyone and its `out/` and `work/` owned by 65534."""
        return self.bwrap_as_nobody or self.drops_root_inside

    @property
    def kernel_enforced(self) -> bool:
        return self.kind == "namespaces"

    def describe(self) -> str:
        if self.kind == "namespaces":
            if self.drops_root_inside:
                return (
                    "sandbox: OS isolation on (bubblewrap: mount, PID, network and IPC namespaces, "
                    "read-only filesystem but the job folder, seccomp filter, uid 65534: root is "
                    "given up inside before the job is read)"
                )
            return (
                "sandbox: OS isolation on (bubblewrap: user, mount, PID, network and IPC namespaces, "
                "read-only filesystem but the job folder, seccomp filter, uid 65534 outside its "
                "namespace too)"
            )
        base = "sandbox: OS isolation OFF"
        net = "; network namespace only" if self.kind == "network-only" else ""
        return (
            f"{base} ({self.missing}){net}. Kernels run with resource limits and the Python-level "
            "guard only, which is a tripwire, not a boundary: see SECURITY.md"
        )


def system_binds() -> list[str]:
    """bubblewrap arguments for the read-only system part of the worker's filesystem."""
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _SYSTEM_FILES:
        if os.path.isfile(path):
            args += ["--ro-bind", path, path]
    return args


def open_parent_dirs(arguments: list[str]) -> list[str]:
    """`--perms 0755 --dir` for each directory above a mount point in `arguments` that is not
    itself inside one: bubblewrap would create them mode 0700 and owned by root, which only a
    worker that is root outside can cross (the one that gives root up could not reach its own
    package)."""
    mounts = [
        arguments[at + 2] for at, arg in enumerate(arguments) if arg in ("--ro-bind", "--bind", "--symlink")
    ]
    inside = [m.rstrip(os.sep) + os.sep for m in mounts]
    parents: set[str] = set()
    for mount in mounts:
        for parent in Path(mount).parents:
            text = str(parent)
            if text != os.sep and not any(text.startswith(m) for m in inside) and text not in mounts:
                parents.add(text)
    args: list[str] = []
    for path in sorted(parents, key=lambda p: (p.count(os.sep), p)):
        args += ["--perms", "0755", "--dir", path]
    return args


def read_only_binds(paths: Iterable[str]) -> list[str]:
    """`--ro-bind` for each path not already inside /usr or another path of the list (under the
    path the process uses and, when a symlink leads elsewhere, under the resolved one too)."""
    wanted: set[str] = set()
    for path in paths:
        if os.path.exists(path):
            wanted |= {os.path.abspath(path), os.path.realpath(path)}
    kept: list[str] = []
    for path in sorted(wanted, key=lambda p: (p.count(os.sep), p)):
        covered = [*_SYSTEM_DIRS, *kept]
        if any(path == c or path.startswith(c.rstrip(os.sep) + os.sep) for c in covered):
            continue
        kept.append(path)
    args: list[str] = []
    for path in kept:
        args += ["--ro-bind", path, path]
    return args


# The worker's first statement when bubblewrap ran as root (`Isolation.drops_root_inside`):
# supplementary groups, then gid, then uid, all three ids each; from a nonzero uid the kernel
# clears the remaining capabilities. Any failure ends the worker before it reads its job.
ROOT_DROP_PRELUDE = (
    f"import os\nif os.getresuid() != ({NOBODY},) * 3 or os.getgroups():\n"
    f"    os.setgroups([]); os.setresgid({NOBODY}, {NOBODY}, {NOBODY}); "
    f"os.setresuid({NOBODY}, {NOBODY}, {NOBODY})\n"
    f"assert os.getresuid() == ({NOBODY},) * 3 and os.getresgid() == ({NOBODY},) * 3 and not os.getgroups()\n"
)


# The files the worker writes its results into (worker.py opens them before any untrusted code
# runs). The parent creates them, and they are the only host files the sandbox can write.
OUTPUT_FILES = ("status.json", "arrays.npz", "trace.json")


def command(
    bwrap: str,
    *,
    readable: Iterable[str],
    job_root: Path,
    seccomp_fd: int,
    worker: list[str],
    drops_root_inside: bool = False,
    scratch_bytes: int = DEFAULT_SCRATCH_BYTES,
) -> list[str]:
    """The full bubblewrap command line that runs `worker` for the job in `job_root`. With
    `drops_root_inside` (bubblewrap started as root), there is no user namespace and only
    CAP_SETUID/CAP_SETGID are kept, for the worker's `ROOT_DROP_PRELUDE`.

    What the worker can write is bounded in total, not only per file (RLIMIT_FSIZE): the job
    folder and `out/` are read-only, the three `OUTPUT_FILES` are bound writable one by one (no
    new file can be created beside them), and `work/` is a private tmpfs of `scratch_bytes`, gone
    with the sandbox. A code path that escaped the Python layers can therefore not fill the
    host's disk with many files."""
    root = str(job_root)
    outputs: list[str] = []
    for name in OUTPUT_FILES:
        outputs += ["--bind", f"{root}/out/{name}", f"{root}/out/{name}"]
    mounts = [
        *system_binds(),
        *read_only_binds(readable),
        "--ro-bind",
        root,
        root,
        *outputs,
        "--size",
        str(scratch_bytes),
        "--perms",
        "0777",  # bubblewrap makes it root's; a worker that drops root must still write there
        "--tmpfs",
        f"{root}/work",
    ]
    identity = (
        ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if drops_root_inside
        else ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    )
    return [
        bwrap,
        *identity,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        *open_parent_dirs(mounts),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *mounts,
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        f"{root}/work",
        "--seccomp",
        str(seccomp_fd),
        "--",
        *worker,
    ]


def interpreter_paths(python: str) -> list[str]:
    """What the worker's interpreter needs to read: its installation and its environment."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    exe = Path(python)
    paths.add(str(exe.parent.parent))
    paths.add(str(exe.resolve().parent.parent))
    return sorted(paths)


def detect(python: str = sys.executable) -> Isolation:
    """Probe (once per interpreter) whether bubblewrap can run `python` in the full sandbox.
    From the first call on, this process reaps the sandboxes' orphaned inits (`become_subreaper`)."""
    become_subreaper()
    return _detect(python)


@functools.lru_cache(maxsize=4)
def _detect(python: str) -> Isolation:
    if not sys.platform.startswith("linux"):
        return Isolation("process", missing=f"no Linux namespaces on {sys.platform}")
    if not seccomp.supported():
        return _fallback("no seccomp syscall table for this CPU architecture")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return _fallback("bubblewrap is not installed: apt-get install bubblewrap")
    as_root = os.geteuid() == 0
    if as_root and _probe(bwrap, python, Isolation("namespaces", bwrap_as_nobody=True)) is None:
        return _with_fixed_layout(bwrap, python, Isolation("namespaces", bwrap=bwrap, bwrap_as_nobody=True))
    if as_root and _probe(bwrap, python, Isolation("namespaces", drops_root_inside=True)) is None:
        return _with_fixed_layout(bwrap, python, Isolation("namespaces", bwrap=bwrap, drops_root_inside=True))
    problem = _probe(bwrap, python, Isolation("namespaces"))
    if problem is not None:
        return _fallback(f"bubblewrap cannot start a sandbox here: {problem}")
    return _with_fixed_layout(bwrap, python, Isolation("namespaces", bwrap=bwrap))


def _with_fixed_layout(bwrap: str, python: str, mode: Isolation) -> Isolation:
    """`mode` with the fixed-layout prefix its workers will run, if the prefix starts the
    interpreter inside this very sandbox (a machine can allow the personality outside bubblewrap
    and refuse it inside); else `mode` as it is: workers still start, only `id()` varies."""
    prefix = tuple(determinism.inside_sandbox_prefix(drops_root_inside=mode.drops_root_inside, nobody=NOBODY))
    if prefix and _probe(bwrap, python, mode, prefix=prefix) is None:
        return replace(mode, fixed_layout=prefix)
    return mode


def prepare_job_folder(root: Path, owner: int | None) -> None:
    """`out/` with its empty `OUTPUT_FILES` and `work/` in a fresh job folder `root`; with `owner`,
    the folder becomes world-readable and what the worker writes belongs to that uid/gid."""
    (root / "out").mkdir()
    (root / "work").mkdir()
    for name in OUTPUT_FILES:
        (root / "out" / name).touch()
    if owner is not None:
        root.chmod(0o755)
        for path in [root / "out", root / "work", *(root / "out" / name for name in OUTPUT_FILES)]:
            os.chown(path, owner, owner)


def worker_prelude(isolation: Isolation) -> str:
    """Python the worker runs before anything else (giving up root when bubblewrap could not)."""
    return ROOT_DROP_PRELUDE if isolation.drops_root_inside else ""


def spawn_credentials(isolation: Isolation) -> dict:
    """`subprocess`/`asyncio` keyword arguments that start bubblewrap as `nobody` when wanted."""
    if isolation.bwrap_as_nobody:
        return {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    return {}


def _probe(bwrap: str, python: str, mode: Isolation, prefix: tuple[str, ...] = ()) -> str | None:
    """Run `python -c pass` (after `prefix`) in the sandbox `mode` describes; None when it worked,
    else bubblewrap's complaint."""
    with tempfile.TemporaryDirectory(prefix="accelopt-probe-") as tmp:
        root = Path(tmp)
        prepare_job_folder(root, owner=NOBODY if mode.worker_is_nobody else None)
        read, write = os.pipe()
        try:
            os.write(write, seccomp.build())
            os.close(write)
            write = -1
            args = command(
                bwrap,
                readable=interpreter_paths(python),
                job_root=root,
                seccomp_fd=read,
                worker=[*prefix, python, *INTERPRETER_FLAGS, "-c", worker_prelude(mode) + "pass"],
                drops_root_inside=mode.drops_root_inside,
            )
            extra = spawn_credentials(mode)
            done = subprocess.run(
                args, pass_fds=[read], capture_output=True, timeout=30, check=False, cwd="/", **extra
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        finally:
            os.close(read)
            if write != -1:
                os.close(write)
    reap_orphaned_inits_now()
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _fallback(missing: str) -> Isolation:
    unshare = shutil.which("unshare")
    if unshare is not None:
        prefix = (
            [unshare, "--net", "--"]
            if os.geteuid() == 0
            else [unshare, "--user", "--map-root-user", "--net", "--"]
        )
        try:
            probe = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=10, check=False)
            if probe.returncode == 0:
                return Isolation("network-only", missing=missing)
        except (OSError, subprocess.SubprocessError):
            pass
    return Isolation("process", missing=missing)


# --- the sandboxes' inits --------------------------------------------------------------------
#
# bubblewrap's monitor exits as soon as it has the worker's exit status, sometimes before its
# child, the PID namespace's init, is reaped; that init is then an orphan. It goes to the nearest
# "child subreaper" above it, else to the machine's pid 1, which in some containers never reaps.
# So this process is a subreaper and reaps exactly those orphans: zombie children that live in a
# PID namespace below ours (a process this one started itself never does).


@functools.lru_cache(maxsize=1)
def become_subreaper() -> bool:
    pr_set_child_subreaper = 36
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
    return False


def reap_orphaned_inits_now() -> int:
    """Reap the orphaned sandbox inits that are zombies; return how many are still exiting."""
    exiting = 0
    for pid, state in _children_in_nested_pid_namespaces():
        if state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        else:
            exiting += 1
    return exiting


async def reap_orphaned_inits(patience_s: float = 1.0) -> None:
    """Reap them, waiting up to `patience_s` for those still exiting."""
    for _ in range(max(1, int(patience_s / 0.01))):
        if reap_orphaned_inits_now() == 0:
            return
        await asyncio.sleep(0.01)


def _children_in_nested_pid_namespaces() -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                children = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        for child in children:
            try:
                with open(f"/proc/{child}/status", encoding="ascii", errors="replace") as f:
                    fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            except OSError:
                continue
            if len(fields.get("NSpid", "").split()) > 1:  # a pid in a namespace below ours too
                found.append((child, fields.get("State", "").split()[0] if fields.get("State") else ""))
    return found
