"""Trace-only runs: synthesizing the middle iterations of a regular loop instead of running them.

Most kernel loops issue the same instructions every iteration, at offsets that move by a fixed
step. For a loop whose body the source shows to be of that kind (loopbody.py), a trace-only run
runs iterations 0 and 1 and compares what they did; if iteration 1 is iteration 0 moved by one
step it writes iterations 2 to n-2 from iteration 1's effects without running the kernel's
Python, then runs iteration n-1 for real. Iteration 0 often differs (fresh tiles, lazy
initialisation): then iteration 2 runs too, and iterations 1 and 2 are compared instead. What an
iteration does, and so what is compared and synthesized:

- the records it emitted: every field equal but the regions, whose boxes move by a fixed step,
  and whose tensor is either made before the loop (the same id) or in the iteration (the id
  moves by the number of tensor ids an iteration takes);
- the tiles it made and kept (their TensorInfo, with the iteration in their loop frames);
- the writes it noted: affine-loop conflicts are checked again for every synthesized write;
- what it changed on tiles made before the loop (the body's free tiles and loop-reduce
  accumulators): in both iterations the same, with an iteration's own records as producers;
- the mask conditions it made, if they move with the loop: each must keep the same range of its
  axis in every synthesized iteration.

Anything else (a difference the two iterations do not share, a change to the trace's loops or
to older records, a tile carried from one iteration to the next) and the loop just runs on. A
synthesized region that would leave its tensor, or a mask that would keep something else, stops
synthesis at that iteration, so the real run meets it where it happens. The last iteration runs
for real, so the kernel's Python values after the loop are the ones a full run leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from accelopt.nki.context import KernelContext, LoopScope, loop_frame
from accelopt.nki.fast.fastforwardcode import (
    Box,
    KeptTile,
    LoggedWrite,
    RegionPlan,
    Template,
    record_maker,
    region_maker,
)
from accelopt.nki.indexing import kept_by
from accelopt.nki.tensor import Tensor, View
from accelopt.nki.trace import LoopFrame, Region, TraceRecord

MIN_TRIP = 4  # iterations 0, 1 and n-1 always run: below this nothing would be synthesized

# the fields of a record that are the same in every iteration (the others move with it)
_same_every_iteration = attrgetter(
    *[f for f in TraceRecord.__slots__ if f not in ("index", "reads", "writes", "loops")]
)


@dataclass(slots=True)
class _Mark:
    """The run's state at an iteration boundary (what an iteration's effects are measured from)."""

    conditions: int
    records: int
    tid: int
    pending: int
    infos: int
    writes: int
    loops: tuple[tuple[int, int], ...]
    reduce_keys: int
    tiles: list[tuple[Any, ...]]  # _tile_state of each tile made before the loop
    producers: list[tuple[Any, ...]]  # mutable fields of those tiles' producing records


def _tile_state(tile: Tensor) -> tuple[Any, ...]:
    return (
        tile._written,
        tile._fresh,
        tile._exact is None,
        tile._producer,
        tile._pmask,
        tile._alias,
        tile._root,
    )


def _mark(ctx: KernelContext, tiles: list[Tensor]) -> _Mark:
    log = ctx.write_log
    conditions = ctx.condition_log
    return _Mark(
        0 if conditions is None else len(conditions),
        len(ctx.trace.records),
        ctx._next_tensor_id,
        len(ctx._pending),
        len(ctx.trace.tensors),
        0 if log is None else len(log),
        tuple((loop_id, info.trip_count) for loop_id, info in ctx.trace.loops.items()),
        len(ctx.loop_reduce_state),
        [_tile_state(t) for t in tiles],
        [() if t._producer is None else _mutable_fields(t._producer) for t in tiles],
    )


# what assigning a fresh tile changes on its producing record
_mutable_fields = attrgetter("writes", "dst_memory", "out_dtype", "accumulate")


class _Different(Exception):
    """The later iteration compared is not the earlier one moved by one step."""


def iterate(
    ctx: KernelContext,
    scope: LoopScope,
    n: int,
    var: Callable[[int], int],
    free_tiles: list[Tensor | View],
    moving_masks: bool,
    last_unread: bool = False,
) -> Iterator[int]:
    """The variables `var(k)` of a loop of `n` >= MIN_TRIP iterations whose body loopbody.py
    accepted and whose free names bound the tiles `free_tiles`: iterations run or synthesized as
    the module docstring says. `moving_masks`: the body makes masks that move with the loop;
    `last_unread`: nothing outside the loop reads what an iteration binds, so the last iteration
    may be synthesized too."""
    views = [(v, v._assigned_at) for v in free_tiles if v.__class__ is View]
    owner = ctx.write_log is None
    if owner:
        ctx.write_log = []
    owns_conditions = moving_masks and ctx.condition_log is None
    if owns_conditions:
        ctx.condition_log = []
    learned = None
    try:
        # Iteration 0 often differs (fresh tiles, lazy initialisation): then iterations 1 and 2
        # are compared instead of 0 and 1.
        tiles = _tiles_before_loop(ctx, free_tiles)
        marks = [_mark(ctx, tiles)]
        yield var(0)
        iteration_0_tiles = tiles
        tiles = _tiles_before_loop(ctx, free_tiles)  # with loop-reduce accumulators made in it
        marks.append(_mark(ctx, tiles))
        ctx.set_iteration(scope, 1)
        yield var(1)
        marks.append(_mark(ctx, tiles))
        if marks[1].reduce_keys == marks[0].reduce_keys:
            learned = _learned(ctx, scope, iteration_0_tiles, marks, 1, n, moving_masks, views)
        if learned is None:
            ctx.set_iteration(scope, 2)
            yield var(2)
            marks.append(_mark(ctx, tiles))
            learned = _learned(ctx, scope, tiles, marks[1:], 2, n, moving_masks, views)
    finally:
        if owner:
            ctx.write_log = None
        if owns_conditions:
            ctx.condition_log = None
    resume = len(marks) - 1  # the first iteration not run yet
    if learned is not None:
        template, producers = learned
        last = min(n - 1 if last_unread else n - 2, template.last_synthesizable)
        if last >= resume:
            produced = _synthesize(ctx, scope, template, resume, last)
            for (tile, _), record in zip(producers, produced):
                tile._producer = record
            ctx._next_tensor_id = marks[-1].tid + (last - resume + 1) * template.ids_per_iteration
            resume = last + 1
    for k in range(resume, n):
        ctx.set_iteration(scope, k)
        yield var(k)


def _learned(
    ctx: KernelContext,
    scope: LoopScope,
    tiles: list[Tensor],
    marks: list[_Mark],
    later: int,
    n: int,
    moving_masks: bool,
    views: list[tuple[View, int]],
) -> tuple[Template, list[tuple[Tensor, int]]] | None:
    """The template learned from iterations `later - 1` and `later` (marks: before, between and
    after them), if they are one step apart."""
    if any(v._assigned_at != at for v, at in views):
        return None
    try:
        first, second, third = marks[:3]
        learned = _learn(ctx, scope, tiles, first, second, third, later, n)
        if learned is not None and moving_masks:
            template = learned[0]
            template.last_synthesizable = _last_same_masks(
                ctx, first, second, third, later, template.last_synthesizable
            )
    except _Different:
        return None
    return learned


def _tiles_before_loop(ctx: KernelContext, free_tiles: list[Tensor | View]) -> list[Tensor]:
    """The tiles made before the loop that an iteration can change: the body's free tiles (and
    the tensors they reshape) and the loop-reduce accumulators."""
    tiles: dict[int, Tensor] = {}
    for tile in free_tiles:
        tensor: Tensor | None = tile._tensor if isinstance(tile, View) else tile
        while tensor is not None:
            tiles[id(tensor)] = tensor
            tensor = tensor._root
    for acc in ctx.loop_reduce_state.values():
        tiles[id(acc)] = acc
    return list(tiles.values())


# --- learning ----------------------------------------------------------------------------------


def _learn(
    ctx: KernelContext,
    scope: LoopScope,
    tiles: list[Tensor],
    first: _Mark,
    second: _Mark,
    third: _Mark,
    later: int,
    n: int,
) -> tuple[Template, list[tuple[Tensor, int]]] | None:
    """The template of iteration `later` (compared with `later - 1`; marks before, between and
    after them), and the tiles made before the loop whose producer is an iteration's record
    (with that record's place in the iteration); None if the two iterations differ in a way no
    step explains (or raises _Different)."""
    if not (first.infos == second.infos == third.infos and first.loops == second.loops == third.loops):
        return None
    count = third.records - second.records
    ids = third.tid - second.tid
    if count != second.records - first.records or ids != second.tid - first.tid:
        return None
    depth = scope.depth
    records = ctx.trace.records
    last_in_bounds = n - 1  # moving regions stay inside their tensors up to here

    def region_plan(tid1: int, box1: Box, r2: Region) -> RegionPlan:
        """How region `r2` of the later iteration moves on from (tid1, box1) of the earlier."""
        nonlocal last_in_bounds
        tid2 = r2.tensor_id
        if tid2 >= second.tid:  # made in the iteration
            if tid1 != tid2 - ids or tid1 < first.tid:
                raise _Different
            made = True
        elif tid1 == tid2 and tid2 < first.tid:
            made = False
        else:
            raise _Different  # a tile of the earlier iteration used in the later one
        box2 = r2.box
        if len(box1) != len(box2):
            raise _Different
        if box1 == box2:
            return RegionPlan(tid2, made, box2, None, r2)
        step = tuple((lo2 - lo1, hi2 - hi1) for (lo1, hi1), (lo2, hi2) in zip(box1, box2))
        shape = _shape_of(ctx, tid2)
        if shape is None or len(shape) != len(box2):
            raise _Different
        for (lo, hi), (dlo, dhi), size in zip(box2, step, shape):
            if dlo < 0:
                last_in_bounds = min(last_in_bounds, later + lo // -dlo)
            if dhi > 0:
                last_in_bounds = min(last_in_bounds, later + (size - hi) // dhi)
        return RegionPlan(tid2, made, box2, step, r2)

    own1, own2 = loop_frame(scope.loop_id, later - 1), loop_frame(scope.loop_id, later)

    def moves(f1: tuple[LoopFrame, ...], f2: tuple[LoopFrame, ...]) -> bool:
        """Whether loop frames of the two iterations are one nest at this loop's iteration
        (True) or one nest outside it (False)."""
        # loop frames are shared values (context.loop_frame): identity first, equality past them
        if (
            len(f1) == len(f2) > depth
            and (f1[depth] is own1 or f1[depth] == own1)
            and (f2[depth] is own2 or f2[depth] == own2)
        ):
            if f1[:depth] == f2[:depth] and f1[depth + 1 :] == f2[depth + 1 :]:
                return True
        elif f1 == f2 and own2 not in f2:
            return False
        raise _Different

    plans = []
    for r1, r2 in zip(records[first.records : second.records], records[second.records : third.records]):
        if _same_every_iteration(r1) != _same_every_iteration(r2):
            raise _Different
        if (
            not moves(r1.loops, r2.loops)
            or len(r1.reads) != len(r2.reads)
            or len(r1.writes) != len(r2.writes)
        ):
            raise _Different
        reads = tuple([region_plan(a.tensor_id, a.box, b) for a, b in zip(r1.reads, r2.reads)])
        written = tuple([region_plan(a.tensor_id, a.box, b) for a, b in zip(r1.writes, r2.writes)])
        plans.append((r2, reads, written))

    pending = ctx._pending
    kept = []
    for j in range(ids):
        e1, e2 = pending.get(first.tid + j), pending.get(second.tid + j)
        if (e1 is None) != (e2 is None):
            raise _Different
        if e1 is None or e2 is None:
            continue
        t1, name1, line1, input1, frames1 = e1
        t2, name2, line2, input2, frames2 = e2
        if (name1, line1, input1) != (name2, line2, input2):
            raise _Different
        if (t1.shape, t1.dtype, t1.memory, t1.block_dims) != (t2.shape, t2.dtype, t2.memory, t2.block_dims):
            raise _Different
        kept.append(KeptTile(second.tid + j, e2, moves(frames1, frames2)))
    if second.pending - first.pending != len(kept) or third.pending - second.pending != len(kept):
        return None  # an iteration forgot a tile made before it

    log = ctx.write_log
    assert log is not None
    if third.writes - second.writes != second.writes - first.writes:
        return None
    # the record write each logged region is (a retargeted write notes the record's region)
    record_writes = {
        id(region): (i, j) for i, (r2, _, _) in enumerate(plans) for j, region in enumerate(r2.writes)
    }
    writes = []
    position = 2 * depth + 1
    for w1, w2 in zip(log[first.writes : second.writes], log[second.writes : third.writes]):
        tid1, alloc1, region1, line1, accumulate1, ints1 = w1
        tid2, alloc2, region2, line2, accumulate2, ints2 = w2
        if (line1, accumulate1) != (line2, accumulate2) or len(ints1) != len(ints2) or len(ints2) <= position:
            raise _Different
        if ints1[:position] != ints2[:position] or ints1[position + 1 :] != ints2[position + 1 :]:
            raise _Different
        plan = region_plan(tid1, region1.box, region2)
        if not plan.made and alloc1 is not alloc2 and alloc1 != alloc2:
            raise _Different
        writes.append(
            LoggedWrite(
                tid2, plan.made, alloc2, plan, line2, accumulate2, ints2, record_writes.get(id(region2))
            )
        )

    producers = []
    for i, tile in enumerate(tiles):
        for before in (first, second):
            producer = before.tiles[i][3]
            if before.tiles[i][1] and producer is not None and producer.index < before.records:
                # a fresh tile's record can still be retargeted: the iteration must leave it be
                if _mutable_fields(producer) != before.producers[i]:
                    raise _Different
        state2, state3 = second.tiles[i], third.tiles[i]
        if not _same_change(state2, state3, first.records, second.records - first.records):
            raise _Different
        producer = state3[3]
        if producer is not None and producer.index >= second.records:
            producers.append((tile, producer.index - second.records))
    if third.reduce_keys != second.reduce_keys or second.reduce_keys != first.reduce_keys:
        if not _reduce_keys_die(ctx, scope, first, second, third, later):
            return None
    template = Template(plans, kept, writes, [index for _, index in producers], ids, last_in_bounds, later)
    return template, producers


def _last_same_masks(
    ctx: KernelContext, first: _Mark, second: _Mark, third: _Mark, later: int, last: int
) -> int:
    """The last iteration (up to `last`) in which every mask condition the body makes keeps what
    it kept in the template iteration. A condition on one axis keeps a range of it that moves
    monotonically with the loop, so it keeps the same range up to the first iteration it does not."""
    log = ctx.condition_log
    assert log is not None
    ones, twos = log[first.conditions : second.conditions], log[second.conditions : third.conditions]
    if len(ones) != len(twos):
        raise _Different
    for (expr1, op1), (expr2, op2) in zip(ones, twos):
        if op1 != op2 or expr1.values is not None or expr1.sizes != expr2.sizes or expr1.coefs != expr2.coefs:
            raise _Different
        at_later = kept_by(expr2, op2)
        if at_later is None:
            raise _Different  # a condition across axes: what it keeps is not a range
        step = expr2.offset - expr1.offset
        if not step:
            continue
        if kept_by(expr1, op1) != at_later:
            raise _Different
        for k in range(later + 1, last + 1):
            if kept_by(expr2, op2, expr2.offset + (k - later) * step) != at_later:
                last = k - 1
                break
    return last


def _same_change(earlier: tuple[Any, ...], later: tuple[Any, ...], start: int, step: int) -> bool:
    """Whether a tile was left in the same state by two iterations (_tile_state after each; the
    earlier iteration's records start at `start`, the later's `step` records on). Objects must
    be the same ones; a producer may be each iteration's own record at the same place."""
    for n, (a, b) in enumerate(zip(earlier, later)):
        if a is b:
            continue
        if n == 3 and a is not None and b is not None:  # the producer
            if start <= a.index < start + step and b.index == a.index + step:
                continue
            return False
        if n > 2 or a != b:  # masks, aliases and roots by identity; flags by value
            return False
    return True


def _shape_of(ctx: KernelContext, tid: int) -> tuple[int, ...] | None:
    entry = ctx._pending.get(tid)
    if entry is not None:
        return entry[0].shape
    info = ctx.trace.tensors.get(tid)
    return None if info is None else info.shape


def _reduce_keys_die(
    ctx: KernelContext, scope: LoopScope, first: _Mark, second: _Mark, third: _Mark, later: int
) -> bool:
    """Loop-reduce accumulators made in an iteration are keyed by its loop frames: no later
    iteration finds them, so synthesized iterations need not make them."""
    added1 = second.reduce_keys - first.reduce_keys
    if added1 != third.reduce_keys - second.reduce_keys or added1 < 0:
        return False
    keys = list(ctx.loop_reduce_state)[first.reduce_keys :]
    for n, key in enumerate(keys):
        iteration = later - 1 if n < added1 else later
        if loop_frame(scope.loop_id, iteration) not in key[2]:
            return False
    return True


# --- synthesis ---------------------------------------------------------------------------------


def _synthesize(
    ctx: KernelContext, scope: LoopScope, template: Template, start: int, last: int
) -> list[TraceRecord]:
    """Iterations start..last from the template; returns the last one's records that tiles made
    before the loop point to (template.producer_records)."""
    depth = scope.depth
    position = 2 * depth + 1
    ids = template.ids_per_iteration
    groups: dict[int, int] = {}
    heads: list[tuple[tuple[LoopFrame, ...], tuple[LoopFrame, ...]]] = []

    def group(frames: tuple[LoopFrame, ...]) -> int:
        """Records share loop-frame tuples: each distinct one is moved once per iteration."""
        g = groups.get(id(frames))
        if g is None:
            g = groups[id(frames)] = len(heads)
            heads.append((frames[:depth], frames[depth + 1 :]))
        return g

    kept = [(k.tid, *k.entry, group(k.entry[4]) if k.frames_move else -1) for k in template.kept]
    makers = [(record_maker(r, reads, writes), group(r.loops)) for r, reads, writes in template.records]
    writes = [
        (
            w.tid,
            w.made,
            w.alloc,
            w.line,
            w.accumulate,
            _needs_checks(ctx, scope, w, start - template.iteration, last - template.iteration),
            w.ints[:position],
            w.ints[position + 1 :],
            w.record_write if w.record_write is not None else region_maker(w.plan),
        )
        for w in template.writes
    ]
    records = ctx.trace.records
    pending = ctx._pending
    log = ctx.write_log
    produced: list[TraceRecord] = []
    for k in range(start, last + 1):
        ctx.set_iteration(scope, k)
        steps = k - template.iteration
        shift = steps * ids
        own = loop_frame(scope.loop_id, k)
        frames = [(*head, own, *tail) for head, tail in heads]
        for tid, tensor, name, line, is_input, alloc, g in kept:
            pending[tid + shift] = (tensor, name, line, is_input, alloc if g < 0 else frames[g])
        produced = [make(records, steps, shift, frames[g]) for make, g in makers]
        check = ctx.check_affine_write if ctx.affine_scopes else None
        if log is None and check is None:
            continue
        for tid, made, alloc, line, accumulate, checked, head, tail, source in writes:
            if isinstance(source, tuple):
                region = produced[source[0]].writes[source[1]]
            else:
                region = source(steps, shift)
            ints = (*head, k, *tail)
            if made:
                tid += shift
            if log is not None:
                log.append((tid, alloc, region, line, accumulate, ints))
            if checked and check is not None:
                check(tid, alloc, region, line, ints)
    return [produced[i] for i in template.producer_records]


def _needs_checks(
    ctx: KernelContext, scope: LoopScope, write: LoggedWrite, first_step: int, last_step: int
) -> bool:
    """Whether a synthesized write must go through `check_affine_write` in every iteration.
    Not when no affine loop would check it (an accumulation, a tile made in the iteration, one
    allocated inside every affine loop), nor when this loop's own check is the only one and no
    synthesized iteration's region meets the one iteration 0 wrote at that place: that check
    compares with one fixed region, so the answer for all iterations is worked out at once."""
    if write.accumulate or write.made:
        return False
    checking = [s for s in ctx.affine_scopes if s not in write.alloc]
    if not checking:
        return False
    if checking != [scope]:
        return True  # an enclosing loop's check: keyed by this loop's iteration, so per iteration
    first = scope.first_writes.get((write.tid, write.line, write.ints[2 * scope.depth + 2 :]))
    return first is not None and meets(first.box, write.plan.box, write.plan.step, first_step, last_step)


def meets(fixed: Box, box: Box, step: Box | None, first_step: int, last_step: int) -> bool:
    """Whether `box` moved by `s * step`, for some s in first_step..last_step, overlaps `fixed`
    (every dimension's half-open ranges intersect, as check_affine_write tests)."""
    low, high = first_step, last_step
    for (a0, a1), (lo, hi), (dlo, dhi) in zip(fixed, box, step or [(0, 0)] * len(box)):
        # hi + s * dhi > a0
        if dhi > 0:
            low = max(low, (a0 - hi) // dhi + 1)
        elif dhi < 0:
            high = min(high, -((a0 - hi) // -dhi) - 1)
        elif hi <= a0:
            return False
        # lo + s * dlo < a1
        if dlo > 0:
            high = min(high, -((lo - a1) // dlo) - 1)
        elif dlo < 0:
            low = max(low, (lo - a1) // -dlo + 1)
        elif lo >= a1:
            return False
    return low <= high
