"""The operating system's layer on its own: attacks run in a real worker with *both* Python layers
off (no static check, no runtime guard: as if each had a hole), and bubblewrap's namespaces plus
the seccomp filter still contain them. One test per class of escape the red team found.

Each test asserts on an effect outside the sandbox (a canary file, a socket that received nothing,
no surviving process), so it fails when the OS layer is missing (`Sandbox(os_isolation=False)`)."""

from __future__ import annotations

import os
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest

import accelopt
from accelopt.profiling.isolation import detect
from accelopt.profiling.sandbox import Sandbox, WorkerOutcome
from accelopt.profiling.worker_protocol import ResourceLimits, WorkerJob
from adversarial.unguarded import run_unguarded

pytestmark = pytest.mark.skipif(
    not detect().kernel_enforced,
    reason=f"needs OS isolation, which this machine lacks: {detect().missing}",
)

REPO = Path(accelopt.__file__).resolve().parents[2]


@pytest.fixture
def sandbox(jobs_dir) -> Sandbox:
    return Sandbox(ResourceLimits(memory_bytes=1 << 30, cpu_seconds=30), work_root=jobs_dir)


def failure_message(outcome: WorkerOutcome) -> str:
    assert outcome.kind == "finished" and outcome.result is not None, outcome.message
    return outcome.result.failure.message if outcome.result.failure else ""


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_the_users_files_are_invisible_and_unwritable(sandbox, tmp_path):
    """Read a secret beside the tool, write a canary into the user's folder and plant a `.pth`
    file in the tool's own virtual environment (it would run on the next start)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    canary = tmp_path / "canary.txt"
    planted = Path(sys.prefix) / f"accelopt-planted-{uuid.uuid4().hex}.pth"
    code = (
        "import os\n"
        "seen = []\n"
        f"for path in [{str(secret)!r}, {str(REPO / 'pyproject.toml')!r}, os.path.expanduser('~root/.bashrc')]:\n"
        "    try:\n"
        "        seen.append(open(path).read()[:10])\n"
        "    except OSError as exc:\n"
        "        seen.append(type(exc).__name__)\n"
        f"for path in [{str(canary)!r}, {str(planted)!r}]:\n"
        "    try:\n"
        "        open(path, 'w').write('import os')\n"
        "    except OSError as exc:\n"
        "        seen.append(type(exc).__name__)\n"
        "raise RuntimeError(repr(seen))\n"
    )
    try:
        message = failure_message(run_unguarded(sandbox, code))
    finally:
        planted.unlink(missing_ok=True)
        assert not canary.exists() and "planted" not in " ".join(os.listdir(sys.prefix))
    assert "s3cr3t" not in message and "[project]" not in message
    assert message.count("FileNotFoundError") >= 3, message


def test_the_job_folder_is_the_only_writable_place(sandbox):
    code = (
        "import os, sys\n"
        "outcome = {}\n"
        "for path in ['/', '/usr', sys.prefix, os.path.dirname(os.__file__), '/tmp', '/dev/shm', '.']:\n"
        "    try:\n"
        "        open(os.path.join(path, 'probe-file'), 'w').close()\n"
        "        outcome[path] = 'written'\n"
        "    except OSError as exc:\n"
        "        outcome[path] = type(exc).__name__\n"
        "raise RuntimeError(repr(outcome))\n"
    )
    message = failure_message(run_unguarded(sandbox, code))
    assert message.count("written") == 1 and "'.': 'written'" in message, message


def test_what_the_worker_writes_is_bounded_in_total_not_only_per_file(jobs_dir):
    """RLIMIT_FSIZE caps each file; many files under it used to fill the host's disk. The scratch
    folder is a tmpfs of `scratch_bytes`, and no new file can appear beside the result files."""
    limits = ResourceLimits(memory_bytes=1 << 30, cpu_seconds=30, scratch_bytes=4 << 20)
    small = Sandbox(limits, work_root=jobs_dir)
    code = (
        "import os\n"
        "seen = {}\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(64):\n"
        "        with open(f'scratch-{i}', 'wb') as f:\n"
        "            f.write(b'x' * (1 << 20))\n"
        "        written += 1\n"
        "except OSError as exc:\n"
        "    seen['scratch'] = type(exc).__name__\n"
        "seen['written'] = written\n"
        "for path in ['../out/extra.bin', '../extra.bin', '../in/extra.bin']:\n"
        "    try:\n"
        "        open(path, 'wb').close()\n"
        "        seen[path] = 'written'\n"
        "    except OSError as exc:\n"
        "        seen[path] = type(exc).__name__\n"
        "raise RuntimeError(repr(seen))\n"
    )
    message = failure_message(run_unguarded(small, code))
    assert "'scratch': 'OSError'" in message, message  # ENOSPC once the 4 MiB are used
    written = int(message.split("'written': ")[1].split(",")[0].split("}")[0])
    assert 1 <= written <= 4, message
    assert "written'" not in message.replace("'written':", ""), message


@pytest.mark.parametrize(
    "spawn",
    [
        "pid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(30)\n    os._exit(0)\n",
        "libc = ctypes.CDLL(None)\nif libc.fork() == 0:\n    libc.setsid()\n    time.sleep(30)\n    os._exit(0)\n",
        "subprocess.Popen(['/bin/sh', '-c', 'sleep 30 # MARKER'], start_new_session=True)\n",
    ],
    ids=["os-fork-setsid", "ctypes-fork-setsid", "popen-no-deathsig"],
)
def test_no_process_outlives_the_worker(sandbox, spawn):
    """The process-group kill missed a child that called setsid(); root ignores RLIMIT_NPROC;
    children got no parent-death signal. Now process creation fails in the kernel (seccomp), and
    the PID namespace would take any survivor with it."""
    marker = f"accelopt-orphan-{uuid.uuid4().hex}"
    code = "import ctypes, os, subprocess, time\n" + spawn.replace("MARKER", marker)
    outcome = run_unguarded(sandbox, code)
    message = failure_message(outcome)
    assert "PermissionError" in message or "Operation not permitted" in message or message == "", message
    assert processes_mentioning(marker) == []
    assert processes_mentioning(sandbox.work_root or "accelopt-job-") == []


def test_no_socket_reaches_a_unix_socket_on_the_filesystem(sandbox, tmp_path):
    """A secret sent to a listening Unix socket outside (the network namespace never covered those)."""
    path = str(tmp_path / "listener.sock")
    received: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(10)

    def accept() -> None:
        try:
            conn, _ = server.accept()
            received.append(conn.recv(100))
            conn.close()
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        f"s.connect({path!r})\n"
        "s.sendall(b'stolen-secret')\n"
    )
    try:
        message = failure_message(run_unguarded(sandbox, code))
    finally:
        server.close()
        listener.join()
    assert received == [] and "PermissionError" in message, message


def test_no_device_node_fifo_or_database_outside(sandbox, tmp_path):
    """`os.mknod`, `os.mkfifo` and `sqlite3` write with no audit event; the kernel refuses them."""
    database = tmp_path / "stolen.db"
    code = (
        "import os, sqlite3\n"
        "seen = []\n"
        "for make in (lambda: os.mkfifo('fifo'), lambda: os.mknod('node'),\n"
        f"             lambda: sqlite3.connect({str(database)!r}).execute('create table t(x)')):\n"
        "    try:\n"
        "        make()\n"
        "        seen.append('made')\n"
        "    except Exception as exc:\n"
        "        seen.append(type(exc).__name__)\n"
        "raise RuntimeError(repr(seen))\n"
    )
    message = failure_message(run_unguarded(sandbox, code))
    assert "made" not in message, message
    assert not database.exists()


def _outside(uid: int, uid_map: list[str]) -> int:
    """`uid` of a process in a user namespace whose `/proc/self/uid_map` reads `uid_map`, as the
    parent namespace knows it."""
    for at in range(0, len(uid_map), 3):
        inside, outside, count = (int(v) for v in uid_map[at : at + 3])
        if inside <= uid < inside + count:
            return outside + uid - inside
    raise AssertionError(f"uid {uid} is not mapped: {uid_map}")


def test_the_sandbox_seen_from_inside(sandbox):
    outcome = sandbox.run_sync(
        sandbox.prepare(WorkerJob(mode="probe", policy="kernel", source="", source_path="<probe>")), 30
    )
    assert outcome.result is not None and outcome.result.probe is not None
    probe = outcome.result.probe
    assert probe["uid"] == 65534 and probe["gid"] == 65534
    assert probe["groups"] in ([], [65534])
    # The same uid as the machine sees it, through the worker's uid map: never root, even when
    # the tool runs as root (then bubblewrap runs as `nobody`, or the worker gives root up).
    assert _outside(probe["uid"], probe["uid_map"]) == (65534 if os.geteuid() == 0 else os.geteuid())
    assert probe["seccomp"] == "2" and probe["no_new_privs"] == "1"
    assert int(probe["capabilities"], 16) == 0 and int(probe["permitted_capabilities"], 16) == 0
    assert probe["pid"] <= 3  # bubblewrap's init is 1 in the worker's own PID namespace
    assert probe["network_interfaces"] == ["lo"]


def test_honest_numpy_runs_and_no_thread_starts_under_a_real_uid(sandbox):
    """The worker is uid 65534 as the machine sees it, so `RLIMIT_NPROC = 0` holds for it (root
    was exempt): not even a thread starts, while numpy's own work runs. (That the seccomp filter
    alone lets the C library start threads is tested in tests/profiling/test_seccomp.py.)"""
    code = (
        "import threading\n"
        "total = int(np.ones(3).sum())\n"
        "try:\n"
        "    threading.Thread(target=lambda: None).start()\n"
        "    started = 'started'\n"
        "except RuntimeError as exc:\n"
        "    started = str(exc)\n"
        "raise RuntimeError(f'numpy {total}, thread {started}')\n"
    )
    assert "numpy 3, thread can't start new thread" in failure_message(run_unguarded(sandbox, code))
