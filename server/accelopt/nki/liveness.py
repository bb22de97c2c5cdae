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

A released tensor's storage is a `Released` marker: should the analysis ever be wrong, the
re-run fails on it with a clear message (the evaluation is rejected); it never reads stale or
made-up values.
"""

from __future__ import annotations

from typing import Any

from accelopt.nki.tensor import Tensor

_NUMBERS_ONLY = frozenset({"g", "A", "N", "X", "M", "D", "O", "E", "B", "P", "L"})  # tags holding no tensor


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


class Liveness:
    """Each tensor's last entry in a call log, and the release of tensors past theirs."""

    def __init__(self, entries: list[Any]) -> None:
        self.last: dict[int, int] = {}
        self.named: list[tuple[int, ...]] = []
        self.kept: set[int] = set()  # what the kernel returns: never released
        for number, entry in enumerate(entries):
            found: list[int] = []
            if isinstance(entry, list) and entry[:1] == ["inputs"] and len(entry) == 2:
                found = [item[1] for item in entry[1] if isinstance(item, list) and len(item) == 4]
            elif isinstance(entry, list) and entry[:1] == ["return"] and len(entry) == 3:
                if isinstance(entry[1], list):
                    self.kept.update(t for t in entry[1] if type(t) is int)
            else:
                _collect(entry, found)
            ids = tuple(t for t in dict.fromkeys(found) if type(t) is int)
            self.named.append(ids)
            for tid in ids:
                self.last[tid] = number
        self.due: dict[int, set[int]] = {}
        for tid, number in self.last.items():
            if tid not in self.kept:
                self.due.setdefault(number, set()).add(tid)
        self._made = 0  # tensor ids below this one were made by entries already run

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
                self._follow_links(tensor, self.last.get(tid, number))
        for tid in (*self.due.pop(number, ()), *unnamed):
            tensor = tensors.pop(tid, None)
            if tensor is not None:
                tensor._data = Released(tid)  # type: ignore[assignment]
                tensor._exact = None

    def _follow_links(self, tensor: Tensor, until: int) -> None:
        seen: set[int] = set()
        while True:
            linked = tensor._alias._tensor if tensor._alias is not None else tensor._root
            if linked is None or linked._tid in seen:
                return
            seen.add(linked._tid)
            self._extend(linked._tid, until)
            tensor = linked

    def _extend(self, tid: int, until: int) -> None:
        if tid in self.kept:
            return
        old = self.last.get(tid)
        if old is not None and old >= until:
            return
        if old is not None:
            self.due.get(old, set()).discard(tid)
        self.last[tid] = until
        self.due.setdefault(until, set()).add(tid)


def _collect(value: Any, found: list[int]) -> None:
    """The tensor ids a logged value names (as a tensor or a view), at any depth."""
    if value.__class__ is dict:
        for item in value.values():
            _collect(item, found)
        return
    if value.__class__ is not list or not value:
        return
    tag = value[0]
    if tag in ("T", "V") and len(value) >= 2 and type(value[1]) is int:
        found.append(value[1])
        return  # a view's other fields are geometry
    if tag.__class__ is str and tag in _NUMBERS_ONLY:
        return
    for item in value:
        _collect(item, found)
