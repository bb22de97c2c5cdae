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
DMA transfers may still be issued ahead (the compiler prefetches into multiple buffers, which is
how a K-blocked matmul in a `sequential_range` reaches 85% of the Tensor Engine, NKI_NOTES §7).

Work the kernel left to the compiler (`Engine.UNASSIGNED`) goes to the legal engine on which
it would finish first: the least-loaded engine in the sense that matters to the schedule.

Spill transfers (`compiler_model.py` decides which, and where each reload lands) are placed like
any DMA, as soon as their data and their landing space allow (`ModelOptions.prefetch_spills`).
With it off, each starts only once every instruction before it in program order has started.

Trainium1 port conflicts (NKI_NOTES §3): Vector and GpSimd instructions touching SBUF never
overlap; neither do Vector and Scalar instructions touching PSUM. From Trainium2 on, only a Vector
instruction in performance mode and GpSimd's SBUF work share a bus (`_Scheduler._ports`).
"""

from __future__ import annotations

import gc
import itertools
from bisect import bisect_right
from dataclasses import dataclass, field

from accelopt.hardware.roofline import dtype_bytes
from accelopt.hardware.specs import HardwareSpec, get_hardware
from accelopt.nki.trace import LoopFrame, LoopKind, Memory, Trace, TraceRecord
from accelopt.profiling.compiler_model import Box, CompilerPlan, ModelOptions, PlannedOp, plan
from accelopt.profiling.lowering import (
    ComputeWork,
    DmaWork,
    adjacent_hbm_rows,
    dma_pieces,
    fills_zero,
    is_dma,
    lower_compute,
    lower_dma,
    staging_copy,
    vector_perf_mode,
)

__all__ = ["ModelOptions", "ScheduledOp", "Timeline", "schedule"]

_DMA = "dma"
_MEMORY_CODE = {"hbm": 1, "sbuf": 2, "psum": 3}
_SBUF_CODE = _MEMORY_CODE["sbuf"]
_PSUM_CODE = _MEMORY_CODE["psum"]


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
    core: int = 0  # the physical NeuronCore of an SPMD instance (profiling.grid)


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
    # physical NeuronCores the run used (an SPMD grid on a logical core of 2: 2); engine_busy
    # sums over them, so a busy fraction divides by total_time * cores
    cores: int = 1
    # part of total_time before the kernel's first instruction (HardwareSpec.kernel_start_s);
    # the ops' times do not include it
    kernel_start_s: float = 0.0


class _GapList:
    """Busy intervals of one DMA engine, merged and sorted, with earliest-fit placement."""

    __slots__ = ("busy", "ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.busy = 0.0

    def copy(self) -> _GapList:
        twin = _GapList()
        twin.starts = list(self.starts)
        twin.ends = list(self.ends)
        twin.busy = self.busy
        return twin

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


class _Slots:
    """Busy intervals of one compute engine (or a shared SRAM port), merged and sorted, for
    placing an instruction in the earliest idle stretch long enough to hold it whole.

    The compiler's scheduler reorders independent instructions ([NKI-SCHED] in
    hardware/specs.py: without `no_reorder` "the compiler scheduler is free to reorder
    independent operations"; its default heuristic picks "the instruction that can start
    first"), so an instruction whose inputs are ready runs in an idle stretch an engine left
    while waiting on another engine, instead of after every instruction written before it.
    Gaps shorter than `min_gap` (the shortest instruction the engine has) are never usable and
    are merged away, which keeps the lists short."""

    __slots__ = ("ends", "min_gap", "starts")

    def __init__(self, min_gap: float) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.min_gap = min_gap

    @property
    def last_end(self) -> float:
        return self.ends[-1] if self.ends else 0.0

    def fit(self, ready: float, duration: float) -> float:
        """The earliest start at or after `ready` with `duration` seconds free."""
        starts, ends = self.starts, self.ends
        t = ready
        i = bisect_right(ends, t)
        n = len(starts)
        while i < n:
            if starts[i] >= t + duration:
                return t
            if ends[i] > t:
                t = ends[i]
            i += 1
        return t

    def occupy(self, start: float, end: float) -> None:
        starts, ends = self.starts, self.ends
        gap = self.min_gap
        if not ends or start >= ends[-1]:  # the common case: appended after the last interval
            if ends and start - ends[-1] < gap:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
            return
        i = bisect_right(ends, start)
        lo, hi = start, end
        j = i
        # merge every interval that overlaps [start, end] or leaves a gap too short to use
        if i > 0 and start - ends[i - 1] < gap:
            i -= 1
            lo = min(lo, starts[i])
        while j < len(starts) and starts[j] - hi < gap:
            hi = max(hi, ends[j])
            j += 1
        starts[i:j] = [lo]
        ends[i:j] = [hi]


_WIDE = 8  # boxes covering more grid cells than this are kept in a list checked every time
_SCAN = 16  # below this many boxes a linear scan beats the index
_QUERY_CELLS = 64  # a query covering more cells than this scans linearly


class _BoxMap:
    """Boxes of one physical buffer -> (end time, engine, op). Small maps are scanned; past
    `_SCAN` boxes a grid index is built (cells as large as a typical box along every
    dimension), so that a buffer with thousands of disjoint tiles (a kernel output, a batched
    tensor) answers overlap queries by looking at the few cells a box covers."""

    __slots__ = ("cells", "entries", "sizes", "wide")

    def __init__(self) -> None:
        self.entries: dict[Box, tuple[float, str, int]] = {}
        self.cells: dict[tuple[int, ...], set[Box]] | None = None  # built lazily, see put
        self.wide: set[Box] = set()
        self.sizes: tuple[int, ...] = ()

    def _cells(self, box: Box, limit: int) -> list[tuple[int, ...]] | None:
        """The grid cells `box` covers, or None if more than `limit` (or of another rank)."""
        sizes = self.sizes
        if len(box) != len(sizes):
            return None
        ranges = []
        count = 1
        for (lo, hi), size in zip(box, sizes):
            first, last = lo // size, (hi - 1) // size
            count *= max(0, last - first + 1)
            if count > limit:
                return None
            ranges.append(range(first, last + 1))
        return list(itertools.product(*ranges))

    def overlapping(self, box: Box) -> list[Box]:
        entries = self.entries
        cells = self._cells(box, _QUERY_CELLS) if self.cells is not None else None
        if cells is None:
            if len(box) == 2:  # the common case, inlined: [partition, free] tiles
                (a0, a1), (b0, b1) = box
                return [e for e in entries if e[0][0] < a1 and a0 < e[0][1] and e[1][0] < b1 and b0 < e[1][1]]
            return [e for e in entries if _overlaps(box, e)]
        found = [e for e in self.wide if _overlaps(box, e)]
        index = self.cells
        assert index is not None
        if len(cells) == 1:
            found.extend(e for e in index.get(cells[0], ()) if _overlaps(box, e))
            return found
        seen: set[Box] = set()
        for cell in cells:
            for e in index.get(cell, ()):
                if e not in seen:
                    seen.add(e)
                    if _overlaps(box, e):
                        found.append(e)
        return found

    def put(self, box: Box, entry: tuple[float, str, int]) -> None:
        entries = self.entries
        if box not in entries:
            if self.cells is not None:
                self._index(box)
            elif len(entries) >= _SCAN:
                self._build([*entries, box])
        entries[box] = entry

    def _build(self, boxes: list[Box]) -> None:
        rank = len(boxes[-1])
        same_rank = [b for b in boxes if len(b) == rank]
        sizes = []
        for d in range(rank):
            extents = sorted(max(1, b[d][1] - b[d][0]) for b in same_rank)
            sizes.append(extents[len(extents) // 2])
        self.sizes = tuple(sizes)
        self.cells = {}
        for b in boxes:
            self._index(b)

    def _index(self, box: Box) -> None:
        cells = self._cells(box, _WIDE)
        if cells is None:
            self.wide.add(box)
            return
        index = self.cells
        assert index is not None
        for cell in cells:
            members = index.get(cell)
            if members is None:
                index[cell] = {box}
            else:
                members.add(box)

    def remove(self, box: Box) -> None:
        del self.entries[box]
        if self.cells is None:
            return
        if box in self.wide:
            self.wide.discard(box)
            return
        for cell in self._cells(box, _WIDE) or ():
            members = self.cells.get(cell)
            if members is not None:
                members.discard(box)


class _Accesses:
    """Per physical buffer: the latest writes and reads by box."""

    __slots__ = ("reads", "writes")

    def __init__(self) -> None:
        self.writes = _BoxMap()
        self.reads = _BoxMap()


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


# A sequential loop's instance: its id and the frames of the loops around it.
LoopInstance = tuple[int, tuple[LoopFrame, ...]]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    current: tuple[float, float] | None = None  # the union's run being extended
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


class _Scheduler:
    def __init__(
        self, trace: Trace, hw: HardwareSpec, options: ModelOptions, psum_resident: set[int]
    ) -> None:
        self.trace = trace
        self.hw = hw
        self.options = options
        self.engine_free = {"tensor": 0.0, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0}
        self.engine_busy = {"tensor": 0.0, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0}
        self.ports = {"sbuf": 0.0, "psum": 0.0}
        # with reordering: busy intervals per compute engine and per shared port (Trainium1)
        self.reorder = options.reorder_compute
        shortest = min(hw.engine_clock_hz(e) for e in self.engine_free)
        gap = hw.min_initiation_cycles / shortest / 2
        self.slots = {engine: _Slots(gap) for engine in (*self.engine_free, "sbuf", "psum")}
        shared = _GapList()
        self.queues = [shared] * hw.dma_engines  # copy-on-write, see _share_groups
        self.sharers: dict[int, set[int]] = {id(shared): set(range(hw.dma_engines))}
        self.keep = [shared]  # every list ever made stays alive, so ids stay unique
        # the hardware descriptor generators ([DGE] in hardware/specs.py): each DMA instruction
        # holds one for `dma_fixed_latency_s` from its start, so a burst of small transfers is
        # issued at most `dge_instances` per that time; none where descriptors come ready-made
        # (Trainium1, or `--disable-dge`: ModelOptions.hardware_dge off, the default)
        self.dge = [_Slots(0.0) for _ in range(hw.dge_instances if options.hardware_dge else 0)]
        self.table: dict[int, _Accesses] = {}
        self.pending: list[tuple[_BoxMap, Box, list[Box]]] = []  # see _producers
        self.issue_front = 0.0  # latest start of a compute instruction placed so far
        # sequential loop instance -> [iteration, barrier, latest compute end in this iteration]
        self.barriers: dict[LoopInstance, list[float]] = {}
        self.seq_keys: dict[tuple[LoopFrame, ...], list[tuple[LoopInstance, int]]] = {}
        self.sem = hw.semaphore_latency_s
        self.lowered: dict[tuple[object, ...], tuple[ComputeWork, bool, bool, bool]] = {}
        self.dma_lowered: dict[tuple[object, ...], DmaWork] = {}
        # on-chip tensor -> index of its partition axis (after the block dimensions)
        self.partition_axis = {
            tid: info.block_dims for tid, info in trace.tensors.items() if info.memory is not Memory.HBM
        }
        self.memory = {
            tid: Memory.PSUM if tid in psum_resident else info.memory for tid, info in trace.tensors.items()
        }
        self.memory_code = {tid: _MEMORY_CODE[where.value] for tid, where in self.memory.items()}
        # on-chip tensor -> (read counter, write counter, bytes per element)
        self.counter_keys: dict[int, tuple[str, str, int]] = {
            tid: (f"{where.value}_read", f"{where.value}_write", dtype_bytes(trace.tensors[tid].dtype))
            for tid, where in self.memory.items()
            if where is not Memory.HBM
        }
        self.ops: list[ScheduledOp] = []
        self.op_ids: list[int] = []  # the program-order position of each op in `ops`
        # nl.no_reorder blocks (accelopt.nki.compiler): block -> end of its latest instruction;
        # `order_floor` is the earliest start of the op being placed
        self.in_order: dict[object, float] = {}
        self.order_floor = 0.0
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

    def _producers(self, op: PlannedOp) -> list[tuple[float, str, int]]:
        """Earlier accesses `op` must wait for (RAW, WAR, WAW). Remembers, for each box `op`
        writes, the overlapping boxes it found, so `_record` can prune without searching again."""
        producers: list[tuple[float, str, int]] = []
        table = self.table
        for key, box in op.reads:
            acc = table.get(key)
            if acc is not None:
                entries = acc.writes.entries
                producers.extend(entries[b] for b in acc.writes.overlapping(box))
        pending = self.pending
        pending.clear()
        for key, box in op.writes:
            acc = table.get(key)
            if acc is not None:
                for boxes in (acc.writes, acc.reads):
                    hits = boxes.overlapping(box)
                    if hits:
                        entries = boxes.entries
                        producers.extend(entries[b] for b in hits)
                        pending.append((boxes, box, hits))
        return producers

    def _record(self, op: PlannedOp, end: float, engine: str, op_id: int) -> None:
        table = self.table
        entry = (end, engine, op_id)
        for key, box in op.reads:
            acc = table.get(key)
            if acc is None:
                acc = table[key] = _Accesses()
            old = acc.reads.entries.get(box)
            if old is None or old[0] < end:
                acc.reads.put(box, entry)
        # A later access overlapping an older one inside a box this op writes also overlaps
        # this write, which ends no earlier: the older one can be forgotten.
        for boxes, box, hits in self.pending:
            entries = boxes.entries
            for b in hits:
                found = entries.get(b)
                if found is not None and found[0] <= end and _contains(box, b):
                    boxes.remove(b)
        for key, box in op.writes:
            acc = table.get(key)
            if acc is None:
                acc = table[key] = _Accesses()
            acc.writes.put(box, entry)

    # --- sequential loops -------------------------------------------------------------------

    def _sequential(self, rec: TraceRecord) -> list[tuple[LoopInstance, int]]:
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

    def _barrier(self, keys: list[tuple[LoopInstance, int]]) -> float:
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
        self.op_ids.append(op_id)
        trace = self.trace
        producers = self._producers(op)
        if op.kind == "staging_copy":
            cause = trace.records[op.cause]
            work = staging_copy(cause.free_size, self.hw, self.options.balance_unassigned)
            self._place_compute(op, cause, producers, op_id, work)
            return
        rec = trace.records[op.record] if op.record >= 0 else None
        block = rec.extra.get("no_reorder") if rec is not None else None
        if block is not None:  # runs after the block's previous instruction has finished
            self.order_floor = self.in_order.get(block, 0.0)
        if rec is None or is_dma(rec):
            self._place_dma(op, rec, producers, op_id)
        else:
            self._place_compute(op, rec, producers, op_id)
        if block is not None:
            self.in_order[block] = self.ops[-1].end
            self.order_floor = 0.0

    def _place_dma(
        self, op: PlannedOp, rec: TraceRecord | None, producers: list[tuple[float, str, int]], op_id: int
    ) -> None:
        hw = self.hw
        ready = self.order_floor
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
            # Without prefetching, spill code inserted where the allocator runs out of space
            # starts once every instruction before it in program order has been issued.
            if not self.options.prefetch_spills:
                ready = max(ready, self.issue_front)
            if op.kind == "spill_save":
                self.counters["sbuf_read"] += op.spill_bytes
            else:
                self.counters["sbuf_write"] += op.spill_bytes
        else:
            work = self._lower_dma(rec)
            line = rec.line
            self._count_on_chip(rec)
        if self.dge:
            ready = self._generate_descriptors(ready)
        pieces = []
        start = float("inf")
        finish = ready
        busy = 0.0
        for queues, occupancy in self._share_groups(work.pieces):
            t0, t1 = queues[0][1].place(ready, occupancy)
            for queue, _ in queues:
                pieces.append((queue, t0, t1))
            if t0 < start:
                start = t0
            if t1 > finish:
                finish = t1
            busy += occupancy * len(queues)
        if not pieces:
            start = ready
        end = finish + work.latency_s
        self.counters["hbm_read"] += work.hbm_read_bytes
        self.counters["hbm_write"] += work.hbm_write_bytes
        self.counters["dma"] += 1
        self._record(op, end, _DMA, op_id)
        self.ops.append(ScheduledOp(op.record, op.kind, _DMA, start, end, busy, line, tuple(pieces)))

    def _generate_descriptors(self, ready: float) -> float:
        """Hold the descriptor generator free soonest from `ready` on for one instruction's
        generation time; the transfer starts when it starts generating (descriptors stream to
        the engines as they are made), and its fixed latency stays in `DmaWork.latency_s`."""
        duration = self.hw.dma_fixed_latency_s
        unit = min(self.dge, key=lambda slots: slots.fit(ready, duration))
        start = unit.fit(ready, duration)
        unit.occupy(start, start + duration)
        return start

    def _share_groups(
        self, pieces: tuple[tuple[int, float], ...]
    ) -> list[tuple[list[tuple[int, _GapList]], float]]:
        """Group DMA pieces that can be placed once for several engines.

        Engines whose busy intervals are identical share one `_GapList` (all of them start that
        way, and every full-width transfer keeps them identical), so a transfer giving each the
        same occupancy is placed once. An engine that gets different work first takes its own
        copy (copy on write).
        """
        queues = self.queues
        if len(self.sharers) == 1 and len(pieces) == len(queues):
            occupancy = pieces[0][1]
            if all(p[1] == occupancy for p in pieces):  # every engine, same share, same state
                shared = queues[0]
                return [([(queue, shared) for queue, _ in pieces], occupancy)]
        by_list: dict[tuple[int, float], list[tuple[int, _GapList]]] = {}
        for queue, occupancy in pieces:
            gaps = queues[queue]
            by_list.setdefault((id(gaps), occupancy), []).append((queue, gaps))
        groups = []
        for (_, occupancy), members in by_list.items():
            gaps = members[0][1]
            sharers = self.sharers[id(gaps)]
            if len(sharers) != len(members):
                clone = gaps.copy()
                moved = {queue for queue, _ in members}
                sharers.difference_update(moved)
                self.sharers[id(clone)] = moved
                self.keep.append(clone)
                for queue in moved:
                    queues[queue] = clone
                members = [(queue, clone) for queue, _ in members]
            groups.append((members, occupancy))
        return groups

    def _place_compute(
        self,
        op: PlannedOp,
        rec: TraceRecord,
        producers: list[tuple[float, str, int]],
        op_id: int,
        work: ComputeWork | None = None,
    ) -> None:
        if work is None:
            work, touches_sbuf, touches_psum, bus = self._lower(rec)
        else:  # a staging copy: PSUM -> SBUF (fp32, never in performance mode)
            touches_sbuf = touches_psum = True
            bus = False
        seq = self._sequential(rec) if rec.loops else []
        barrier = self._barrier(seq) if seq else self.order_floor
        if seq and self.order_floor > barrier:
            barrier = self.order_floor
        best = None
        for engine, duration in work.options:
            ready = barrier
            for end, producer_engine, _ in producers:
                t = end if producer_engine == engine else end + self.sem
                if t > ready:
                    ready = t
            ports = self._ports(engine, touches_sbuf, touches_psum, bus)
            if self.reorder:
                start = self._fit(engine, ready, duration, ports)
            else:
                start = max(ready, self.engine_free[engine])
                for port in ports:
                    start = max(start, self.ports[port])
            end = start + duration
            if best is None or end < best[2]:
                best = (engine, start, end, duration)
        assert best is not None
        engine, start, end, duration = best
        if start > self.issue_front:
            self.issue_front = start
        self.engine_free[engine] = max(self.engine_free[engine], end)
        self.engine_busy[engine] += duration
        ports = self._ports(engine, touches_sbuf, touches_psum, bus)
        if self.reorder:
            self.slots[engine].occupy(start, end)
            for port in ports:
                self.slots[port].occupy(start, end)
        for port in ports:
            self.ports[port] = max(self.ports[port], end)
        for key, _ in seq:
            state = self.barriers[key]
            state[2] = max(state[2], end)
        self.counters["instructions"] += 1
        if op.record >= 0:
            self._count_on_chip(rec)
        self._record(op, end, engine, op_id)
        self.ops.append(ScheduledOp(op.record, op.kind, engine, start, end, duration, rec.line))

    def _ports(self, engine: str, touches_sbuf: bool, touches_psum: bool, bus: bool) -> tuple[str, ...]:
        """The shared SRAM ports an instruction on `engine` holds while it runs.

        Trainium1 (NKI_NOTES §3, [TRN-ARCH]): Vector and GpSimd never access SBUF at once, nor
        Vector and Scalar PSUM. From Trainium2 on both restrictions are lifted, but the Vector
        Engine's performance mode "leverages a shared memory bus between the VectorE and GpsimdE
        engines" and the hardware arbitrates between them ([TRN2-ARCH] "Data Movement Updates";
        `bus`): *inferred*, such an instruction and GpSimd's SBUF work do not overlap.
        """
        hw = self.hw
        if hw.port_conflicts:
            sbuf = touches_sbuf and engine in ("vector", "gpsimd")
            psum = touches_psum and engine in ("vector", "scalar")
            if sbuf and psum:
                return ("sbuf", "psum")
            return ("sbuf",) if sbuf else ("psum",) if psum else ()
        if hw.vector_gpsimd_shared_bus and (
            (engine == "vector" and bus) or (engine == "gpsimd" and touches_sbuf)
        ):
            return ("sbuf",)
        return ()

    def _fit(self, engine: str, ready: float, duration: float, ports: tuple[str, ...]) -> float:
        """Earliest start at or after `ready` at which the engine and its shared ports are all
        free for `duration`."""
        lanes = [self.slots[engine], *(self.slots[port] for port in ports)]
        start = ready
        while True:
            moved = start
            for lane in lanes:
                moved = lane.fit(moved, duration)
            if moved == start:
                return start
            start = moved

    def _lower_dma(self, rec: TraceRecord) -> DmaWork:
        """`lower_dma`, cached on what it depends on (a loop body repeats a few shapes)."""
        if not rec.bytes:
            return lower_dma(rec, self.trace, self.hw)
        span = None
        axis_of = self.partition_axis
        for region in (*rec.writes, *rec.reads):
            axis = axis_of.get(region.tensor_id)
            if axis is not None and axis < len(region.box):
                span = region.box[axis]
                break
        key = (
            rec.opcode,
            rec.bytes,
            rec.dma_chunk_bytes,
            rec.partitions,
            rec.is_transpose,
            rec.dtype,
            rec.extra.get("api"),
            span,
            id(rec.src_memory),
            id(rec.dst_memory),
            adjacent_hbm_rows(rec, self.trace),
        )
        found = self.dma_lowered.get(key)
        if found is None:
            found = self.dma_lowered[key] = lower_dma(rec, self.trace, self.hw)
        return found

    def _lower(self, rec: TraceRecord) -> tuple[ComputeWork, bool, bool, bool]:
        """Lowering of a compute record (cached: a loop body repeats the same few shapes),
        whether it touches SBUF / PSUM and whether it runs in the Vector Engine's performance
        mode on the bus it shares with GpSimd (for the shared ports, `_ports`)."""
        code = self.memory_code
        reads = tuple(code.get(r.tensor_id, 0) for r in rec.reads)
        writes = tuple(code.get(r.tensor_id, 0) for r in rec.writes)
        extra = rec.extra
        key = (
            rec.opcode,
            id(rec.engine),  # enum members are singletons; their hash runs Python code
            rec.free_size,
            rec.dtype,
            rec.out_dtype,
            rec.is_transpose,
            rec.matmul_kmn,
            reads,
            writes,
            extra.get("stride_bytes"),
            extra.get("has_reduce"),
            str(extra.get("op", "")),
            str(extra.get("op1", "")),
            tuple(extra.get("engines", ())),
            tuple(extra.get("tile_operands", ())),
            fills_zero(rec) if rec.opcode == "memset" else None,
        )
        found = self.lowered.get(key)
        if found is None:
            work = lower_compute(rec, self.memory, self.hw, self.options.balance_unassigned)
            both = reads + writes
            stride = int(extra.get("stride_bytes", 0) or 0)
            bus = self.hw.vector_gpsimd_shared_bus and vector_perf_mode(rec, self.memory, self.hw, stride) > 1
            found = (work, _SBUF_CODE in both, _PSUM_CODE in both, bus)
            self.lowered[key] = found
        return found

    def _count_on_chip(self, rec: TraceRecord) -> None:
        counters = self.counters
        keys = self.counter_keys
        for regions, writing in ((rec.reads, False), (rec.writes, True)):
            for region in regions:
                found = keys.get(region.tensor_id)
                if found is None:
                    continue
                read_counter, write_counter, n = found
                for start, stop in region.box:
                    n *= stop - start
                counters[write_counter if writing else read_counter] += n


def _conflicts(op: PlannedOp, index: dict[int, list[tuple[int, Box, bool]]]) -> set[int]:
    """Ids of the held-back ops (`index`: location -> (op id, box, written)) that `op` must
    follow: it reads what one writes, or writes what one reads or writes."""
    found: set[int] = set()
    for key, box in op.reads:
        for other, obox, written in index.get(key, ()):
            if written and _overlaps(box, obox):
                found.add(other)
    for key, box in op.writes:
        for other, obox, _ in index.get(key, ()):
            if _overlaps(box, obox):
                found.add(other)
    return found


def _place_all(scheduler: _Scheduler, ops: list[PlannedOp], window: int) -> None:
    """Place `ops` (program order) as a list scheduler would ([NKI-SCHED]: the default heuristic
    selects "the instruction that can start first"): up to `window` compute instructions are
    held back with the held ones they depend on, and whenever the window is full the one whose
    inputs are ready first among those depending on no held instruction is placed (ties:
    program order). So the dependent chains of an affine_range's iterations interleave on the
    engines instead of each iteration's chain running before the next one's. Every op still
    follows all it depends on: an op that must follow held ones (DMA, spill and staging
    transfers, `no_reorder` blocks and instructions in sequential loops, whose barriers are
    tracked in program order, are never held) has them placed first."""
    if window <= 0:
        for op_id, op in enumerate(ops):
            scheduler.place(op, op_id)
        return
    records = scheduler.trace.records
    held: dict[int, PlannedOp] = {}
    preds: dict[int, set[int]] = {}  # held op -> the held ops it must follow
    succs: dict[int, set[int]] = {}
    ready: dict[int, float] = {}  # held op depending on no held op -> when its inputs are ready
    index: dict[int, list[tuple[int, Box, bool]]] = {}

    def inputs_ready(op: PlannedOp) -> float:
        return max((end for end, _, _ in scheduler._producers(op)), default=0.0)

    def release(op_id: int) -> None:
        op = held.pop(op_id)
        ready.pop(op_id, None)
        for key in {key for key, _ in (*op.reads, *op.writes)}:
            entries = [e for e in index[key] if e[0] != op_id]
            if entries:
                index[key] = entries
            else:
                del index[key]
        scheduler.place(op, op_id)
        for other in succs.pop(op_id, ()):
            waiting = preds[other]
            waiting.discard(op_id)
            if not waiting:
                ready[other] = inputs_ready(held[other])

    def release_with_predecessors(targets: set[int]) -> None:
        needed: set[int] = set()
        stack = list(targets)
        while stack:
            op_id = stack.pop()
            if op_id in needed:
                continue
            needed.add(op_id)
            stack.extend(preds[op_id])
        for op_id in sorted(needed):  # program order respects every dependency among them
            release(op_id)

    for op_id, op in enumerate(ops):
        found = _conflicts(op, index) if held else set()
        rec = records[op.record] if op.record >= 0 else None
        if (
            rec is None
            or op.kind == "staging_copy"
            or rec.extra.get("no_reorder") is not None
            or (rec.loops and scheduler._sequential(rec))
        ):
            if found:
                release_with_predecessors(found)
            scheduler.place(op, op_id)
            continue
        held[op_id] = op
        preds[op_id] = found
        for other in found:
            succs.setdefault(other, set()).add(op_id)
        if not found:
            ready[op_id] = inputs_ready(op)
        for key, box in op.reads:
            index.setdefault(key, []).append((op_id, box, False))
        for key, box in op.writes:
            index.setdefault(key, []).append((op_id, box, True))
        if len(held) > window:
            release(min(ready, key=lambda i: (ready[i], i)))
    while held:
        release(min(ready, key=lambda i: (ready[i], i)))
    # the timeline lists its ops in program order, whatever order they were placed in
    placed = scheduler.ops
    order = sorted(range(len(placed)), key=scheduler.op_ids.__getitem__)
    scheduler.ops = [placed[i] for i in order]


def schedule(trace: Trace, hw: HardwareSpec | str, options: ModelOptions | None = None) -> Timeline:
    """Time `trace` on one NeuronCore of `hw` with the compiler behaviours in `options` (all on
    by default). A trace of an SPMD grid of several instances: `profiling.grid.schedule`."""
    spec = get_hardware(hw) if isinstance(hw, str) else hw
    return with_kernel_start(schedule_instance(trace, spec, options or ModelOptions()), spec)


def with_kernel_start(timeline: Timeline, spec: HardwareSpec) -> Timeline:
    """`timeline` with the device's kernel start (once per launch) added to its total time."""
    timeline.total_time += spec.kernel_start_s
    timeline.kernel_start_s = spec.kernel_start_s
    return timeline


def schedule_instance(trace: Trace, spec: HardwareSpec, opts: ModelOptions) -> Timeline:
    """Time one program instance's trace on one NeuronCore."""
    # The model allocates millions of small tuples and makes no reference cycles: the cyclic
    # collector would only rescan the (large) trace over and over, so it waits until we are done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        compiled: CompilerPlan = plan(trace, spec, opts)
        scheduler = _Scheduler(trace, spec, opts, compiled.psum_resident)
        _place_all(scheduler, compiled.ops, opts.schedule_window if opts.reorder_compute else 0)
    finally:
        if collecting:
            gc.enable()
    ops = scheduler.ops
    total = max((op.end for op in ops), default=0.0)
    distinct = {id(q): q for q in scheduler.queues}.values()
    dma_intervals = [(s, e) for q in distinct for s, e in zip(q.starts, q.ends)]
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
