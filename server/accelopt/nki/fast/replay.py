"""Trace-only runs: replaying what an API call did when the same kernel statement runs again.

Inside a loop a kernel statement issues the same instructions every iteration; only the offsets
of the regions it touches, the loop iterations and the ids of the tiles it makes change. In a
trace-only run (no numerics) the first call of an API at a call site, with a given argument
*structure*, runs normally while its effects are logged relative to its arguments: the tiles it
read, the tiles it made, the records it emitted, the writes it noted. A later call from the same
site with the same structure replays the log: the same checks that depend on the run's state
(tile scopes, affine-loop write conflicts) run again, regions are shifted by the arguments'
offsets, records get the current loop frames. Everything else (shape rules, engines, dtypes,
sizes, bytes, flops, DMA chunking) was settled by the first call.

A log is compiled into a straight-line function (replaycode.py) that checks a call's arguments
have the logged structure and performs the logged effects. Logs belong to the kernel's code, so
later runs of the same loaded kernel (a correctness check runs it on several inputs) replay from
their first call on.

A call is replayable only if its log says everything it did. A call that changed something else
(an existing record or tile other than reading it, the loop-reduce state), a region that is not a
fixed box of a new tile or a fixed shift of one argument's offsets, a view reaching outside its
tensor, an argument of an unknown kind, or an error: such a site + structure is marked and always
runs normally. Numeric runs never replay.
"""

from __future__ import annotations

import enum
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki import calllog, ops
from accelopt.nki import context as _context
from accelopt.nki.context import KernelContext
from accelopt.nki.errors import _EMULATOR_DIR
from accelopt.nki.fast.replaycode import MISS, Unsupported, generate
from accelopt.nki.indexing import IndexExpr, Predicate, kept_by
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.tensor import Buffer, Tensor, View, par_dim
from accelopt.nki.trace import Region, TraceRecord

_SCALARS = frozenset({int, float, bool, str, type(None), complex})
_BY_IDENTITY = frozenset({types.FunctionType, types.BuiltinFunctionType, np.ufunc, Buffer})
_UNREPLAYABLE = object()  # a site + argument structure that always runs normally
_MAX_STRUCTURES_PER_SITE = 8


class _Unreplayable(Exception):
    """The call did something a log cannot express."""


# --- argument structure ----------------------------------------------------------------------


def _structure(value: Any, tiles: list[Any]) -> Any:
    """A hashable description of everything about an argument that can change what the API
    does, except the offsets of the regions it touches. Tiles are appended to `tiles` (in
    argument order) so regions can be expressed relative to them. Raises _Unreplayable."""
    cls = value.__class__
    if cls is View:
        tensor = value._tensor
        if value._arrays is not None or value._oob or tensor._alias is not None:
            raise _Unreplayable
        tiles.append(value)
        return (
            View,
            value.shape,
            value._terms,
            tensor.shape,
            tensor.dtype,
            tensor.buffer,
            tensor.block_dims,
            tensor._fresh,
            tensor._producer is None,
        )
    if cls is Tensor:
        if value._alias is not None or value._root is not None:
            raise _Unreplayable
        tiles.append(value)
        return (
            Tensor,
            value.shape,
            value.dtype,
            value.buffer,
            value.block_dims,
            value._fresh,
            value._producer is None,
        )
    if cls in _SCALARS:
        if cls is float and value != value:
            raise _Unreplayable  # NaN never equals itself: it would never be found again
        return (cls, value)
    if cls is LoopVar:
        return (LoopVar, int(value), value.loop_id)
    if cls is IndexExpr:
        if value.values is not None:
            raise _Unreplayable
        return (IndexExpr, value.sizes, value.coefs, value.offset)
    if cls is Predicate:
        key = _mask_key(value)
        if key is False:
            raise _Unreplayable
        return key
    if cls is tuple or cls is list:
        return (cls, tuple([_structure(v, tiles) for v in value]))
    if cls is par_dim:
        return (par_dim, value.size)
    if isinstance(value, np.generic):
        if value != value:
            raise _Unreplayable
        return (cls, value.item())
    if cls in _BY_IDENTITY or isinstance(value, (type, np.dtype, enum.Enum)):
        return value  # ops (ufuncs, nl functions), dtypes, buffers, engines: by identity/value
    raise _Unreplayable


def _mask_structure(mask: Predicate) -> tuple[Any, ...]:
    """A mask by what it selects rather than by its offsets: a tail mask such as
    ``-128 * i0 - i_p + 10943 >= 0`` has a new offset every iteration but keeps every row on all
    but the last. Each condition on one axis is described by the range of that axis it keeps
    (what resolving the mask against any instruction shape uses); conditions on constants by
    their truth. Conditions spanning several axes make the mask unreplayable."""
    if mask.values is not None:
        raise _Unreplayable
    conds = []
    for expr, op in mask.conds:
        kept = kept_by(expr, op)
        if kept is None:
            raise _Unreplayable
        conds.append((expr.sizes, expr.coefs, op, kept))
    return (Predicate, tuple(conds))


# --- recording -------------------------------------------------------------------------------


class Recorder:
    """Collects the effects of one API call (the context reports them while `ctx.recorder` is
    set)."""

    __slots__ = ("events", "ok")

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.ok = True

    def viewed(self, tensor: Tensor, line: int) -> None:
        self.events.append(("view", tensor, line))

    def registered(self, tensor: Tensor, name: str, line: int, is_input: bool, explicit_loops: bool) -> None:
        if explicit_loops or is_input:
            self.ok = False
        self.events.append(("tensor", tensor, name, line))

    def emitted(self, record: TraceRecord) -> None:
        self.events.append(("emit", record))

    def wrote(self, tensor: Tensor, region: Region, line: int, accumulate: bool) -> None:
        self.events.append(("write", tensor, region, line, accumulate))

    def refuse(self) -> None:
        self.ok = False


def _snapshot(tiles: list[Any]) -> list[tuple[Any, ...]]:
    """What an API may not change about its arguments (replay would not redo it)."""
    out = []
    for tile in tiles:
        tensor = tile._tensor if tile.__class__ is View else tile
        producer = tensor._producer
        out.append(
            (
                tensor._alias,
                producer,
                tensor._pmask,
                tensor._root,
                None
                if producer is None
                else (producer.writes, producer.dst_memory, producer.out_dtype, producer.accumulate),
                tile._assigned_at if tile.__class__ is View else None,
            )
        )
    return out


# --- the wrapper -----------------------------------------------------------------------------


class _Site:
    """One kernel call site of one API: the compiled replays, and every argument structure met
    (True: compiled; _UNREPLAYABLE: always runs normally)."""

    __slots__ = ("api", "closed", "replays", "structures")

    def __init__(self, api: Callable[..., Any]) -> None:
        self.api = api
        self.replays: list[Callable[..., Any]] = []
        self.structures: dict[Any, Any] = {}
        self.closed = False  # too many structures (arguments that change every call)


# Kernel code object id -> (the code, its sites). Replays depend only on the kernel's code and
# the argument structure, so they serve every run of a kernel (a correctness check runs it on
# several inputs); holding the code keeps its id unique. A site is keyed by its instruction
# offset alone (the API met there first) or, for another API called from the same offset
# (`op = nl.exp if a else nl.log; op(x)`), by (API, offset).
_Sites = dict[Any, _Site]
_BY_CODE: dict[int, tuple[types.CodeType, _Sites]] = {}
_MAX_CODES = 2_000  # kernels loaded earlier in a long-lived process are dropped past this


def _hold(code: types.CodeType) -> tuple[types.CodeType, _Sites]:
    if len(_BY_CODE) >= _MAX_CODES:
        _BY_CODE.clear()
    held = _BY_CODE[id(code)] = (code, {})
    return held


def _site(sites: _Sites, api: Callable[..., Any], offset: int) -> _Site:
    entry = sites.get(offset)
    if entry is None:
        entry = sites[offset] = _Site(api)
        return entry
    key = (api, offset)
    entry = sites.get(key)
    if entry is None:
        entry = sites[key] = _Site(api)
    return entry


def replayable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernel-facing API function so trace-only runs replay repeated calls (see module
    docstring), and numeric runs that are to be verified log them (calllog.py). Other numeric
    runs, nested API calls and calls outside a run go straight through."""

    name = calllog.register(fn)

    @functools.wraps(fn)
    def api(*args: Any, **kwargs: Any) -> Any:
        ctx = _context._ACTIVE  # active_context(), without the call
        if ctx is None or ctx.api_depth:
            return fn(*args, **kwargs)
        if ctx.numerics:
            log = ctx._call_log  # a run to be verified logs its calls (calllog.py)
            return fn(*args, **kwargs) if log is None else log.call(ctx, name, fn, args, kwargs)
        if not ctx.fast_paths:
            return fn(*args, **kwargs)  # trace-only with the fast paths off: the semantic core only
        # the kernel statement calling: the first frame outside the emulator, if in the kernel
        frame = sys._getframe(1)
        filename = frame.f_code.co_filename
        while filename != ctx.kernel_path:
            if not filename.startswith(_EMULATOR_DIR) or frame.f_back is None:
                return _run(ctx, fn, args, kwargs)
            frame = frame.f_back
            filename = frame.f_code.co_filename
        code = frame.f_code
        held = _BY_CODE.get(id(code))  # by id: code objects hash slowly
        if held is None or held[0] is not code:
            held = _hold(code)
        sites = held[1]
        entry = sites.get(frame.f_lasti)
        if entry is None or entry.api is not api:
            entry = _site(sites, api, frame.f_lasti)
        for replay in entry.replays:
            result = replay(ctx, args, kwargs)
            if result is not MISS:
                return result
        if entry.closed:
            return _run(ctx, fn, args, kwargs)
        tiles: list[Any] = []
        try:
            structure = (
                tuple([_structure(a, tiles) for a in args]),
                tuple([(k, _structure(v, tiles)) for k, v in kwargs.items()]),
            )
        except _Unreplayable:
            return _run(ctx, fn, args, kwargs)
        if structure in entry.structures:
            return _run(ctx, fn, args, kwargs)
        if len(entry.structures) >= _MAX_STRUCTURES_PER_SITE:
            entry.closed = True
            return _run(ctx, fn, args, kwargs)
        return _record(ctx, fn, args, kwargs, tiles, entry, structure)

    return api


def _run(ctx: KernelContext, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx.api_depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        ctx.api_depth -= 1


def _record(
    ctx: KernelContext,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    tiles: list[Any],
    entry: _Site,
    structure: tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]],
) -> Any:
    """Run the call normally while logging its effects; compile a replay if the log says
    everything the call did."""
    recorder = Recorder()
    before = _snapshot(tiles)
    reduce_state = len(ctx.loop_reduce_state)
    entry.structures[structure] = _UNREPLAYABLE  # until the call has completed and compiled
    ctx.recorder = recorder
    ctx.api_depth += 1
    try:
        result = fn(*args, **kwargs)
    finally:
        ctx.recorder = None
        ctx.api_depth -= 1
    if recorder.ok and _snapshot(tiles) == before and len(ctx.loop_reduce_state) == reduce_state:
        try:
            replay = generate(*structure, _mask_key, _plain_key, recorder.events, tiles, result)
        except Unsupported:
            return result
        entry.replays.append(replay)
        entry.structures[structure] = True
    return result


def _mask_key(mask: Predicate) -> Any:
    """`_mask_structure`, remembered on the mask (a tail mask is built once and used by every
    instruction of an iteration); False if the mask is unreplayable."""
    key = mask._replay_key
    if key is None:
        try:
            key = _mask_structure(mask)
        except _Unreplayable:
            key = False
        mask._replay_key = key
    return key


def _plain_key(value: Any) -> Any:
    """The structure of a tile-free argument (e.g. a list of axes), None if unreplayable."""
    try:
        return _structure(value, [])
    except _Unreplayable:
        return None


def make_replayable(namespace: dict[str, Any], names: tuple[str, ...]) -> None:
    """Replace the API functions `names` of a module namespace by their replayable wrappers
    (still usable as `op=` arguments where the original was)."""
    for name in names:
        original = namespace[name]
        wrapped = replayable(original)
        ops.alias(wrapped, original)
        namespace[name] = wrapped
