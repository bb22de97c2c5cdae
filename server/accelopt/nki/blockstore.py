"""The storage of a tensor with block dimensions, kept one block at a time.

Compiler-generated NKI kernels declare a tile per iteration as one tensor with leading block
dimensions (`nl.ndarray((M // 128, N // 512, K // 128, nl.par_dim(128), 512))`) and touch one
block per step. Declared that way, the full-size matmul's three tiles are 10.4 GiB, although a
block is dead after the step that reads it (the compiler reuses the memory; so may we). The
trusted re-run knows from its call log which blocks each entry touches and when a block is used
for the last time (liveness.py), so it backs such a tensor with a `BlockStore`: a block is
allocated, NaN-filled like any new tensor storage, when an access first touches it, and released
after its last use. Values and traces are the same as with the whole array; only memory differs.

The store takes the numpy indices a View computes (`View._index`, `View._fancy_index`, masked
grids): each must pick one block by constant block coordinates. Anything else is refused loudly
(the re-run then rejects the evaluation); the analysis folds only tensors whose logged views
index their block dimensions by constants, so honest kernels do not get there.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class _Flags:
    writeable = True


class BlockStore:
    """Duck-types the ndarray a Tensor holds, for the indexing a View does."""

    flags = _Flags()

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, fill: Any, blocks: int, tid: int) -> None:
        from accelopt.nki.tensor import new_data, new_empty  # (tensor.py makes these stores)

        self.shape = shape
        self.dtype = dtype
        self.blocks = blocks
        self.tid = tid
        self._fill = fill
        self._new_data = new_data
        self._new_empty = new_empty
        self._stored: dict[tuple[int, ...], np.ndarray] = {}
        self._released: set[tuple[int, ...]] = set()

    def block(self, key: tuple[int, ...]) -> np.ndarray:
        data = self._stored.get(key)
        if data is None:
            if key in self._released:
                raise RuntimeError(f"block {key} of tensor {self.tid} is used after its last use in the call log")
            if len(key) != self.blocks or not all(0 <= k < n for k, n in zip(key, self.shape)):
                raise IndexError(f"block {key} is outside tensor {self.tid} of shape {self.shape}")
            data = self._stored[key] = self._new_data(self.shape[self.blocks :], self.dtype, self._fill)
        return data

    def release(self, key: tuple[int, ...]) -> None:
        if self._stored.pop(key, None) is not None:
            self._released.add(key)

    @property
    def held(self) -> int:
        """Blocks allocated now."""
        return len(self._stored)

    def _split(self, index: Any) -> tuple[tuple[int, ...], Any]:
        if index.__class__ is not tuple or len(index) != len(self.shape):
            raise TypeError(f"tensor {self.tid} is stored block by block; it cannot be indexed by {index!r}")
        key = tuple(_constant(i, self.tid) for i in index[: self.blocks])
        rest = index[self.blocks :]
        arrays = [i for i in index if isinstance(i, np.ndarray)]
        if arrays:  # fancy indexing: the result takes the shape of all the grids broadcast together
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
            rest = tuple(np.broadcast_to(i, shape) if isinstance(i, np.ndarray) else i for i in rest)
        return key, rest

    def __getitem__(self, index: Any) -> np.ndarray:
        key, rest = self._split(index)
        return self.block(key)[rest]

    def __setitem__(self, index: Any, values: Any) -> None:
        key, rest = self._split(index)
        data = self._stored.get(key)
        if data is None and key not in self._released and _whole(rest, self.shape[self.blocks :]):
            data = self._stored[key] = self._new_empty(self.shape[self.blocks :], self.dtype)  # all written next
        else:
            data = self.block(key)
        data[rest] = values


def _whole(index: Any, shape: tuple[int, ...]) -> bool:
    """Whether a basic index selects every element of an array of `shape`."""
    return len(index) == len(shape) and all(
        i.__class__ is slice and i.indices(n) == (0, n, 1) for i, n in zip(index, shape)
    )


def _constant(index: Any, tid: int) -> int:
    if index.__class__ is int or isinstance(index, np.integer):
        return int(index)
    if isinstance(index, np.ndarray) and index.size:
        first = int(index.flat[0])
        if index.size == 1 or bool((index == first).all()):
            return first
    raise TypeError(f"an access to tensor {tid} spans several of its blocks; it is stored block by block")
