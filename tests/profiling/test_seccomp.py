"""The generated seccomp filter, installed in a real process: what it refuses and what it keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import accelopt
from accelopt.profiling import seccomp

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and seccomp.supported()), reason="seccomp is Linux-only"
)

_PROBE = r"""
import ctypes, errno, json, os, socket, sys, threading
sys.path.insert(0, sys.argv[1])
from accelopt.profiling import seccomp
seccomp.install(seccomp.build(exec_allowed=sys.argv[2] == "exec"))
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
def attempt(name, call):
    try:
        result = call()
        seen[name] = "allowed" if result is None or result >= 0 else errno.errorcode[ctypes.get_errno()]
    except OSError as exc:
        seen[name] = errno.errorcode.get(exc.errno, str(exc.errno))
attempt("fork", lambda: os.fork() and 0)
attempt("socket_unix", lambda: socket.socket(socket.AF_UNIX).close())
attempt("socket_inet", lambda: socket.socket(socket.AF_INET).close())
attempt("socketpair", lambda: socket.socketpair() and None)
attempt("mkfifo", lambda: os.mkfifo("fifo-should-not-exist"))
attempt("ptrace", lambda: libc.ptrace(0, 0, 0, 0))  # PTRACE_TRACEME
attempt("unshare", lambda: libc.unshare(0x10000000))  # CLONE_NEWUSER
attempt("clone_process", lambda: libc.syscall(56, 17, 0, 0, 0, 0))  # clone(SIGCHLD): a fork
attempt("personality_query", lambda: libc.personality(0xFFFFFFFF))
attempt("personality_other", lambda: libc.personality(0x0008))  # PER_LINUX32
attempt("personality_fixed_layout", lambda: libc.personality(0x0040000))  # ADDR_NO_RANDOMIZE
box = []
thread = threading.Thread(target=lambda: box.append(1))
thread.start(); thread.join()
seen["thread"] = "allowed" if box == [1] else "failed"
if sys.argv[2] == "noexec":
    attempt("exec", lambda: os.execv("/bin/true", ["/bin/true"]))
print(json.dumps(seen))
"""


def _run(mode: str, tmp_path) -> dict[str, str]:
    root = str(Path(accelopt.__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-I", "-c", _PROBE, root, mode], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_processes_sockets_nodes_and_tracing_are_refused_threads_are_not(tmp_path):
    seen = _run("noexec", tmp_path)
    refused = ["fork", "socket_unix", "socket_inet", "socketpair", "mkfifo", "ptrace", "unshare",
               "clone_process", "exec", "personality_query", "personality_other",
               "personality_fixed_layout"]  # fmt: skip
    assert {name: seen[name] for name in refused} == dict.fromkeys(refused, "EPERM")
    assert seen["thread"] == "allowed"
    assert not (tmp_path / "fifo-should-not-exist").exists()


def test_the_filter_bubblewrap_installs_lets_the_worker_start(tmp_path):
    """bubblewrap installs the filter just before it execs the interpreter, so exec stays open
    in that copy; the worker closes it with its own copy once it runs."""
    seen = _run("exec", tmp_path)
    assert seen["fork"] == "EPERM" and seen["thread"] == "allowed" and "exec" not in seen
    # `setarch -R` may read the personality and switch address-space randomization off, nothing else
    assert seen["personality_query"] == seen["personality_fixed_layout"] == "allowed"
    assert seen["personality_other"] == "EPERM"


def test_the_program_is_well_formed():
    program = seccomp.build()
    assert len(program) % 8 == 0 and 0 < len(program) // 8 < 4096  # the kernel's BPF_MAXINSNS
    assert seccomp.build(exec_allowed=False) != program
