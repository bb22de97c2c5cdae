"""Engine registers and the loops they drive: ``nisa.register_alloc/move/load/store``,
``VirtualRegister`` / ``NkiScalar`` (NKI 0.7), ``nl.fori_loop``, ``nl.while_loop`` and the
``nl.dynamic_range`` of NKI 0.2-0.6 (removed in 0.7).

A register holds one 32-bit integer (NKI migration guide Beta 1 -> Beta 2, "Dynamic control
flow"; nki.language.fori_loop / while_loop, Neuron SDK 2.33). The emulator runs a compiled loop
as the Python loop the docs give as its meaning (``for i in range(lower, upper, step):
body_fun(i)``; ``r = init; while r != 0: r = body_fun(r)``) and records it as a sequential loop.

A register loaded from device memory (``register_load``) has a value only in a numeric run; a
trace-only run has no tensor values, so such a register cannot bound a loop there (an NKI-style
error says so) and cannot be stored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from accelopt.nki.context import current
from accelopt.nki.loops import traced_range
from accelopt.nki.trace import LoopKind

_INT32 = (-(2**31), 2**31 - 1)


class VirtualRegister:
    """An engine register (``nisa.register_alloc``); its value is None while unknown (loaded
    from memory in a trace-only run)."""

    __slots__ = ("_value",)

    def __init__(self, value: int | None = 0) -> None:
        self._value = value

    def _known(self, what: str) -> int:
        if self._value is None:
            ctx = current()
            raise ctx.error(
                "err_dynamic_value_unknown",
                f"{what} reads a register loaded from device memory (nisa.register_load); its value "
                "exists only when the kernel runs with numerics, not in a trace-only profile",
            )
        return self._value

    def __int__(self) -> int:
        return self._known("this use")

    def __index__(self) -> int:
        return self._known("this use")

    def __bool__(self) -> bool:
        return self._known("a while loop over a register") != 0

    def __eq__(self, other: object) -> bool:
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        return int(self) != other

    def __hash__(self) -> int:
        return id(self)

    def __add__(self, other: Any) -> int:
        return int(self) + int(other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> int:
        return int(self) - int(other)

    def __rsub__(self, other: Any) -> int:
        return int(other) - int(self)

    def __mul__(self, other: Any) -> int:
        return int(self) * int(other)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> int:
        return int(self) // int(other)

    def __lt__(self, other: Any) -> bool:
        return int(self) < int(other)

    def __le__(self, other: Any) -> bool:
        return int(self) <= int(other)

    def __gt__(self, other: Any) -> bool:
        return int(self) > int(other)

    def __ge__(self, other: Any) -> bool:
        return int(self) >= int(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'?' if self._value is None else self._value})"


class NkiScalar(VirtualRegister):
    """NKI 0.7's scalar value on an engine (the future replacement of VirtualRegister)."""

    __slots__ = ()


def register_alloc(x: Any = None, **_: Any) -> NkiScalar:
    """A new register, holding `x` (0 if not given)."""
    return NkiScalar(0 if x is None else _as_int(x))


def register_move(dst: VirtualRegister, imm: Any = None, **kwargs: Any) -> None:
    """``dst = imm`` (an immediate value)."""
    value = kwargs.get("src", imm)
    _check_register(dst, "nisa.register_move")
    dst._value = _as_int(value)


def register_load(dst: VirtualRegister, src: Any, **_: Any) -> None:
    """``dst = src[0, ...]``: one element of an on-chip tile into a register (numeric runs)."""
    from accelopt.nki.instructions import to_view

    _check_register(dst, "nisa.register_load")
    ctx = current()
    view = to_view(ctx, src, ctx.line())
    if ctx.numerics and view._tensor._data is not None:
        dst._value = int(np.asarray(view._read()).reshape(-1)[0])
    else:
        dst._value = None


def register_store(dst: Any, src: VirtualRegister, **_: Any) -> None:
    """``dst[...] = src``: a register's value into a (1-element) on-chip tile (performed, and
    logged for verification, as that tile assignment)."""
    from accelopt.nki.instructions import assign
    from accelopt.nki.tensor import Tensor

    _check_register(src, "nisa.register_store")
    ctx = current()
    if src._value is None and ctx.numerics:
        src._known("nisa.register_store")
    value = src._value if src._value is not None else 0
    assign(dst._full_view() if isinstance(dst, Tensor) else dst, value)


def _check_register(value: Any, api: str) -> None:
    if not isinstance(value, VirtualRegister):
        raise current().error(
            "err_unsupported_operand", f"{api} needs a register from nisa.register_alloc, got {type(value).__name__}"
        )


def _as_int(value: Any) -> int:
    if isinstance(value, VirtualRegister):
        return int(value)
    number = int(value)
    if not _INT32[0] <= number <= _INT32[1]:
        raise current().error("err_register_overflow", f"a register holds 32-bit integers, got {number}")
    return number


def _bound(value: Any, what: str) -> int:
    if isinstance(value, VirtualRegister):
        return value._known(what)
    return int(value)


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any], Any], step: int = 1) -> None:
    """``for i in range(lower, upper, step): body_fun(i)`` as a compiled loop."""
    lo = _bound(lower, "nl.fori_loop's lower bound")
    hi = _bound(upper, "nl.fori_loop's upper bound")
    if int(step) <= 0:
        raise current().error("err_unsupported_loop", f"nl.fori_loop needs a positive step, got {step}")
    caller = sys._getframe(1)
    for i in traced_range(range(lo, hi, int(step)), LoopKind.SEQUENTIAL, caller):
        body_fun(i)


def while_loop(init: Any, body_fun: Callable[[Any], Any]) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` as a compiled loop."""
    ctx = current()
    condition = init
    caller = sys._getframe(1)
    for _ in _open_loop(ctx, caller):
        if _bound(condition, "nl.while_loop's condition") == 0:
            return
        condition = body_fun(condition)


def _open_loop(ctx: Any, caller: Any) -> Iterator[int]:
    """A sequential loop of unknown trip count in the trace (while_loop)."""
    line = ctx.line()
    site = (id(caller.f_code), caller.f_lasti)
    scope = ctx.enter_loop(LoopKind.SEQUENTIAL, 0, line, site, False)
    log = ctx._call_log if not ctx.api_depth else None  # a run to be verified (calllog.py)
    if log is not None:
        log.loop_enter(LoopKind.SEQUENTIAL.value, 0, line, site, False, scope.loop_id)
    n = 0
    try:
        while True:
            if n:
                ctx.set_iteration(scope, n)
                if log is not None:
                    log.loop_iteration(n)
            info = ctx.trace.loops[scope.loop_id]
            info.trip_count = max(info.trip_count, n + 1)
            yield n
            n += 1
    finally:
        ctx.exit_loop(scope)
        if log is not None:
            log.loop_exit()


class dynamic_range:
    """``for i in nl.dynamic_range(start, stop, step)`` (NKI 0.2-0.6): bounds may be registers."""

    __slots__ = ("_args",)

    def __init__(self, *args: Any) -> None:
        self._args = args

    def __iter__(self) -> Iterator[int]:
        bounds = [_bound(a, "nl.dynamic_range's bounds") for a in self._args]
        return traced_range(range(*bounds), LoopKind.SEQUENTIAL, sys._getframe(1))
