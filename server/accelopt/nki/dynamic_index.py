"""A run-time offset in an index: ``src[ix, offsets_tile[0, i] + iy]`` (legacy NKI).

The legacy ``nisa.tensor_copy_dynamic_src`` / ``tensor_copy_dynamic_dst`` pages (NKI API
reference v2.21-v2.26) index an on-chip tile with an ``nl.mgrid`` grid plus a value held in an
SBUF tile: the grid is the static part of the access, the tile's value moves it along one free
dimension when the instruction runs. Adding a tile to an index grid cannot compute anything at
trace time, so it makes this small record instead; indexing a tensor with it builds a
tile-indexed view (views.dynamic_offset_view) that reads the offset from the tile's data.
"""

from __future__ import annotations

from typing import Any

from accelopt.nki.indexing import IndexExpr


class DynamicIndex:
    """`tile` (a one-element SBUF view: the run-time offset) plus `static` (an index grid or an
    int: the compile-time part)."""

    __slots__ = ("static", "tile")

    def __init__(self, tile: Any, static: IndexExpr | int) -> None:
        self.tile = tile
        self.static = static

    def __add__(self, other: Any) -> DynamicIndex:
        if isinstance(other, (int, IndexExpr)) and not isinstance(other, bool):
            return DynamicIndex(self.tile, self.static + other)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> DynamicIndex:
        if isinstance(other, (int, IndexExpr)) and not isinstance(other, bool):
            return DynamicIndex(self.tile, self.static - other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"DynamicIndex(tile={self.tile!r}, static={self.static!r})"
