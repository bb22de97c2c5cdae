"""The worker's system-call filter: a classic-BPF seccomp program, generated here.

The filter is what makes "no new processes, no sockets, no device nodes, no debugging of other
processes" a property of the kernel rather than of Python: whatever the untrusted code reaches
(ctypes, a C extension, an escaped `os`), the system call returns `EPERM`.

It is built by hand rather than with libseccomp because Debian's binding (`python3-seccomp`) is
tied to the system Python, not to the interpreter the tool runs on; the program is small (one
comparison per refused call, plus the `clone` flag test), and `tests/profiling/test_seccomp.py`
runs it in a real process. The format is the kernel's `struct sock_filter` array
(linux/filter.h) over `struct seccomp_data` (linux/seccomp.h), which bubblewrap installs with
`--seccomp FD` and `install()` installs with `prctl(PR_SET_SECCOMP)`.

What it refuses:
- process creation: `fork`, `vfork`, `clone` without `CLONE_THREAD` or with any namespace flag,
  and `clone3` (answered with `ENOSYS`, so the C library falls back to `clone` for threads);
- sockets of every family: `socket`, `socketpair` (so no Unix socket on the filesystem either);
- device nodes and FIFOs: `mknod`, `mknodat`;
- other processes and the kernel's own state: `ptrace`, `process_vm_readv/writev`, `kcmp`,
  `pidfd_getfd`, `unshare`, `setns`, the mount family, `chroot`, `pivot_root`, `bpf`,
  `perf_event_open`, `userfaultfd`, keyrings, module loading, `kexec`, `io_uring`, `personality`
  (but, before the worker starts, reading it and switching address-space randomization off:
  `determinism.py`), `open_by_handle_at`;
- with `exec=False` (installed by the worker itself once it has started), `execve`/`execveat`.
Any other architecture than the one the filter was built for (e.g. 32-bit calls on x86-64) kills
the process.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from dataclasses import dataclass

# BPF instruction classes and fields (linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# seccomp return values (linux/seccomp.h)
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# offsets in struct seccomp_data
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # args[0], low 32 bits (little-endian machines only, which both tables are)

CLONE_THREAD = 0x00010000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_X32_BIT = 0x40000000

# personality(2) arguments: 0xffffffff reads the current one; PER_LINUX | ADDR_NO_RANDOMIZE
PERSONALITY_QUERY = 0xFFFFFFFF
PERSONALITY_FIXED_LAYOUT = 0x0040000


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    syscalls: dict[str, int]
    has_x32: bool = False


# Numbers from the kernel's syscall tables: arch/x86/entry/syscalls/syscall_64.tbl and
# include/uapi/asm-generic/unistd.h (arm64).
_X86_64 = _Arch(
    audit_arch=0xC000003E,
    has_x32=True,
    syscalls={
        "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
        "socket": 41, "socketpair": 53, "mknod": 133, "mknodat": 259,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "pidfd_getfd": 438, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "add_key": 248, "request_key": 249, "keyctl": 250,
        "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "kexec_file_load": 320,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "personality": 135, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
        "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    },
)  # fmt: skip
_AARCH64 = _Arch(
    audit_arch=0xC00000B7,
    syscalls={
        "clone": 220, "execve": 221, "execveat": 281, "clone3": 435,
        "socket": 198, "socketpair": 199, "mknodat": 33,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "pidfd_getfd": 438, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "add_key": 217, "request_key": 218, "keyctl": 219,
        "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "kexec_file_load": 294,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "personality": 92, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "acct": 89, "swapon": 224, "swapoff": 225, "reboot": 142,
        "sethostname": 161, "setdomainname": 162,
    },
)  # fmt: skip
_ARCHES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}

# Refused with EPERM (clone is handled separately: threads stay allowed).
REFUSED = (
    "fork", "vfork", "socket", "socketpair", "mknod", "mknodat",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "unshare", "setns",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "bpf", "perf_event_open", "userfaultfd",
    "add_key", "request_key", "keyctl", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "personality", "open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
    "sethostname", "setdomainname", "iopl", "ioperm",
)  # fmt: skip
EXEC = ("execve", "execveat")


def supported() -> bool:
    """Whether a filter can be built for this machine's architecture."""
    return platform.machine().lower() in _ARCHES


def _arch() -> _Arch:
    machine = platform.machine().lower()
    if machine not in _ARCHES:
        raise OSError(f"no seccomp syscall table for architecture '{machine}'")
    return _ARCHES[machine]


class _Program:
    """A list of BPF instructions whose forward jumps may name labels, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def add(self, op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((op, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, jt, jf, k) in enumerate(self.code):
            jumps = [self._offset(index, j) for j in (jt, jf)]
            out += struct.pack("=HBBI", op, jumps[0], jumps[1], k & 0xFFFFFFFF)
        return bytes(out)

    def _offset(self, index: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"jump to {target} out of range ({offset})")
        return offset


def build(*, exec_allowed: bool = True) -> bytes:
    """The filter program, as the bytes of a `struct sock_filter` array."""
    arch = _arch()
    refused = [*REFUSED, *(() if exec_allowed else EXEC)]
    numbers = sorted({arch.syscalls[name] for name in refused if name in arch.syscalls})
    p = _Program()
    p.add(_LD_W_ABS, _ARCH)
    p.add(_JEQ_K, arch.audit_arch, jt=1, jf=0)
    p.add(_RET_K, _RET_KILL_PROCESS)
    p.add(_LD_W_ABS, _NR)
    if arch.has_x32:
        p.add(_JGE_K, _X32_BIT, jt="deny", jf=0)
    if exec_allowed:
        # the filter bubblewrap installs lets `setarch -R` switch address-space randomization
        # off before the interpreter starts (determinism.py): those two arguments only
        p.add(_JEQ_K, arch.syscalls["personality"], jt=0, jf="other")
        p.add(_LD_W_ABS, _ARG0_LOW)
        p.add(_JEQ_K, PERSONALITY_QUERY, jt="allow", jf=0)
        p.add(_JEQ_K, PERSONALITY_FIXED_LAYOUT, jt="allow", jf="deny")
        p.label("other")
    for number in numbers:
        p.add(_JEQ_K, number, jt="deny", jf=0)
    p.add(_JEQ_K, arch.syscalls["clone3"], jt="nosys", jf=0)
    p.add(_JEQ_K, arch.syscalls["clone"], jt=0, jf="allow")
    # clone: a thread (CLONE_THREAD set) in the same namespaces, or nothing
    p.add(_LD_W_ABS, _ARG0_LOW)
    p.add(_JSET_K, CLONE_THREAD, jt=0, jf="deny")
    p.add(_JSET_K, CLONE_NAMESPACES, jt="deny", jf="allow")
    p.label("allow")
    p.add(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.add(_RET_K, _RET_ERRNO | errno.EPERM)
    p.label("nosys")
    p.add(_RET_K, _RET_ERRNO | errno.ENOSYS)
    return p.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def install(program: bytes) -> None:
    """Install `program` on the calling thread's process (irrevocable; children inherit it).
    Sets no-new-privileges first, which the kernel requires of an unprivileged caller."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
