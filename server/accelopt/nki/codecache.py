"""Compiled code for the emulator's generated functions (replays, index forms), by source text.

Call sites with the same structure (the four loads of a kernel, the kernels a search derives
from one another) generate the same text; compiling it costs as much as running the function a
hundred times. The constants a generated function uses live in its own globals, so one code
object serves every site whose text matches.
"""

from __future__ import annotations

import types

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
