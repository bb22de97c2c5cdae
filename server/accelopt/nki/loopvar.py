"""The loop variable a kernel's NKI loops hand out (its own module: tiles and index forms need
the class, and the loops need the tiles)."""

from __future__ import annotations


class LoopVar(int):
    """A loop index: a plain int that remembers which loop produced it (for nl.loop_reduce)."""

    loop_id: int

    def __new__(cls, value: int, loop_id: int) -> LoopVar:
        obj = int.__new__(cls, value)
        obj.loop_id = loop_id
        return obj
