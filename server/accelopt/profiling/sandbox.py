"""Running untrusted code in a locked-down worker process (the parent side).

Every kernel, candidate and reference module runs in `accelopt.profiling.worker`, started here:

- a fresh interpreter (``-s -P -B``: no user site, no script directory on the path, no bytecode
  writes; the environment, PYTHONHASHSEED included, is built here), importing accelopt from an
  explicit path, with address-space randomization off (`determinism`: no private randomness);
- an empty temporary working directory and HOME; an environment built from scratch (no keys,
  tokens, proxies or anything else inherited from the server);
- on Linux with bubblewrap, its own user, mount, PID, network and IPC namespaces, a read-only
  filesystem but its job folder, and a seccomp filter (`accelopt.profiling.isolation`,
  `accelopt.profiling.seccomp`); elsewhere, what `isolation.detect()` reports instead;
- its own session / process group, killed as a whole on timeout, cancellation or close (with a
  PID namespace, that takes every process the worker could have left behind with it);
- kernel-enforced resource limits (address space, CPU seconds, open files, file size, no new
  processes) applied by the worker before any untrusted code runs;
- inside the worker, the import/operation guard (`accelopt.profiling.guard`), a first filter.

The parent reads only bounded amounts back: the last bytes of the worker's stderr, and a trace
file no larger than `Sandbox.max_trace_bytes`.

Results come back as files the parent validates (`worker_protocol`), never as pickles. A crash,
hang or kill is a `WorkerOutcome`, not an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

import accelopt
from accelopt.nki.python_source import parse_lock
from accelopt.profiling import arrays, determinism, isolation, seccomp
from accelopt.profiling.worker_protocol import (
    DEFAULT_SCRATCH_BYTES,
    ArrayRef,
    ResourceLimits,
    WorkerJob,
    WorkerResult,
)

_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from accelopt.profiling.worker import main; raise SystemExit(main(sys.argv[2]))"
)
_NOBODY = isolation.NOBODY
_STDERR_TAIL = 1200
# A trace larger than this is refused unread: parsing and timing it could outlast the timeout.
DEFAULT_MAX_TRACE_BYTES = 32 << 20  # the largest NKIBench baseline (gqa_full, full size) records 25 MiB
# The status file is a few KiB (runs, array names, fingerprints, a probe's environment); a worker
# that pads it to its file-size limit (gigabytes) must not make the parent read it all.
MAX_STATUS_BYTES = 4 << 20
_ACCELOPT_ROOT = Path(accelopt.__file__).resolve().parent.parent


@dataclass
class WorkerOutcome:
    """How a worker run ended and, when it finished, what it produced (already validated)."""

    kind: Literal["finished", "timeout", "crashed"]
    result: WorkerResult | None = None
    message: str = ""
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    trace_json: str | None = None
    wall_time_s: float = 0.0

    def group(self, run: int, name: str) -> list[np.ndarray]:
        """The arrays of one named group of one run, with their real dtypes restored."""
        assert self.result is not None
        refs = self.result.runs[run].groups.get(name, [])
        return [
            arrays.from_transport(self.arrays[r.name], r.dtype)
            if r.stored
            else arrays.shape_only(r.shape, r.dtype)
            for r in refs
        ]


@dataclass
class JobFiles:
    """A prepared job directory (removed by `Sandbox.run` when the run is over)."""

    root: Path
    job: WorkerJob


class Sandbox:
    """Starts sandboxed workers and keeps track of them so that none outlives its owner."""

    def __init__(
        self,
        limits: ResourceLimits | None = None,
        *,
        isolate_network: bool = True,
        drop_privileges: bool = True,
        os_isolation: bool = True,
        python: str = sys.executable,
        work_root: str | Path | None = None,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    ) -> None:
        """`os_isolation=False` skips bubblewrap (tests use it to show what the OS layer adds);
        the fallback then is what it was before: `unshare --net` and, as root, `nobody`."""
        self.limits = limits or ResourceLimits()
        self.work_root = str(work_root) if work_root is not None else None
        self.isolate_network = isolate_network
        self.python = python
        self.max_trace_bytes = max_trace_bytes
        self.isolation = (
            isolation.detect(python)
            if os_isolation
            else isolation.Isolation("process", missing="disabled by the caller")
        )
        namespaced = self.isolation.kernel_enforced
        # As root, run workers as `nobody`, if `nobody` can run this interpreter at all (it cannot
        # when Python lives under a private home directory); see SECURITY.md.
        self.drop_privileges = (
            self.isolation.worker_is_nobody
            if namespaced
            else drop_privileges and os.geteuid() == 0 and _nobody_can_run(python)
        )
        self._live: set[asyncio.subprocess.Process] = set()

    # --- preparing a job -------------------------------------------------------------------

    def prepare(
        self,
        job: WorkerJob,
        inputs: dict[str, np.ndarray] | None = None,
        bundle: dict[str, np.ndarray] | None = None,
        *,
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
    ) -> JobFiles:
        """Write `job.json`, the input arrays (`in/<name>.npy`) and an optional bundle of arrays
        (`in/outputs.npz`, already in transport form) into a fresh directory. With `timeout_s`,
        the CPU-time limit is lowered to match it; `memory_bytes` replaces the address-space
        limit for this job (sized from the task, `worker_memory`)."""
        root = Path(tempfile.mkdtemp(prefix="accelopt-job-", dir=self.work_root))
        (root / "in").mkdir()
        isolation.prepare_job_folder(root, owner=_NOBODY if self.drop_privileges else None)
        for name, array in (inputs or {}).items():
            if isinstance(array, arrays.ShapeOnly):
                continue  # its shape is in the job (input_ref); nothing reads its values
            np.save(root / "in" / f"{name}.npy", arrays.to_transport(array), allow_pickle=False)
        if bundle is not None:
            # Typed loosely: numpy's stubs would match a `**` of arrays against its `allow_pickle`
            # flag, which older numpy (>= 1.24 is supported) does not have.
            named: dict[str, Any] = bundle
            np.savez(root / "in" / "outputs.npz", **named)
        limits = self.limits
        if timeout_s is not None:
            cpu = min(limits.cpu_seconds, math.ceil(timeout_s) + 1)
            limits = limits.model_copy(update={"cpu_seconds": cpu})
        if memory_bytes is not None:
            limits = limits.model_copy(update={"memory_bytes": memory_bytes})
        job = job.model_copy(
            update={
                "limits": limits,
                # Inside a PID namespace the parent is bubblewrap's init, which dies with us.
                "parent_pid": 0 if self.isolation.kernel_enforced else os.getpid(),
                "trusted_roots": _trusted_roots(),
                "read_roots": [*_trusted_roots(), str(root / "in")],
            }
        )
        (root / "job.json").write_text(job.model_dump_json(), encoding="utf-8")
        if self.drop_privileges:  # out/ and work/ were given to the worker's user above
            for path in [root / "in", *(root / "in").iterdir(), root / "job.json"]:
                path.chmod(0o755 if path.is_dir() else 0o644)
        return JobFiles(root, job)

    @staticmethod
    def input_ref(name: str, array: np.ndarray) -> ArrayRef:
        """Where `prepare` puts input `name`; a `ShapeOnly` input travels as its shape alone."""
        stored = not isinstance(array, arrays.ShapeOnly)
        return ArrayRef(
            name=f"in/{name}.npy", dtype=arrays.dtype_name(array), shape=array.shape, stored=stored
        )

    # --- running it ------------------------------------------------------------------------

    async def run(self, files: JobFiles, timeout_s: float) -> WorkerOutcome:
        """Run the prepared job; always removes its directory and its process group."""
        try:
            return await self._run(files, timeout_s)
        finally:
            await asyncio.shield(asyncio.to_thread(shutil.rmtree, files.root, ignore_errors=True))

    async def _run(self, files: JobFiles, timeout_s: float) -> WorkerOutcome:
        root = files.root
        started = time.perf_counter()
        # A kernel's print() output is discarded (a printing loop must not fill the disk);
        # stderr keeps the worker's own crash reports, bounded by the file-size limit.
        filter_read = -1
        try:
            with open(root / "stderr.txt", "wb") as err:
                if self.isolation.kernel_enforced:
                    filter_read = _seccomp_pipe()
                spawn = asyncio.ensure_future(
                    asyncio.create_subprocess_exec(
                        *self._command(root, filter_read, files.job.limits.scratch_bytes),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        cwd=root / "work",
                        env=_worker_environment(root / "work"),
                        start_new_session=True,
                        pass_fds=[filter_read] if filter_read != -1 else [],
                        **self._credentials(),
                    )
                )
                try:
                    proc = await asyncio.shield(spawn)
                except asyncio.CancelledError:
                    # Cancelled while the worker was being started: the fork may already have
                    # happened, and a worker nobody waits for would run on after the search.
                    await _end_spawned(spawn)
                    raise
        finally:
            if filter_read != -1:
                os.close(filter_read)
        self._live.add(proc)
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except asyncio.TimeoutError:
                timed_out = True
        finally:
            # Normal exit, timeout or cancellation: nothing of the group may survive.
            if proc.returncode is None and self.isolation.kernel_enforced:
                await asyncio.shield(_end_namespace(proc))
            _kill_group(proc.pid)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
            if self.isolation.kernel_enforced:
                await asyncio.shield(isolation.reap_orphaned_inits())
            self._live.discard(proc)
        wall = time.perf_counter() - started
        if timed_out:
            return WorkerOutcome(
                "timeout", message=f"timed out after {timeout_s:g} s (wall clock)", wall_time_s=wall
            )
        # Reading (possibly large) result files is blocking work: keep it off the event loop.
        return await asyncio.to_thread(self._collect, root, proc.returncode, wall, files.job.shapes_only)

    def run_sync(self, files: JobFiles, timeout_s: float) -> WorkerOutcome:
        return asyncio.run(self.run(files, timeout_s))

    async def aclose(self) -> None:
        """Kill every worker still running."""
        if self.isolation.kernel_enforced:
            await asyncio.gather(*(_end_namespace(proc) for proc in list(self._live)))
        for proc in list(self._live):
            _kill_group(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in list(self._live):
            await proc.wait()
        self._live.clear()

    @property
    def live_pids(self) -> list[int]:
        return [p.pid for p in self._live]

    def _command(
        self, root: Path, filter_fd: int = -1, scratch_bytes: int = DEFAULT_SCRATCH_BYTES
    ) -> list[str]:
        bootstrap = isolation.worker_prelude(self.isolation) + _BOOTSTRAP
        # `-s -P`, not `-I`: `-I` would ignore PYTHONHASHSEED (determinism.py); the environment
        # is built from nothing, so nothing else in it needs ignoring.
        worker = [self.python, *isolation.INTERPRETER_FLAGS, "-c", bootstrap, str(_ACCELOPT_ROOT), str(root)]
        if self.isolation.kernel_enforced:
            assert self.isolation.bwrap is not None
            # inside bubblewrap: the personality does not survive its set-up (determinism.py);
            # the prefix the isolation probe saw start an interpreter in this sandbox
            worker = [*self.isolation.fixed_layout, *worker]
            return isolation.command(
                self.isolation.bwrap,
                readable=[*isolation.interpreter_paths(self.python), *_trusted_roots()],
                job_root=root,
                seccomp_fd=filter_fd,
                worker=worker,
                drops_root_inside=self.isolation.drops_root_inside,
                scratch_bytes=scratch_bytes,
            )
        fixed = list(determinism.fixed_layout_prefix())
        prefix = _namespace_prefix(self.drop_privileges) if self.isolate_network else []
        if self.drop_privileges and not prefix:
            return fixed + worker  # privileges dropped by Popen's user/group below
        return [*fixed, *prefix, *worker]

    def _credentials(self) -> dict:
        if self.isolation.kernel_enforced:
            return isolation.spawn_credentials(self.isolation)
        if not self.drop_privileges:
            return {}
        if self.isolate_network and _namespace_prefix(True):
            return {}  # unshare --setuid/--setgid does it after entering the namespace
        return {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}

    # --- reading the results ----------------------------------------------------------------

    def _collect(
        self, root: Path, returncode: int | None, wall: float, shapes_only: bool = False
    ) -> WorkerOutcome:
        """The outcome of a finished worker; `shapes_only`: the job asked for its arrays' shapes
        only (any other job's result must store every array it names)."""
        if self.isolation.kernel_enforced and returncode is not None and 128 < returncode < 128 + 65:
            returncode = 128 - returncode  # bubblewrap reports a signal as 128 + its number
        if returncode == -signal.SIGXCPU:
            return WorkerOutcome("timeout", message="exceeded its CPU time limit", wall_time_s=wall)
        if returncode != 0:
            return WorkerOutcome("crashed", message=_crash_reason(returncode, root), wall_time_s=wall)
        try:
            status = _read_bounded(root / "out" / "status.json", MAX_STATUS_BYTES, "status file")
        except _TooLarge as exc:
            return WorkerOutcome(
                "crashed", message=f"the worker's result is invalid: {exc}", wall_time_s=wall
            )
        except (OSError, ValueError) as exc:
            return WorkerOutcome(
                "crashed", message=f"the worker left no valid result ({type(exc).__name__})", wall_time_s=wall
            )
        try:
            result = WorkerResult.model_validate_json(status)
        except (ValidationError, ValueError) as exc:
            return WorkerOutcome(
                "crashed", message=f"the worker left no valid result ({type(exc).__name__})", wall_time_s=wall
            )
        outcome = WorkerOutcome("finished", result=result, wall_time_s=wall)
        if result.failure is not None:
            return outcome
        try:
            outcome.arrays = _load_arrays(root / "out" / "arrays.npz", result, shapes_only)
            if result.has_trace:
                outcome.trace_json = _read_bounded(root / "out" / "trace.json", self.max_trace_bytes)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            return WorkerOutcome(
                "crashed", message=f"the worker's result files are invalid: {exc}", wall_time_s=wall
            )
        return outcome


def _load_arrays(path: Path, result: WorkerResult, shapes_only: bool = False) -> dict[str, np.ndarray]:
    """The arrays `result` declares, read from the worker's archive; nothing else in it is read.
    Each must be an uncompressed member whose `.npy` header says the declared shape, and what it
    holds must fit the member: a deflated member (a few KiB that inflate to gigabytes in this
    process) or a header promising more than the file has is refused before any data is read."""
    declared = sum(len(refs) for run in result.runs for refs in run.groups.values())
    _check_directory(path, declared)
    loaded: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, parse_lock():  # numpy parses each header
        for run in result.runs:
            for group, refs in run.groups.items():
                for ref in refs:
                    arrays.resolve_dtype(ref.dtype)
                    if not ref.stored:
                        if not (shapes_only and group == "inputs" and ref.shape):
                            raise ValueError(f"array {ref.name} was not stored")
                        continue
                    try:
                        member = archive.getinfo(f"{ref.name}.npy")
                    except KeyError:
                        raise KeyError(f"array {ref.name} is missing") from None
                    loaded[ref.name] = _read_member(archive, member, ref)
    return loaded


# What one member's entry in the archive's central directory may take: its fixed part (46 bytes),
# a name like `r12_out_3.npy` and the zip64 extra field the worker's writer adds.
_DIRECTORY_BYTES_PER_MEMBER = 512


def _check_directory(path: Path, declared: int) -> None:
    """Refuse an archive whose central directory is bigger than its declared arrays need, before
    `zipfile` reads it: it reads the whole directory into memory and makes an object per entry,
    so millions of empty entries would be gigabytes in this process. The worker's writer ends the
    archive with the plain end record (no comment), preceded by a zip64 locator when it has one."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 22:
            raise ValueError("the array archive is not a zip archive")
        f.seek(size - 22)
        end = f.read(22)
        if end[:4] != b"PK\x05\x06":
            raise ValueError("the array archive does not end with a zip directory record")
        entries, directory = int.from_bytes(end[10:12], "little"), int.from_bytes(end[12:16], "little")
        if size >= 42:
            f.seek(size - 42)
            locator = f.read(20)
            if locator[:4] == b"PK\x06\x07":  # zip64: the real figures are in the zip64 record
                f.seek(int.from_bytes(locator[8:16], "little"))
                record = f.read(56)
                if record[:4] != b"PK\x06\x06":
                    raise ValueError("the array archive's zip64 directory record is missing")
                entries, directory = (
                    int.from_bytes(record[32:40], "little"),
                    int.from_bytes(record[40:48], "little"),
                )
    if entries > declared or directory > _DIRECTORY_BYTES_PER_MEMBER * max(entries, 1):
        raise ValueError(
            f"the array archive lists {entries} members in a {directory}-byte directory; the result declares {declared}"
        )


def _read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, ref: ArrayRef) -> np.ndarray:
    if member.compress_type != zipfile.ZIP_STORED or member.compress_size != member.file_size:
        raise ValueError(f"array {ref.name} is stored compressed; the worker writes arrays uncompressed")
    with archive.open(member) as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"array {ref.name} has an .npy header of version {version}")
        if tuple(shape) != tuple(ref.shape):
            raise ValueError(f"array {ref.name} has shape {shape}, declared {ref.shape}")
        if dtype.hasobject or math.prod(shape) * dtype.itemsize > member.file_size:
            raise ValueError(f"array {ref.name} holds less data than its header says")
    with archive.open(member) as stream:
        return np.lib.format.read_array(stream, allow_pickle=False)


def _crash_reason(returncode: int | None, root: Path) -> str:
    if returncode is not None and returncode < 0:
        sig = -returncode
        names: dict[int, str] = {
            signal.SIGKILL: "killed (SIGKILL; out of memory?)",
            signal.SIGSEGV: "crashed with a segmentation fault",
            signal.SIGABRT: "aborted",
            signal.SIGBUS: "crashed with a bus error",
        }
        reason = names.get(
            sig,
            f"killed by signal {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}",
        )
    else:
        reason = f"exited with status {returncode}"
    tail = _tail(root / "stderr.txt")
    return f"the worker {reason}" + (f": {tail}" if tail else "")


class _TooLarge(ValueError):
    """A result file bigger than the parent reads."""


def _read_bounded(path: Path, limit: int, what: str = "trace") -> str:
    size = path.stat().st_size
    if size > limit:
        raise _TooLarge(f"the {what} is {size >> 20} MiB, more than the {limit >> 20} MiB the parent reads")
    return path.read_text(encoding="utf-8")


def _tail(path: Path) -> str:
    """The last line of the file's last bytes: never the whole file (a worker may write 1 GB)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _STDERR_TAIL))
            data = f.read(_STDERR_TAIL)
    except OSError:
        return ""
    lines = [ln for ln in data.decode("utf-8", "replace").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


async def _end_namespace(proc: asyncio.subprocess.Process) -> None:
    """Kill bubblewrap's child (the sandbox's init, whose death takes every process of the PID
    namespace with it) and let bubblewrap reap it, so that no zombie is left to the machine's
    init (which, in some containers, never reaps)."""
    for _ in range(40):  # bubblewrap may still be creating its child: look again until it exits
        _kill_children(proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), 0.05)
            return


def _kill_children(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


async def _end_spawned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Kill, and wait for, the worker a cancelled start may have left running."""
    try:
        proc = await asyncio.shield(spawn)
    except BaseException:  # it never started (or a second cancellation came): nothing to end
        return
    _kill_group(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await asyncio.shield(proc.wait())


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _worker_environment(home: Path) -> dict[str, str]:
    """Built from nothing: the worker inherits no variable of the server's environment."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    }


@functools.lru_cache(maxsize=1)
def _trusted_roots() -> list[str]:
    """Directories whose code the guard treats as trusted (and whose files the worker may read)."""
    paths = {str(Path(accelopt.__file__).resolve().parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(sysconfig.get_paths()[key])
    return sorted(paths)


@functools.lru_cache(maxsize=2)
def _namespace_prefix(as_root: bool) -> tuple[str, ...]:
    """The `unshare` command that gives the worker an empty network namespace, if it works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    prefix: tuple[str, ...]
    if as_root:
        prefix = (unshare, "--net", "--setgid", str(_NOBODY), "--setuid", str(_NOBODY), "--")
    else:
        prefix = (unshare, "--user", "--map-root-user", "--net", "--")
    try:
        probe = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if probe.returncode == 0 else ()


@functools.lru_cache(maxsize=4)
def _nobody_can_run(python: str) -> bool:
    probe = [
        python,
        "-I",
        "-B",
        "-c",
        f"import sys; sys.path.insert(0, {str(_ACCELOPT_ROOT)!r}); import numpy, accelopt",
    ]
    try:
        done = subprocess.run(
            probe,
            capture_output=True,
            timeout=30,
            check=False,
            user=_NOBODY,
            group=_NOBODY,
            extra_groups=[],
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _seccomp_pipe() -> int:
    """A pipe holding the seccomp program, for bubblewrap's `--seccomp FD` (the read end)."""
    program = seccomp.build()
    read, write = os.pipe()
    try:
        os.write(write, program)  # a few hundred bytes: far below the pipe's buffer
    finally:
        os.close(write)
    return read


def network_isolation_available() -> bool:
    return isolation.detect().kernel_enforced or bool(_namespace_prefix(os.geteuid() == 0))
