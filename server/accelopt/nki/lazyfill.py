"""New tensor memory that reads as NaN, filled a block at a time when the kernel first touches it.

A numeric run fills every new tensor with NaN so that a kernel reading memory it never wrote is
caught (the NaN reaches its outputs). Compiler-generated kernels declare a tile per loop step as
one tensor with leading block dimensions and write each block whole before reading it: the
full-size NKIBench matmul declares 10.4 GiB that way, and filling it cost a fifth of a seed's
worker time, for values every block then overwrote.

Such a tensor's storage starts unfilled, with a map of its blocks not filled yet. Before an
access, the blocks it may reach are filled, except a block that a plain store is about to cover
whole: that one is marked filled once the store is done. Every block is thus either filled or
written whole before anything reads it, so what any read sees is what it saw with the eager fill.
An access whose blocks cannot be told (and any use of the storage other than `View._read` and
`View._write`: a reshape, a bitcast view, the run's outputs) fills every pending block first
(`fill_all`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Below this, a tensor is filled when allocated: the map would cost more than the fill saves.
LAZY_MIN_BYTES = 1 << 20


class PendingFill:
    """The blocks of one tensor's storage (`data`, leading `blocks` dimensions) still to fill."""

    __slots__ = ("blocks", "data", "fill", "left", "pending")

    def __init__(self, data: np.ndarray, blocks: int, fill: Any) -> None:
        self.data = data
        self.blocks = blocks
        self.fill = fill
        self.pending = np.ones(data.shape[:blocks], dtype=bool)
        self.left = int(self.pending.size)

    def before_read(self, index: Any) -> bool:
        """Fill the pending blocks `index` (a numpy index into `data`) may reach; True when
        none is left (the tensor then needs no map)."""
        self._fill(self._blocks_of(index))
        return self.left == 0

    def before_store(self, index: Any, plain: bool) -> tuple[int, ...] | None:
        """Before a store through `index`: the block it covers whole when `plain` (no mask, no
        accumulation) and the index selects one whole block (mark it with `stored` once the
        store is done); else None, with the blocks it may reach filled."""
        if plain:
            key = self._whole_block(index)
            if key is not None:
                return key
        self._fill(self._blocks_of(index))
        return None

    def stored(self, key: tuple[int, ...]) -> bool:
        if self.pending[key]:
            self.pending[key] = False
            self.left -= 1
        return self.left == 0

    def fill_all(self) -> None:
        self._fill(None)

    # --- which blocks an index reaches ---------------------------------------------------------

    def _whole_block(self, index: Any) -> tuple[int, ...] | None:
        if index.__class__ is not tuple or len(index) != self.data.ndim:
            return None
        key = index[: self.blocks]
        if not all(k.__class__ is int for k in key):
            return None
        for i, n in zip(index[self.blocks :], self.data.shape[self.blocks :]):
            if i.__class__ is not slice or i.indices(n) != (0, n, 1):
                return None
        return key

    def _blocks_of(self, index: Any) -> tuple[slice, ...] | None:
        """A box of block coordinates holding every block `index` reaches (None: all of them)."""
        if index.__class__ is not tuple or len(index) < self.blocks:
            return None
        box: list[slice] = []
        sizes: tuple[int, ...] = self.pending.shape
        for i, n in zip(index[: self.blocks], sizes):
            if i.__class__ is int or isinstance(i, np.integer):
                k = int(i) + n if i < 0 else int(i)
                box.append(slice(k, k + 1))
            elif i.__class__ is slice:
                start, stop, step = i.indices(n)
                if step < 0:  # (the blocks between its ends, every one: more than it needs)
                    start, stop, step = stop + 1, start + 1, 1
                box.append(slice(start, max(start, stop), step))
            elif isinstance(i, np.ndarray) and i.dtype.kind in "iu":
                if i.size == 0:
                    return ()  # reaches nothing
                low, high = int(i.min()), int(i.max())
                if low < 0:
                    return None  # negative grid values wrap: take every block
                box.append(slice(low, min(high + 1, n)))
            else:
                return None
        return tuple(box)

    def _fill(self, box: tuple[slice, ...] | None) -> None:
        if self.left == 0 or box == ():
            return
        region = self.pending if box is None else self.pending[box]
        if not region.any():
            return
        offsets = [0] * self.blocks if box is None else [b.start for b in box]
        steps = [1] * self.blocks if box is None else [b.step or 1 for b in box]
        for found in np.argwhere(region):
            key = tuple(int(o + s * f) for o, s, f in zip(offsets, steps, found))
            self.data[key] = self.fill
            self.pending[key] = False
            self.left -= 1
