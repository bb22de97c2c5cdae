"""Compiled code for the emulator's generated functions (replays, index forms), by source text.

Call sites with the same structure (the four loads of a kernel, the kernels a search derives
from one another) generate the same text; compiling it costs as much as running the function a
hundred times. The constants a generated function uses live in its own globals, so one
compilation serves every site whose text matches (each function still gets its own copy of the
code object: see `define`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

_CODE: dict[tuple[str, str], types.CodeType] = {}
_MAX_CODE = 20_000  # a long-lived process starts over past this many texts


def compiled(text: str, filename: str) -> types.CodeType:
    """`compile(text, filename, "exec")`, once per text."""
    key = (text, filename)
    code = _CODE.get(key)
    if code is None:
        if len(_CODE) >= _MAX_CODE:
            _CODE.clear()
        code = _CODE[key] = compile(text, filename, "exec")
    return code


def define(text: str, filename: str, namespace: dict[str, Any], name: str) -> Callable[..., Any]:
    """The function `name` that `text` defines, with `namespace` as its globals.

    The function gets a code object of its own: CPython specialises a code object's
    instructions for the globals it last ran with, so functions sharing one code object with
    different globals would undo each other's specialisations on every call."""
    exec(compiled(text, filename), namespace)
    function = namespace[name]
    function.__code__ = function.__code__.replace()
    return function
