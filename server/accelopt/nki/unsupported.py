"""Public NKI names the emulator does not implement yet, refused the way the compiler refuses
things: an `NkiError` naming the API, saying it is not supported by the emulator yet, at the
kernel's own file and line.

`api_index.txt` (beside this module) lists every public name of the NKI API reference's index
pages (nki, nki.language, nki.isa, nki.language.constants), written from the Neuron SDK 2.33
docs. A kernel-facing module installs `module_getattr` as its module `__getattr__`: a listed
name it does not define resolves to an `Unsupported` placeholder, which raises when the kernel
uses it; a name that is not NKI at all is an `NkiAttributeError` (also an AttributeError, so
`hasattr` and `getattr(..., default)` keep working).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import Any, NoReturn

from accelopt.nki.errors import NkiError

NOT_SUPPORTED = "not supported by the emulator yet"


class NkiAttributeError(NkiError, AttributeError):
    """A name an NKI module does not have, reported at the kernel line that asked for it."""


def not_supported(api: str, detail: str = "") -> NkiError:
    """The error for an NKI API (or a form of one) the emulator cannot run."""
    from accelopt.nki.context import active_context  # context imports errors only

    ctx = active_context()
    message = f"{api} is {NOT_SUPPORTED}" + (f" ({detail})" if detail else "")
    if ctx is not None:
        return ctx.error("err_unsupported_api", message)
    return NkiError("err_unsupported_api", message)


def refuse(api: str, detail: str = "") -> NoReturn:
    raise not_supported(api, detail)


class Unsupported:
    """A placeholder for a public NKI name the emulator does not implement. It can be named (at
    import, as a default argument, in an annotation); using it raises the NKI-style error."""

    __slots__ = ("_api",)

    def __init__(self, api: str) -> None:
        self._api = api

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(self._api)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Unsupported(f"{self._api}.{name}")

    def __getitem__(self, key: Any) -> Any:
        return self  # annotations such as `nki.tensor[...]` only need to evaluate

    def __enter__(self) -> NoReturn:
        refuse(self._api)

    def __exit__(self, *exc: Any) -> None:
        return None

    def __iter__(self) -> NoReturn:
        refuse(self._api)

    def __bool__(self) -> bool:
        refuse(self._api)

    def __repr__(self) -> str:
        return f"<{self._api}: {NOT_SUPPORTED}>"


@functools.lru_cache(maxsize=1)
def api_index() -> dict[str, frozenset[str]]:
    """module name ('nki.language', ...) -> its public names, from api_index.txt."""
    names: dict[str, set[str]] = {}
    text = resources.files("accelopt.nki").joinpath("api_index.txt").read_text(encoding="utf-8")
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        module, _, name = line.rpartition(".")
        names.setdefault(module, set()).add(name)
    return {module: frozenset(found) for module, found in names.items()}


api_index()  # read now, while importing: a sandboxed run may not open files later


def module_getattr(public_module: str) -> Callable[[str], Any]:
    """A module `__getattr__` for the emulator module kernels see as `public_module`."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in api_index().get(public_module, ()):
            return Unsupported(f"{public_module}.{name}")
        raise _unknown(public_module, name)

    return __getattr__


# Names kernels use that no NKI reference defines, with what the reference has instead.
# `nl.int1` (in an SDK test of atomic_rmw) is in no Data Types table of the NKI API reference
# (v2.21-v2.33): the boolean type there is `bool_`, "Boolean (True or False) stored as a byte".
_INSTEAD = {
    "int1": "the reference's boolean type is nl.bool_ (one byte per element)",
}


def _unknown(public_module: str, name: str) -> NkiAttributeError:
    from accelopt.nki.context import active_context

    message = f"{public_module} has no attribute '{name}' (not in the NKI API reference)"
    if public_module.endswith(".language") and name in _INSTEAD:
        message += f"; {_INSTEAD[name]}"
    ctx = active_context()
    if ctx is not None:
        return NkiAttributeError("err_unknown_api", message, ctx.kernel_path, ctx.line())
    return NkiAttributeError("err_unknown_api", message)


# --- errors from inside the emulator, as NKI errors --------------------------------------------

_CONVERTED = (TypeError, AttributeError, NotImplementedError, ValueError, IndexError, KeyError, AssertionError)


def as_nki_error(exc: BaseException, kernel_path: str) -> NkiError | None:
    """An exception raised inside the emulator while running kernel code, restated as an
    `NkiError` at the kernel line that made the call and naming the public API (never an
    emulator module or function). None when the exception is not the emulator's (the kernel's
    own Python raised it) or is already an NKI error."""
    import os
    import re

    from accelopt.nki.errors import _EMULATOR_DIR

    if isinstance(exc, NkiError) or not isinstance(exc, _CONVERTED):
        return None
    # the frames' files by walking the traceback (traceback.extract_tb would read source files)
    last = exc.__traceback__
    if last is None:
        return None
    while last.tb_next is not None:
        last = last.tb_next
    called = re.match(r"^([\w.<>]+)\(\)\s*", str(exc))
    if not last.tb_frame.f_code.co_filename.startswith(_EMULATOR_DIR) and not _through_emulator(
        exc.__traceback__, kernel_path
    ):
        # binding a call's arguments fails in the caller's frame: still ours if the function
        # it names is an emulator API
        if not (isinstance(exc, TypeError) and called and called.group(1) in _public_names()):
            return None
    tb = exc.__traceback__
    kernel_line = 0
    api = ""
    after_kernel = False
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == kernel_path:
            kernel_line = tb.tb_lineno
            after_kernel = True
            api = ""
        elif after_kernel and not api and code.co_filename.startswith(_EMULATOR_DIR):
            api = _public_names().get(code, "")
        tb = tb.tb_next
    if not kernel_line:
        return None
    if called and not api:  # an argument-binding error names the function it could not call
        names = _public_names()
        api = names.get(called.group(1), "") or names.get(called.group(1).rsplit(".", 1)[-1], "")
    api = api or "an NKI API"
    detail = re.sub(r"^[\w.<>]+\(\)\s*", "", str(exc)).strip() or type(exc).__name__
    if "accelopt" in detail or os.sep + "nki" + os.sep in detail:
        detail = "the call's arguments do not fit"
    if isinstance(exc, (NotImplementedError, AttributeError)):
        return NkiError("err_unsupported_api", f"{api}: {detail}; this use is {NOT_SUPPORTED}", kernel_path, kernel_line)
    return NkiError(
        "err_invalid_argument",
        f"{api}: {detail} (if this is valid NKI, it is {NOT_SUPPORTED})",
        kernel_path,
        kernel_line,
    )


def _through_emulator(tb: Any, kernel_path: str) -> bool:
    """Whether the exception passed through emulator code after the kernel's last frame: numpy
    raising inside an API call (a broadcast the emulator asked for) is the emulator's error,
    numpy raising in the kernel's own code is not."""
    from accelopt.nki.errors import _EMULATOR_DIR

    through = False
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename == kernel_path:
            through = False
        elif filename.startswith(_EMULATOR_DIR):
            through = True
        tb = tb.tb_next
    return through


@functools.lru_cache(maxsize=1)
def _public_names() -> dict[Any, str]:
    """code object -> public API name ('nisa.memset'), for every kernel-facing callable and the
    functions it wraps."""
    import re
    import sys

    modules = {
        "nki": "accelopt.nki.facade",
        "nl": "accelopt.nki.language",
        "nisa": "accelopt.nki.isa",
    }
    names: dict[Any, str] = {}
    shared: set[Any] = set()  # wrapper code every decorated API runs (replay, dst): says nothing

    def note(key: Any, api: str) -> None:
        if names.setdefault(key, api) != api:
            shared.add(key)

    for prefix, module_name in modules.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in vars(module).items():
            if not callable(value) or isinstance(value, type):
                continue
            public = name
            if name.startswith("_"):
                # the forms a dispatcher calls: _memset_into, _nc_matmul_result, ...
                stem = re.sub(r"^_(.*?)_(into|result|into_impl)$", r"\1", name)
                if stem == name or stem not in vars(module):
                    continue
                public = stem
            seen = 0
            while value is not None and seen < 8:
                code = getattr(value, "__code__", None)
                if code is not None:
                    note(code, f"{prefix}.{public}")
                    note(code.co_name, f"{prefix}.{public}")
                value = getattr(value, "__wrapped__", None)
                seen += 1
    from accelopt.nki import tensor, views

    for cls in (tensor.TileOps, tensor.Tensor, tensor.View):
        for name, value in vars(cls).items():
            code = getattr(value, "__code__", None)
            if code is not None and not name.startswith("_"):
                note(code, f"NkiTensor.{name}")
                note(f"{cls.__name__}.{name}", f"NkiTensor.{name}")
    for name, value in vars(views).items():
        code = getattr(value, "__code__", None)
        if code is not None and name.endswith("_view"):
            note(code, f"NkiTensor.{name[: -len('_view')]}")
            note(name, f"NkiTensor.{name[: -len('_view')]}")
    return {key: api for key, api in names.items() if key not in shared}
