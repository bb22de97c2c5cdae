"""The runtime half of the sandbox policy, installed inside the worker before untrusted code runs.

Layers (each independent of the static check in `accelopt.profiling.policy`):
- an audit hook (PEP 578) refusing sockets, processes, signals, native code (ctypes), code
  compilation and frame access from untrusted code, any file write, file reads outside the
  allowed roots, and loads of modules on the deny list;
- a `builtins.__import__` wrapper enforcing the import allow-list on imports issued by
  untrusted code (an `import os` of an already-loaded module raises no audit event);
- `socket.socket` replaced by a refusal.

Once installed the guard never switches off: trusted code that runs afterwards (writing results)
uses files opened before the guard was installed. The first violation is remembered here, in
trusted state, so a kernel that catches the exception is still reported as `rejected`.

Python-level hooks are a tripwire, not a security boundary (see SECURITY.md): the boundaries
are the separate process, its resource limits, its empty environment and the process group.
"""

from __future__ import annotations

import _imp
import builtins
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import NoReturn

from accelopt.profiling.policy import DENIED_ATTRIBUTES, PolicyName, module_allowed


class SandboxViolation(PermissionError):
    """Raised inside the worker when untrusted code does something the sandbox forbids."""


@dataclass
class RecordedViolation:
    reason: str
    path: str | None
    line: int | None


# Modules that untrusted code has no business loading, whoever asks for them.
_DENIED_MODULE_ROOTS = frozenset(
    {
        "socket",
        "_socket",
        "ssl",
        "_ssl",
        "subprocess",
        "_posixsubprocess",
        "multiprocessing",
        "_multiprocessing",
        "ctypes",
        "_ctypes",
        "pty",
        "mmap",
        "http",
        "urllib",
        "ftplib",
        "smtplib",
        "telnetlib",
        "webbrowser",
        "pickle",
        "_pickle",
        "marshal",
        "shelve",
        "sqlite3",
        "_sqlite3",
        "dbm",
        "_dbm",
        "_gdbm",
    }
)

# Audit events refused outright once the guard is active.
_DENIED_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.putenv",
        "os.unsetenv",
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "os.chdir",
        "os.setxattr",
        "os.removexattr",
        "pty.spawn",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.move",
        "shutil.rmtree",
        "shutil.make_archive",
        "shutil.chown",
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.sendto",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "setopencodehook",
        "resource.setrlimit",
        "resource.prlimit",
        "signal.pthread_kill",
        "mmap.__new__",
        "_thread.start_new_thread",
        "sqlite3.connect",
        "sqlite3.connect/handle",
        "sqlite3.enable_load_extension",
        "sqlite3.load_extension",
    }
)

# Refused only when untrusted code is the immediate caller (the emulator legitimately uses them
# while a kernel is on the stack: it reads its caller's frame for source lines; dataclasses and
# namedtuple compile the methods they generate). Code compiled with untrusted code anywhere on
# the stack is itself untrusted from then on (see `_Guard._check_compile`).
_DENIED_FROM_UNTRUSTED = frozenset(
    {
        "compile",
        "exec",
        "sys._getframe",
        "sys._current_frames",
        "object.__getattr__",
        "object.__setattr__",
        "object.__delattr__",
        # the import system unmarshals the bytecode of modules it loads lazily; the emulator
        # builds specialised functions (code.replace) while a kernel is traced
        "marshal.loads",
        "marshal.load",
        "code.__new__",
        "function.__new__",
    }
)

# Refused whenever untrusted code is anywhere on the stack: a trusted helper (numpy's loader,
# a standard-library function) running them on the kernel's behalf is no different.
_DENIED_ON_BEHALF_OF_UNTRUSTED = frozenset(
    {
        "pickle.find_class",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
    }
)

# Every event the hook judges, by name or by prefix (`_Guard._audit`); any other event passes
# at once. The hook runs on every audited operation, and the emulator's own `id()` calls raise
# one per instruction: a look-up here is all such an event should cost.
_JUDGED_EVENTS = _DENIED_EVENTS | _DENIED_FROM_UNTRUSTED | _DENIED_ON_BEHALF_OF_UNTRUSTED | {
    "open",
    "os.listdir",
    "os.scandir",
    "import",
}
_JUDGED_PREFIXES = ("ctypes.", "socket.", "os.exec", "os.spawn")
# The events judged by their immediate caller alone (no other rule of `_audit` applies to them):
# `sys._getframe` and `object.__getattr__` (a frame's `f_code`) come from the emulator's own
# source-line lookups several times per instruction, so they take the shortest way there.
_JUDGED_BY_CALLER = frozenset(
    e
    for e in _DENIED_FROM_UNTRUSTED - _DENIED_EVENTS - _DENIED_ON_BEHALF_OF_UNTRUSTED - {"compile"}
    if not e.startswith(_JUDGED_PREFIXES)
)

_WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class _Guard:
    def __init__(self) -> None:
        self.active = False
        self.policy: PolicyName = "kernel"
        self.user_files: frozenset[str] = frozenset()
        self.trusted_roots: tuple[str, ...] = ()
        self.read_roots: tuple[str, ...] = ()
        self.violation: RecordedViolation | None = None
        self.frozen_names: frozenset[str] = frozenset()
        self._busy = False
        # filename -> `_is_trusted_file` (fixed once installed: user files and roots never change)
        self._trusted: dict[str, bool] = {}
        self._real_import = builtins.__import__
        self._real_getattr = builtins.getattr

    # --- who is calling ----------------------------------------------------------------------

    def _is_trusted_file(self, filename: str) -> bool:
        """Trusted: the interpreter's real frozen modules and files under the trusted roots. A
        name alone is not a credential: `_check_compile` keeps untrusted code from taking one."""
        if filename in self.user_files:
            return False
        if filename.startswith("<frozen "):
            return filename in self.frozen_names or _imp.is_frozen(filename[len("<frozen ") : -1])
        return filename.startswith(self.trusted_roots)

    def _trusted_file(self, filename: str) -> bool:
        """`_is_trusted_file`, remembered per filename (the hook asks it for every frame)."""
        trusted = self._trusted.get(filename)
        if trusted is None:
            trusted = self._trusted[filename] = self._is_trusted_file(filename)
        return trusted

    def _untrusted_caller(self, frame: FrameType | None) -> bool:
        return frame is not None and not self._trusted_file(frame.f_code.co_filename)

    def _untrusted_on_stack(self, frame: FrameType | None) -> bool:
        """Whether any frame between here and the bottom of the stack is untrusted code (so the
        operation may be on its behalf, even when a trusted function performs it)."""
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename == _WORKER_FILE:
                return False  # the worker's driver: what is below it is the bootstrap
            if not self._trusted_file(filename):
                return True
            frame = frame.f_back
        return False

    def _user_location(self, frame: FrameType | None) -> tuple[str | None, int | None]:
        while frame is not None:
            if frame.f_code.co_filename in self.user_files:
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None, None

    def _refuse(self, reason: str, frame: FrameType | None) -> SandboxViolation:
        if self.violation is None:
            path, line = self._user_location(frame)
            self.violation = RecordedViolation(reason, path, line)
        return SandboxViolation(f"sandbox: {reason}")

    # --- the audit hook ----------------------------------------------------------------------

    def audit(self, event: str, args: tuple) -> None:
        # Frame lookups inside the hook raise audit events of their own: don't re-enter.
        if self._busy or not self.active:
            return
        if event in _JUDGED_BY_CALLER:  # what `_audit` does for these, without its detours
            self._busy = True
            try:
                caller = sys._getframe(1)  # 0: audit, 1: where the event was raised
                filename = caller.f_code.co_filename
                trusted = self._trusted.get(filename)
                if trusted is None:
                    trusted = self._trusted_file(filename)
                if not trusted:
                    raise self._refuse(f"operation '{event}' is not allowed", caller)
            finally:
                self._busy = False
            return
        if event not in _JUDGED_EVENTS and not event.startswith(_JUDGED_PREFIXES):
            return  # `_audit` has nothing to say about it
        self._busy = True
        try:
            self._audit(event, args)
        finally:
            self._busy = False

    def _audit(self, event: str, args: tuple) -> None:
        caller = sys._getframe(2)  # 0: _audit, 1: audit, 2: where the event was raised
        if event.startswith("ctypes."):
            # The emulator's own helpers (e.g. threadpoolctl) use ctypes with no untrusted code
            # on the stack; untrusted code must never reach native calls.
            if self._untrusted_on_stack(caller):
                raise self._refuse(f"operation '{event}' is not allowed", caller)
            return
        if event in _DENIED_EVENTS or event.startswith(("socket.", "os.exec", "os.spawn")):
            raise self._refuse(f"operation '{event}' is not allowed", caller)
        if event in _DENIED_ON_BEHALF_OF_UNTRUSTED:
            if self._untrusted_on_stack(caller):
                raise self._refuse(f"operation '{event}' is not allowed", caller)
        elif event in _DENIED_FROM_UNTRUSTED:
            if self._untrusted_caller(caller):
                raise self._refuse(f"operation '{event}' is not allowed", caller)
            if event == "compile":
                self._check_compile(args, caller)
        elif event == "open":
            self._check_open(args, caller)
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if not self._readable(path) and self._untrusted_on_stack(caller):
                raise self._refuse(f"listing '{path}' is not allowed", caller)
        elif event == "import":
            module = str(args[0])
            if module.split(".")[0] in _DENIED_MODULE_ROOTS:
                raise self._refuse(f"loading module '{module}' is not allowed", caller)

    def _check_compile(self, args: tuple, caller: FrameType) -> None:
        """Code compiled on untrusted code's behalf may not take a trusted name (a kernel
        re-entering the kernel loader as `<frozen os>` or as a file of numpy would switch every
        runtime check off). Any other name is untrusted anyway; the one exception is a trusted
        module imported lazily from its own source file."""
        source, filename = [*args, None, None][:2]
        if not isinstance(filename, str) or not self._untrusted_on_stack(caller):
            return
        if self._is_trusted_file(filename) and not _is_own_source(filename, source):
            raise self._refuse(f"compiling code under the trusted name '{filename}' is not allowed", caller)

    def _check_open(self, args: tuple, caller: FrameType) -> None:
        path, mode, flags = [*args, None, None, None][:3]
        if isinstance(path, int):
            raise self._refuse("opening a file descriptor is not allowed", caller)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing:
            raise self._refuse(f"writing '{path}' is not allowed", caller)
        if path is not None and not self._readable(path) and self._untrusted_on_stack(caller):
            raise self._refuse(f"reading '{path}' is not allowed", caller)

    def _readable(self, path: object) -> bool:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(real == root or real.startswith(root + os.sep) for root in self.read_roots)

    # --- the import wrapper ------------------------------------------------------------------

    def guarded_getattr(self, obj: object, name: str, *default: object) -> object:
        """`getattr` with a computed name reads what the static check could not see."""
        if self.active and isinstance(name, str) and (name.startswith("_") or name in DENIED_ATTRIBUTES):
            caller = sys._getframe(1)
            if not self._trusted_file(caller.f_code.co_filename):
                raise self._refuse(f"getattr of '{name}' is not allowed", caller)
        return self._real_getattr(obj, name, *default)

    def guarded_import(
        self,
        name: str,
        globals: Mapping[str, object] | None = None,
        locals: Mapping[str, object] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> ModuleType:
        if self.active:
            caller = sys._getframe(1)
            if not self._trusted_file(caller.f_code.co_filename):
                self._check_user_import(name, fromlist or (), level, caller)
        return self._real_import(name, globals, locals, fromlist, level)

    def _check_user_import(self, name: str, fromlist: Iterable[str], level: int, caller: FrameType) -> None:
        if level:
            raise self._refuse("relative imports are not allowed", caller)
        if not module_allowed(name, self.policy, allow_private=True):
            raise self._refuse(f"import of '{name}' is not allowed", caller)
        for item in fromlist:
            if item != "*" and not module_allowed(f"{name}.{item}", self.policy, allow_private=True):
                raise self._refuse(f"importing '{item}' from '{name}' is not allowed", caller)


_GUARD = _Guard()


def _refuse_socket(*args: object, **kwargs: object) -> NoReturn:
    raise _GUARD._refuse("opening a socket is not allowed", sys._getframe(1))


def _refuse_node(*args: object, **kwargs: object) -> NoReturn:
    # os.mknod and os.mkfifo raise no audit event; the seccomp filter refuses them too.
    raise _GUARD._refuse("creating device nodes or FIFOs is not allowed", sys._getframe(1))


def _is_own_source(filename: str, source: object) -> bool:
    """Whether `source` is exactly the text of the file `filename` (a lazy import from source)."""
    if not isinstance(source, (bytes, str)) or not os.path.isfile(filename):
        return False
    try:
        with open(filename, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data == (source.encode("utf-8") if isinstance(source, str) else source)


def install(
    *,
    policy: PolicyName,
    user_files: Iterable[str],
    trusted_roots: Iterable[str],
    read_roots: Iterable[str],
) -> None:
    """Activate the guard for the rest of this process's life (it cannot be turned off)."""
    if _GUARD.active:
        raise RuntimeError("the sandbox guard is already installed")
    import socket  # loaded now, by trusted code, so it can be disabled below

    _GUARD.policy = policy
    _GUARD.user_files = frozenset(user_files)
    # Frames carry the path a module was imported under, which may not be the resolved one.
    roots = {os.path.abspath(r) for r in trusted_roots} | {os.path.realpath(r) for r in trusted_roots}
    _GUARD.trusted_roots = tuple(sorted(r + os.sep for r in roots))
    _GUARD.read_roots = tuple(os.path.realpath(r) for r in read_roots)
    import posix

    _GUARD.frozen_names = frozenset(
        f"<frozen {name}>"
        for key, module in list(sys.modules.items())
        if getattr(getattr(module, "__spec__", None), "origin", None) == "frozen"
        for name in {key, getattr(module, "__name__", key)}
    )
    for module in (os, posix):
        for name in ("mknod", "mkfifo"):
            if hasattr(module, name):
                setattr(module, name, _refuse_node)
    builtins.getattr = _GUARD.guarded_getattr
    socket.socket = _refuse_socket  # type: ignore[misc,assignment]
    socket.create_connection = _refuse_socket
    socket.socketpair = _refuse_socket
    builtins.__import__ = _GUARD.guarded_import
    sys.addaudithook(_GUARD.audit)
    _GUARD.active = True


def namespace_snapshot(module_names: Iterable[str]) -> dict[tuple[str, str], int]:
    """Identity of every function, class and module bound in the given modules' namespaces.

    Module attribute assignment raises no audit event, so monkey-patching numpy or the emulator
    (`nl.multiply = ...`, to skip recording instructions) is caught by comparing snapshots taken
    before and after the untrusted code ran."""
    import types

    kinds = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)
    snapshot: dict[tuple[str, str], int] = {}
    for name in module_names:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in vars(module).items():
            if isinstance(value, kinds) or callable(value):
                snapshot[(name, attr)] = id(value)
            # The emulator's own classes (Tensor operators, ...) are as patchable as its functions.
            if isinstance(value, type) and value.__module__ == name and name.startswith("accelopt."):
                for member, bound in vars(value).items():
                    snapshot[(name, f"{attr}.{member}")] = id(bound)
    return snapshot


def check_unpatched(before: dict[tuple[str, str], int], module_names: Iterable[str]) -> None:
    """Record a violation if any snapshotted binding was replaced or removed."""
    after = namespace_snapshot(module_names)
    changed = [key for key, ident in before.items() if after.get(key) != ident]
    # New bindings count too, on the emulator's side (numpy adds lazily loaded submodules itself).
    changed += [key for key in after if key not in before and key[0].startswith("accelopt.")]
    if changed and _GUARD.violation is None:
        module, attr = changed[0]
        _GUARD.violation = RecordedViolation(f"'{module}.{attr}' was modified (monkey-patching)", None, None)


def violation() -> RecordedViolation | None:
    """The first violation seen since install, even if the untrusted code caught the exception."""
    return _GUARD.violation
