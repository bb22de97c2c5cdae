"""The timing model: an event-driven schedule of a kernel's trace on one NeuronCore.

Each compute engine (Tensor, Vector, Scalar, GpSimd) runs its instructions in program order,
one at a time. The 16 DMA engines are bandwidth resources: a DMA instruction is split into one
piece per engine serving its partitions (`lowering.py`), and each piece takes the earliest gap on
its engine at or after the instruction is ready (the DMA rings are fed from several queues, so a
transfer waiting on data does not block a later one that is ready). An instruction is ready when
every earlier instruction it depends on has finished: read-after-write, write-after-read and
write-after-write on overlapping boxes of the same *physical* buffer (after the compiler model
of `compiler_model.py` mapped logical tiles to physical buffers), plus a semaphore latency when
the producer ran on another engine.

Loops. Iterations of `affine_range` loops overlap freely, limited only by dependencies and by
the physical buffers they share. For `sequential_range` and plain `range` loops we use a
lighter equivalent of "iteration i+1 starts after iteration i completes": *compute* in
iteration i+1 cannot start before every compute instruction of iteration i has finished, while
DMA transfers may still be issued ahead (the compiler prefetches into double buffers, which is
how a K-blocked matmul in a `sequential_range` reaches 85% of the Tensor Engine, NKI_NOTES §7).

Trainium1 port conflicts (NKI_NOTES §3): Vector and GpSimd instructions touching SBUF never
overlap; neither do Vector and Scalar instructions touching PSUM.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from accelopt.hardware.specs import HardwareSpec, get_hardware
from accelopt.nki.trace import LoopKind, Memory, Trace, TraceRecord
from accelopt.profiling.compiler_model import Box, CompilerPlan, ModelOptions, PlannedOp, plan
from accelopt.profiling.lowering import (
    DmaWork,
    dma_pieces,
    is_dma,
    lower_compute,
    lower_dma,
    region_bytes,
)

__all__ = ["ModelOptions", "ScheduledOp", "Timeline", "schedule"]

_DMA = "dma"


@dataclass(slots=True)
class ScheduledOp:
    record: int  # index into trace.records; -1 for a spill transfer the compiler inserted
    kind: str  # opcode, or spill_save / spill_reload
    engine: str  # tensor, vector, scalar, gpsimd or dma
    start: float  # seconds
    end: float  # seconds; for DMA includes the fixed completion latency
    busy: float  # engine-occupied seconds (DMA: summed over its pieces)
    line: int
    pieces: tuple[tuple[int, float, float], ...] = ()  # DMA: (engine, start, end) per piece


@dataclass(slots=True)
class Timeline:
    hardware: str
    options: ModelOptions
    ops: list[ScheduledOp]
    total_time: float
    engine_busy: dict[str, float]  # seconds; "dma" = time at least one DMA engine is busy
    dma_queue_busy: list[float]
    hoisted_records: set[int]
    spill_save_bytes: int = 0
    spill_reload_bytes: int = 0
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    sbuf_read_bytes: int = 0
    sbuf_write_bytes: int = 0
    psum_read_bytes: int = 0
    psum_write_bytes: int = 0
    dma_transfers: int = 0
    instructions: int = 0
    peak_live_bytes: dict[str, int] = field(default_factory=dict)


class _GapList:
    """Busy intervals of one DMA engine, merged and sorted, with earliest-fit placement."""

    __slots__ = ("busy", "ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.busy = 0.0

    def place(self, ready: float, duration: float) -> tuple[float, float]:
        """Occupy `duration` seconds of free time from `ready` on, filling gaps between
        transfers already placed (the engine interleaves the descriptors of every queued
        transfer). Returns when the transfer starts and finishes."""
        starts, ends = self.starts, self.ends
        self.busy += duration
        i = bisect_right(ends, ready)
        t = ready
        left = duration
        first = None
        while left > 0:
            if i < len(starts) and starts[i] <= t:
                t = ends[i]
                i += 1
                continue
            gap_end = starts[i] if i < len(starts) else float("inf")
            take = min(left, gap_end - t)
            if first is None:
                first = t
            self._insert(i, t, t + take)
            left -= take
            t += take
            i = bisect_right(ends, t - 1e-18) if left > 0 else i
        return (first if first is not None else ready), t

    def _insert(self, i: int, start: float, end: float) -> None:
        starts, ends = self.starts, self.ends
        merge_left = i > 0 and ends[i - 1] >= start
        merge_right = i < len(starts) and starts[i] <= end
        if merge_left and merge_right:
            ends[i - 1] = max(ends[i], end)
            del starts[i], ends[i]
        elif merge_left:
            ends[i - 1] = max(ends[i - 1], end)
        elif merge_right:
            starts[i] = min(starts[i], start)
        else:
            starts.insert(i, start)
            ends.insert(i, end)


class _Accesses:
    """Per physical buffer: the latest writes and reads by box (end time, engine, op)."""

    __slots__ = ("reads", "writes")

    def __init__(self) -> None:
        self.writes: dict[Box, tuple[float, str, int]] = {}
        self.reads: dict[Box, tuple[float, str, int]] = {}


def _overlaps(a: Box, b: Box) -> bool:
    for (a0, a1), (b0, b1) in zip(a, b):
        if a0 >= b1 or b0 >= a1:
            return False
    return True


def _contains(outer: Box, inner: Box) -> bool:
    for (o0, o1), (i0, i1) in zip(outer, inner):
        if i0 < o0 or i1 > o1:
            return False
    return True


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


class _Scheduler:
    def __init__(self, trace: Trace, hw: HardwareSpec, options: ModelOptions) -> None:
        self.trace = trace
        self.hw = hw
        self.options = options
        self.engine_free = {"tensor": 0.0, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0}
        self.engine_busy = {"tensor": 0.0, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0}
        self.engine_last = {"tensor": -1, "vector": -1, "scalar": -1, "gpsimd": -1}
        self.ports = {"sbuf": 0.0, "psum": 0.0}
        self.queues = [_GapList() for _ in range(hw.dma_engines)]
        self.table: dict[int, _Accesses] = {}
        # sequential loop instance -> [iteration, barrier, latest compute end in this iteration]
        self.barriers: dict[tuple[object, ...], list[float]] = {}
        self.seq_keys: dict[tuple[object, ...], list[tuple[tuple[object, ...], int]]] = {}
        self.sem = hw.semaphore_latency_s
        self.ops: list[ScheduledOp] = []
        self.counters = {
            "hbm_read": 0,
            "hbm_write": 0,
            "sbuf_read": 0,
            "sbuf_write": 0,
            "psum_read": 0,
            "psum_write": 0,
            "dma": 0,
            "instructions": 0,
        }

    # --- dependencies ----------------------------------------------------------------------

    def _producers(self, op: PlannedOp) -> tuple[list[tuple[float, str, int]], list[int]]:
        producers: list[tuple[float, str, int]] = []
        raw: list[int] = []
        table = self.table
        for key, box in op.reads:
            acc = table.get(key)
            if acc is None:
                continue
            for wbox, entry in acc.writes.items():
                if _overlaps(box, wbox):
                    producers.append(entry)
                    raw.append(entry[2])
        for key, box in op.writes:
            acc = table.get(key)
            if acc is None:
                continue
            for entries in (acc.writes, acc.reads):
                for wbox, entry in entries.items():
                    if _overlaps(box, wbox):
                        producers.append(entry)
        return producers, raw

    def _record(self, op: PlannedOp, end: float, engine: str, op_id: int) -> None:
        table = self.table
        entry = (end, engine, op_id)
        for key, box in op.reads:
            acc = table.get(key)
            if acc is None:
                acc = table[key] = _Accesses()
            old = acc.reads.get(box)
            if old is None or old[0] < end:
                acc.reads[box] = entry
        for key, box in op.writes:
            acc = table.get(key)
            if acc is None:
                acc = table[key] = _Accesses()
            for entries in (acc.writes, acc.reads):
                if len(entries) > 0:
                    covered = [b for b in entries if _contains(box, b) and entries[b][0] <= end]
                    for b in covered:
                        del entries[b]
            acc.writes[box] = entry

    # --- sequential loops -------------------------------------------------------------------

    def _sequential(self, rec: TraceRecord) -> list[tuple[tuple[object, ...], int]]:
        """The sequential loop instances enclosing `rec` and its iteration in each."""
        cached = self.seq_keys.get(rec.loops)
        if cached is not None:
            return cached
        keys = []
        loops = self.trace.loops
        for pos, frame in enumerate(rec.loops):
            info = loops.get(frame.loop_id)
            if info is None or info.kind is not LoopKind.SEQUENTIAL or info.trip_count <= 1:
                continue
            keys.append(((frame.loop_id, rec.loops[:pos]), frame.iteration))
        self.seq_keys[rec.loops] = keys
        return keys

    def _barrier(self, keys: list[tuple[tuple[object, ...], int]]) -> float:
        barrier = 0.0
        for key, iteration in keys:
            state = self.barriers.get(key)
            if state is None:
                state = self.barriers[key] = [iteration, 0.0, 0.0]
            elif state[0] != iteration:
                state[0] = iteration
                state[1] = max(state[1], state[2])
                state[2] = 0.0
            barrier = max(barrier, state[1])
        return barrier

    # --- placing ops ------------------------------------------------------------------------

    def place(self, op: PlannedOp, op_id: int) -> None:
        trace = self.trace
        rec = trace.records[op.record] if op.record >= 0 else None
        producers, raw = self._producers(op)
        if rec is None or is_dma(rec):
            self._place_dma(op, rec, producers, op_id)
        else:
            self._place_compute(op, rec, producers, raw, op_id)

    def _place_dma(self, op: PlannedOp, rec: TraceRecord | None, producers, op_id: int) -> None:
        hw = self.hw
        ready = 0.0
        for end, _, _ in producers:
            ready = max(ready, end + self.sem)
        if rec is None:
            work = DmaWork(
                pieces=dma_pieces(
                    op.spill_bytes, (0, op.spill_partitions), op.spill_bytes / max(1, op.spill_partitions), hw
                ),
                latency_s=hw.dma_fixed_latency_s,
                hbm_read_bytes=op.spill_bytes if op.kind == "spill_reload" else 0,
                hbm_write_bytes=op.spill_bytes if op.kind == "spill_save" else 0,
            )
            line = self.trace.records[op.cause].line if op.cause >= 0 else 0
            if op.kind == "spill_save":
                self.counters["sbuf_read"] += op.spill_bytes
            else:
                self.counters["sbuf_write"] += op.spill_bytes
        else:
            work = lower_dma(rec, self.trace, hw)
            line = rec.line
            self._count_on_chip(rec)
        pieces = []
        start = float("inf")
        finish = ready
        busy = 0.0
        for queue, occupancy in work.pieces:
            t0, t1 = self.queues[queue].place(ready, occupancy)
            pieces.append((queue, t0, t1))
            start = min(start, t0)
            finish = max(finish, t1)
            busy += occupancy
        if not pieces:
            start = ready
        end = finish + work.latency_s
        self.counters["hbm_read"] += work.hbm_read_bytes
        self.counters["hbm_write"] += work.hbm_write_bytes
        self.counters["dma"] += 1
        self._record(op, end, _DMA, op_id)
        self.ops.append(ScheduledOp(op.record, op.kind, _DMA, start, end, busy, line, tuple(pieces)))

    def _place_compute(self, op: PlannedOp, rec: TraceRecord, producers, raw: list[int], op_id: int) -> None:
        hw = self.hw
        work = lower_compute(rec, self.trace, hw, self.options.balance_unassigned)
        seq = self._sequential(rec) if rec.loops else []
        barrier = self._barrier(seq) if seq else 0.0
        touches_sbuf, touches_psum = self._memories(rec)
        best = None
        for engine, duration in work.options:
            ready = barrier
            for end, producer_engine, _ in producers:
                t = end if producer_engine == engine else end + self.sem
                if t > ready:
                    ready = t
            start = max(ready, self.engine_free[engine])
            if hw.port_conflicts:
                if touches_sbuf and engine in ("vector", "gpsimd"):
                    start = max(start, self.ports["sbuf"])
                if touches_psum and engine in ("vector", "scalar"):
                    start = max(start, self.ports["psum"])
            if engine != "tensor" and not work.tiny and self.engine_last[engine] in raw:
                # §4: an instruction waiting on its predecessor pays the static overhead
                duration += hw.static_overhead_cycles / hw.engine_clock_hz(engine)
            end = start + duration
            if best is None or end < best[2]:
                best = (engine, start, end, duration)
        assert best is not None
        engine, start, end, duration = best
        self.engine_free[engine] = end
        self.engine_busy[engine] += duration
        self.engine_last[engine] = op_id
        if hw.port_conflicts:
            if touches_sbuf and engine in ("vector", "gpsimd"):
                self.ports["sbuf"] = end
            if touches_psum and engine in ("vector", "scalar"):
                self.ports["psum"] = end
        for key, _ in seq:
            state = self.barriers[key]
            state[2] = max(state[2], end)
        self.counters["instructions"] += 1
        self._count_on_chip(rec)
        self._record(op, end, engine, op_id)
        self.ops.append(ScheduledOp(op.record, op.kind, engine, start, end, duration, rec.line))

    def _memories(self, rec: TraceRecord) -> tuple[bool, bool]:
        sbuf = psum = False
        tensors = self.trace.tensors
        for region in (*rec.reads, *rec.writes):
            info = tensors.get(region.tensor_id)
            if info is None:
                continue
            if info.memory is Memory.SBUF:
                sbuf = True
            elif info.memory is Memory.PSUM:
                psum = True
        return sbuf, psum

    def _count_on_chip(self, rec: TraceRecord) -> None:
        tensors = self.trace.tensors
        counters = self.counters
        for regions, suffix in ((rec.reads, "_read"), (rec.writes, "_write")):
            for region in regions:
                info = tensors.get(region.tensor_id)
                if info is None or info.memory is Memory.HBM:
                    continue
                counters[info.memory.value + suffix] += region_bytes(self.trace, region)


def schedule(trace: Trace, hw: HardwareSpec | str, options: ModelOptions | None = None) -> Timeline:
    """Time `trace` on `hw` with the compiler behaviours in `options` (all on by default)."""
    spec = get_hardware(hw) if isinstance(hw, str) else hw
    opts = options or ModelOptions()
    compiled: CompilerPlan = plan(trace, spec, opts)
    scheduler = _Scheduler(trace, spec, opts)
    for op_id, op in enumerate(compiled.ops):
        scheduler.place(op, op_id)
    ops = scheduler.ops
    total = max((op.end for op in ops), default=0.0)
    dma_intervals = [(s, e) for q in scheduler.queues for s, e in zip(q.starts, q.ends)]
    busy = dict(scheduler.engine_busy)
    busy[_DMA] = _union_length(dma_intervals)
    c = scheduler.counters
    return Timeline(
        hardware=spec.name,
        options=opts,
        ops=ops,
        total_time=total,
        engine_busy=busy,
        dma_queue_busy=[q.busy for q in scheduler.queues],
        hoisted_records=compiled.hoisted,
        spill_save_bytes=compiled.spill_save_bytes,
        spill_reload_bytes=compiled.spill_reload_bytes,
        hbm_read_bytes=c["hbm_read"],
        hbm_write_bytes=c["hbm_write"],
        sbuf_read_bytes=c["sbuf_read"],
        sbuf_write_bytes=c["sbuf_write"],
        psum_read_bytes=c["psum_read"],
        psum_write_bytes=c["psum_write"],
        dma_transfers=c["dma"],
        instructions=c["instructions"] + c["dma"],
        peak_live_bytes=compiled.peak_live_bytes,
    )
