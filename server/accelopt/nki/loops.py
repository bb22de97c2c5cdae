"""Loops: ``nl.affine_range``, ``nl.sequential_range``, ``nl.static_range`` and the kernel's
plain ``range``. Functionally every loop runs in order; each records itself in the trace (loop
id, kind, trip count) and keeps the current iteration in the context so every instruction
carries its loop nest."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from accelopt.nki.context import active_context
from accelopt.nki.fast import fastforward, loopbody
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.trace import LoopKind


def _traced(rng: range, kind: LoopKind, nki_scope: bool, site_frame: Any = None) -> Iterator[int]:
    ctx = active_context()
    if ctx is None:
        yield from rng
        return
    caller = sys._getframe(1) if site_frame is None else site_frame
    line = ctx.line()
    # the site by code id: code objects hash slowly, and the kernel's code outlives the run
    scope_site = (id(caller.f_code), caller.f_lasti)
    scope = ctx.enter_loop(kind, len(rng), line, scope_site, nki_scope)
    log = None
    try:
        variables = _loop_vars(scope.loop_id, rng)
        if (
            not ctx.numerics
            and ctx.fast_paths
            and len(rng) >= fastforward.MIN_TRIP
            and caller.f_code.co_filename == ctx.kernel_path
            and (body := loopbody.body_at(ctx.kernel_path, line)) is not None
            and (free_tiles := body.bindings(caller)) is not None
        ):
            shared = variables if isinstance(variables, tuple) else None
            loop_id = scope.loop_id

            def variable(k: int) -> LoopVar:
                return shared[k] if shared is not None else LoopVar(rng[k], loop_id)

            yield from fastforward.iterate(
                ctx, scope, len(rng), variable, free_tiles, body.moving_masks, body.last_unread
            )
            return
        log = ctx._call_log if not ctx.api_depth else None  # a run to be verified (calllog.py)
        if log is not None:
            log.loop_enter(kind.value, len(rng), line, scope_site, nki_scope, scope.loop_id)
        for n, var in enumerate(variables):
            if n:
                ctx.set_iteration(scope, n)
                if log is not None:
                    log.loop_iteration(n)
            yield var
    finally:
        ctx.exit_loop(scope)
        if log is not None:
            log.loop_exit()


def traced_range(rng: range, kind: LoopKind, site_frame: Any) -> Iterator[int]:
    """The iterations of a loop the emulator drives itself (nl.fori_loop, nl.dynamic_range),
    recorded at the kernel statement of `site_frame` (the frame that called the loop API)."""
    return _traced(rng, kind, False, site_frame)


# (loop id, range) -> the loop's variables. A LoopVar is a value (an int and a loop id), so an
# inner loop entered again and again, or run again, hands out the same objects.
_VARS: dict[tuple[int, range], tuple[LoopVar, ...]] = {}
_MAX_SHARED_TRIP = 4096  # longer loops make their variables as they go
_MAX_SHARED_LOOPS = 10_000


def _loop_vars(loop_id: int, rng: range) -> Iterator[LoopVar] | tuple[LoopVar, ...]:
    key = (loop_id, rng)
    values = _VARS.get(key)
    if values is None:
        if len(rng) > _MAX_SHARED_TRIP:
            return (LoopVar(i, loop_id) for i in rng)
        if len(_VARS) >= _MAX_SHARED_LOOPS:
            _VARS.clear()
        values = _VARS[key] = tuple([LoopVar(i, loop_id) for i in rng])
    return values


class _NkiLoop:
    __slots__ = ("kind", "nki_scope", "range")

    def __init__(self, kind: LoopKind, nki_scope: bool, *args: Any) -> None:
        self.kind = kind
        self.nki_scope = nki_scope
        self.range = range(*(int(a) for a in args))

    def __iter__(self) -> Iterator[int]:
        return _traced(self.range, self.kind, self.nki_scope)

    def __len__(self) -> int:
        return len(self.range)

    def __repr__(self) -> str:
        return f"{self.kind.value}_range({self.range.start}, {self.range.stop}, {self.range.step})"


def affine_range(*args: Any, **_directives: Any) -> _NkiLoop:
    """Independent iterations (they may overlap in hardware)."""
    return _NkiLoop(LoopKind.AFFINE, True, *args)


def sequential_range(*args: Any, **_directives: Any) -> _NkiLoop:
    """Iterations depend on each other and run in order."""
    return _NkiLoop(LoopKind.SEQUENTIAL, True, *args)


def static_range(*args: Any, **_directives: Any) -> _NkiLoop:
    """Fully unrolled at trace time."""
    return _NkiLoop(LoopKind.STATIC, False, *args)


class KernelRange:
    """The kernel module's ``range``: behaves like the builtin and records itself as a sequential
    loop when iterated during a run."""

    __slots__ = ("_range",)

    def __init__(self, *args: Any) -> None:
        self._range = range(*args)

    def __iter__(self) -> Iterator[int]:
        return _traced(self._range, LoopKind.SEQUENTIAL, False)

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, key: Any) -> Any:
        return self._range[key]

    def __contains__(self, value: Any) -> bool:
        return value in self._range

    def __reversed__(self) -> Iterator[int]:
        return reversed(self._range)

    def __eq__(self, other: object) -> bool:
        return self._range == (other._range if isinstance(other, KernelRange) else other)

    def __hash__(self) -> int:
        return hash(self._range)

    def __repr__(self) -> str:
        return repr(self._range)

    @property
    def start(self) -> int:
        return self._range.start

    @property
    def stop(self) -> int:
        return self._range.stop

    @property
    def step(self) -> int:
        return self._range.step

    def count(self, value: int) -> int:
        return self._range.count(value)

    def index(self, value: int) -> int:
        return self._range.index(value)
