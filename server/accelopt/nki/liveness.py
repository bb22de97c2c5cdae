"""When a re-run of a call log may let go of a tensor's storage: after the last entry naming it.

A sandboxed run frees a tile as soon as the kernel's Python drops it. The trusted re-run
(rerun.py) has no kernel Python, only the log, and finds tensors by id; keeping every id it ever
made alive holds all the tiles of the whole run at once (the full-size matmul's re-run: 24 GB
resident). The log is complete, though: every later use of a tensor names it (as a tensor, a
view of it, or the result of the call that hands it back, such as `loop_reduce`'s accumulator
or a later SPMD instance's shared output). So a pass over the log before the re-run finds each
tensor's last entry, and the re-run releases the tensor's storage right after that entry.

Two links are made while the re-run runs and are not in the log: an op result assigned into a
tile becomes an alias of that tile (`Tensor._alias`: reading the result reads the tile), and a
reshape shares its root's memory (`Tensor._root`). After each entry, a tensor it named that
links to another one extends that one's life to its own last entry.

A tensor with block dimensions that the log only ever indexes by constant block coordinates
(the compiler-generated tiling: `tile[i0, i1, i2, ...]` inside the loops) is kept one block at a
time (blockstore.py), each block released after the last entry touching it.

A released tensor's storage is a `Released` marker: should the analysis ever be wrong, the
re-run fails on it with a clear message (the evaluation is rejected); it never reads stale or
made-up values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accelopt.nki.blockstore import BlockStore
from accelopt.nki.tensor import Tensor

_NUMBERS_ONLY = frozenset({"g", "A", "N", "X", "M", "D", "O", "E", "B", "P", "L"})  # tags holding no tensor
FOLD_MIN_BYTES = 64 << 20  # smaller tensors with block dimensions are kept whole (as in the sandbox)

Key = int | tuple[int, tuple[int, ...]]  # a tensor, or one block of a tensor kept block by block


class Released:
    """The storage of a tensor the re-run let go of (no later entry names it)."""

    def __init__(self, tid: int) -> None:
        self.tid = tid

    def _refuse(self) -> Any:
        raise RuntimeError(
            f"tensor {self.tid} was released after the last call-log entry naming it, and is used again"
        )

    def __getitem__(self, key: Any) -> Any:
        return self._refuse()

    def __setitem__(self, key: Any, value: Any) -> None:
        self._refuse()

    def __getattr__(self, name: str) -> Any:
        return self._refuse()


class _Mentions:
    """What a pass over the log finds: per entry the tensors it names; per tensor its views."""

    def __init__(self) -> None:
        self.found: list[int] = []
        self.whole: set[int] = set()  # named as a whole tensor (not only through views)
        self.views: dict[int, list[tuple[int, tuple[int, ...]]]] = {}  # tid -> (entry, offsets)
        self.varying: dict[int, int] = {}  # tid -> first dimension a view indexes by a range or grid
        self.number = 0

    def collect(self, value: Any) -> None:
        """The tensor ids a logged value names (as a tensor or a view), at any depth."""
        if value.__class__ is dict:
            for item in value.values():
                self.collect(item)
            return
        if value.__class__ is not list or not value:
            return
        tag = value[0]
        if tag in ("T", "V") and len(value) >= 2 and type(value[1]) is int:
            tid = value[1]
            self.found.append(tid)
            if tag == "T" or len(value) != 7:
                self.whole.add(tid)
            else:
                self._view(tid, value)
            return
        if tag.__class__ is str and tag in _NUMBERS_ONLY:
            return
        for item in value:
            self.collect(item)

    def result(self, value: Any, seen: dict[int, int]) -> None:
        """A call's result: a new tensor, or (a tensor already made) one handed back whole."""
        before = len(self.found)
        self.collect(value)
        for tid in self.found[before:]:
            if tid in seen:
                self.whole.add(tid)
            elif value[:1] == ["T"]:
                self.whole.discard(tid)  # made here; that is not a use as a whole

    def _view(self, tid: int, value: list[Any]) -> None:
        offsets, terms, arrays = value[3], value[4], value[5]
        if not isinstance(offsets, list) or not all(type(o) is int for o in offsets) or not isinstance(terms, list):
            self.whole.add(tid)
            return
        varying = [d for d, t in enumerate(terms) if t]
        if arrays is not None:
            if not isinstance(arrays, list):
                self.whole.add(tid)
                return
            varying += [item[1] for item in arrays[1:] if isinstance(item, list) and len(item) == 3 and type(item[1]) is int]
        first = min(varying, default=len(offsets))
        self.varying[tid] = min(self.varying.get(tid, first), first)
        self.views.setdefault(tid, []).append((self.number, tuple(offsets)))


class Liveness:
    """Each tensor's last entry in a call log, and the release of tensors past theirs."""

    def __init__(self, entries: list[Any], fold_min_bytes: int = FOLD_MIN_BYTES) -> None:
        self.last: dict[Key, int] = {}
        self.named: list[tuple[int, ...]] = []
        self.kept: set[int] = set()  # what the kernel returns: never released
        self.fold_min_bytes = fold_min_bytes
        self.stores: dict[int, BlockStore] = {}
        mentions = _Mentions()
        seen: dict[int, int] = {}
        for number, entry in enumerate(entries):
            mentions.number = number
            before = len(mentions.found)
            if isinstance(entry, list) and entry[:1] == ["inputs"] and len(entry) == 2:
                mentions.found += [item[1] for item in entry[1] if isinstance(item, list) and len(item) == 4]
            elif isinstance(entry, list) and entry[:1] == ["return"] and len(entry) == 3:
                if isinstance(entry[1], list):
                    self.kept.update(t for t in entry[1] if type(t) is int)
            elif isinstance(entry, list) and entry[:1] == ["call"] and len(entry) == 7:
                mentions.collect(entry[1:6])
                mentions.result(entry[6], seen)
            else:
                mentions.collect(entry)
            ids = tuple(t for t in dict.fromkeys(mentions.found[before:]) if type(t) is int)
            del mentions.found[before:]
            self.named.append(ids)
            for tid in ids:
                self.last[tid] = number
                seen.setdefault(tid, number)
        self._mentions = mentions
        self.due: dict[int, set[Key]] = {}
        for key, number in self.last.items():
            if key not in self.kept:
                self.due.setdefault(number, set()).add(key)
        self._made = 0  # tensor ids below this one were made by entries already run

    def storage(self, tid: int, shape: tuple[int, ...], dtype: np.dtype, fill: Any, blocks: int) -> BlockStore | None:
        """A BlockStore for tensor `tid` if every logged access picks one block by constants."""
        mentions = self._mentions
        if (
            tid in mentions.whole
            or tid in self.kept
            or tid not in mentions.views
            or mentions.varying.get(tid, 0) < blocks
            or math.prod(shape) * dtype.itemsize < self.fold_min_bytes
        ):
            return None
        last: dict[tuple[int, ...], int] = {}
        for number, offsets in mentions.views[tid]:
            if len(offsets) != len(shape):
                return None
            last[offsets[:blocks]] = number
        store = self.stores[tid] = BlockStore(shape, dtype, fill, blocks, tid)
        for block, number in last.items():
            self._extend((tid, block), number)
        return store

    def after(self, number: int, tensors: dict[int, Tensor]) -> None:
        """Entry `number` ran: follow the links it made, then release what it used last."""
        unnamed = []  # made inside this entry's call and named nowhere (e.g. the sum of `a += b`)
        made = self._made
        for tid in reversed(tensors):  # ids grow: the newest last
            if tid < made:
                break
            if tid not in self.last and tid not in self.kept:
                unnamed.append(tid)
            self._made = max(self._made, tid + 1)
        for tid in (*self.named[number], *unnamed):
            tensor = tensors.get(tid)
            if tensor is not None:
                self._follow_links(tensor, max(self.last.get(tid, number), number))
        for key in (*self.due.pop(number, ()), *unnamed):
            if isinstance(key, tuple):
                store = self.stores.get(key[0])
                if store is not None:
                    store.release(key[1])
                continue
            tensor = tensors.pop(key, None)
            if tensor is not None:
                tensor._data = Released(key)  # type: ignore[assignment]
                tensor._exact = None
                self.stores.pop(key, None)

    def _follow_links(self, tensor: Tensor, until: int) -> None:
        seen: set[int] = set()
        while True:
            alias = tensor._alias
            linked = alias._tensor if alias is not None else tensor._root
            if linked is None or linked._tid in seen:
                return
            seen.add(linked._tid)
            self._extend(linked._tid, until)
            store = self.stores.get(linked._tid)
            if store is not None and alias is not None:
                self._extend((linked._tid, alias._offsets[: store.blocks]), until)
            tensor = linked

    def _extend(self, key: Key, until: int) -> None:
        if key in self.kept:
            return
        old = self.last.get(key)
        if old is not None and old >= until:
            return
        if old is not None:
            self.due.get(old, set()).discard(key)
        self.last[key] = until
        self.due.setdefault(until, set()).add(key)
