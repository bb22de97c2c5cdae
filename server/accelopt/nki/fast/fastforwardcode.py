"""The template of a loop's iteration (what fastforward.py learns) and the generated makers
that write its records again, iterations later.

Every record of a template gets a maker: a closure over the record's field values and its
regions' boxes and steps, built by a factory compiled from generated text, straight-line:

    def factory(t, reads, writes):
        ...                                   # unpack the template's values once
        def make(records, steps, shift, loops):
            ...                               # regions moved by `steps`, ids by `shift`
            record = _new(TraceRecord)
            record.engine = v_engine          # and every other field
            ...
            records.append(record)
            return record
        return make

The text depends only on how the record's regions move (whose tensor is made in the
iteration, which bounds move), not on any value, so records and loops that move alike share one
compiled factory (cached here, compiled once per text by codecache.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelopt.nki.fast.codecache import define
from accelopt.nki.trace import Region, TraceRecord

_new_object = object.__new__
_set_region_tid = Region.__dict__["tensor_id"].__set__
_set_region_box = Region.__dict__["box"].__set__

Box = tuple[tuple[int, int], ...]


@dataclass(slots=True)
class RegionPlan:
    """Where a region of a synthesized iteration comes from: its tensor id in the template
    iteration, whether that tensor is made in the iteration (its id then moves by the ids an
    iteration takes), its box there, and the step of each bound per iteration (None if no
    bound moves)."""

    tid: int
    made: bool
    box: Box
    step: Box | None
    region: Region  # the template iteration's (shared when nothing about it moves)


@dataclass(slots=True)
class KeptTile:
    tid: int  # in the template iteration
    entry: tuple[Any, ...]  # its pending entry there (tensor, name, line, is_input, frames)
    frames_move: bool


@dataclass(slots=True)
class LoggedWrite:
    tid: int
    made: bool
    alloc: Any
    plan: RegionPlan
    line: int
    accumulate: bool
    ints: tuple[int, ...]
    record_write: tuple[int, int] | None  # (record, write) whose region this is, if one


@dataclass(slots=True)
class Template:
    records: list[tuple[TraceRecord, tuple[RegionPlan, ...], tuple[RegionPlan, ...]]]
    kept: list[KeptTile]
    writes: list[LoggedWrite]
    producer_records: list[int]  # records of an iteration that tiles made before the loop point to
    ids_per_iteration: int
    # the last iteration that may be synthesized: moving regions stay inside their tensors and
    # moving masks keep what they kept
    last_synthesizable: int
    iteration: int  # the iteration the template's records, tiles and writes are from


# --- generated makers -----------------------------------------------------------------------

_Move = tuple[bool, tuple[tuple[bool, bool], ...] | None]  # how a region moves: see _move
_MAKERS: dict[Any, Callable[..., Any]] = {}
_MAX_MAKERS = 5_000
_FIELDS = [f for f in TraceRecord.__slots__ if f not in ("index", "loops", "reads", "writes", "extra")]
_NAMESPACE = {
    "_new": _new_object,
    "_set_tid": _set_region_tid,
    "_set_box": _set_region_box,
    "Region": Region,
    "TraceRecord": TraceRecord,
}


def _move(plan: RegionPlan) -> _Move | None:
    """How a region moves: whether its tensor is made in the iteration, and which bounds move
    (their steps are values of the maker, so makers of regions moving alike share a text);
    None if it never changes (the template's region is shared)."""
    if plan.step is None and not plan.made:
        return None
    return (plan.made, None if plan.step is None else tuple((dlo != 0, dhi != 0) for dlo, dhi in plan.step))


def _values(plan: RegionPlan) -> tuple[Any, ...]:
    return (plan.tid, plan.box, plan.region, plan.step)


def _region_lines(var: str, move: _Move | None, add: Callable[[str, int], None]) -> tuple[str, list[str]]:
    """(expression, prologue lines) for a region of a maker: the prologue (in the factory)
    unpacks the region's values; the expression's lines (in the maker) build it."""
    if move is None:
        return f"{var}_fixed", [f"_, _, {var}_fixed, _ = {var}"]
    made, step = move
    prologue = [f"{var}_tid, {var}_box, _, {var}_step = {var}"]
    if step is not None:
        names = [f"{var}_b{d}" for d in range(len(step))]
        prologue.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {var}_box")
        for d, (lo_moves, hi_moves) in enumerate(step):
            if lo_moves or hi_moves:
                prologue.append(
                    f"({var}_lo{d}, {var}_hi{d}), ({var}_dlo{d}, {var}_dhi{d}) = {var}_b{d}, {var}_step[{d}]"
                )
    add(f"{var}_r = _new(Region)", 2)
    add(f"_set_tid({var}_r, {var}_tid{' + shift' if made else ''})", 2)
    if step is None:
        add(f"_set_box({var}_r, {var}_box)", 2)
    else:
        bounds = [
            f"({var}_lo{d}{f' + {var}_dlo{d} * steps' if lo_moves else ''}, "
            f"{var}_hi{d}{f' + {var}_dhi{d} * steps' if hi_moves else ''})"
            if lo_moves or hi_moves
            else f"{var}_b{d}"  # a bound pair that does not move is shared
            for d, (lo_moves, hi_moves) in enumerate(step)
        ]
        add(f"_set_box({var}_r, ({', '.join(bounds)}{',' if len(bounds) == 1 else ''}))", 2)
    return f"{var}_r", prologue


def _tuple(items: list[str]) -> str:
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _factory(key: Any, build: Callable[[], str], name: str) -> Callable[..., Any]:
    factory = _MAKERS.get(key)
    if factory is None:
        if len(_MAKERS) >= _MAX_MAKERS:
            _MAKERS.clear()
        factory = _MAKERS[key] = define(build(), "<accelopt.nki.fastforward>", dict(_NAMESPACE), name)
    return factory


def record_maker(
    record: TraceRecord, reads: tuple[RegionPlan, ...], writes: tuple[RegionPlan, ...]
) -> Callable[..., TraceRecord]:
    """``make(records, steps, shift, loops)``: appends and returns the record `record` (of
    the template iteration) as it is `steps` iterations later. One text per way its regions move."""
    read_moves = tuple(_move(p) for p in reads)
    write_moves = tuple(_move(p) for p in writes)

    def build() -> str:
        body: list[str] = []

        def add(line: str, indent: int) -> None:
            body.append("    " * indent + line)

        prologue: list[str] = []
        read_exprs, write_exprs = [], []
        for j, move in enumerate(read_moves):
            expr, lines = _region_lines(f"r{j}", move, add)
            prologue += [f"r{j} = reads[{j}]", *lines]
            read_exprs.append(expr)
        for j, move in enumerate(write_moves):
            expr, lines = _region_lines(f"w{j}", move, add)
            prologue += [f"w{j} = writes[{j}]", *lines]
            write_exprs.append(expr)
        head = [
            "def factory(t, reads, writes):",
            "    extra = t.extra",
            *[f"    v_{name} = t.{name}" for name in _FIELDS],  # closure cells: no attribute lookups
            *["    " + line for line in prologue],
        ]
        head.append("    def make(records, steps, shift, loops):")
        tail = [
            "        record = _new(TraceRecord)",
            "        record.index = len(records)",
            *[f"        record.{name} = v_{name}" for name in _FIELDS],
            "        record.loops = loops",
            f"        record.reads = {_tuple(read_exprs)}",
            f"        record.writes = {_tuple(write_exprs)}",
            "        record.extra = extra.copy()",
            "        records.append(record)",
            "        return record",
            "    return make",
        ]
        return "\n".join(head + body + tail)

    factory = _factory(("record", read_moves, write_moves), build, "factory")
    return factory(record, tuple([_values(p) for p in reads]), tuple([_values(p) for p in writes]))


def region_maker(plan: RegionPlan) -> Callable[[int, int], Region]:
    """``region(steps, shift)``: the region `plan` (of the template iteration) `steps` iterations later."""
    move = _move(plan)

    def build() -> str:
        body: list[str] = []

        def add(line: str, indent: int) -> None:
            body.append("    " * indent + line)

        expr, prologue = _region_lines("p", move, add)
        lines = [
            "def factory(p):",
            *["    " + line for line in prologue],
            "    def region(steps, shift):",
            *body,
        ]
        return "\n".join([*lines, f"        return {expr}", "    return region"])

    factory = _factory(("region", move), build, "factory")
    return factory(_values(plan))
