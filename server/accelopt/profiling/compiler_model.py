"""What the real Neuron compiler does to a kernel before it runs, modelled on the trace.

The emulator records what the kernel *asked for*: logical tiles and blocks, every load in every
iteration. The hardware runs what the compiler *made of it* (NKI_NOTES §4, inferred from the
counters of real kernels). This module turns the first into the second, each behaviour behind
a switch of `ModelOptions` so its effect can be measured:

- folding PSUM zero-fills: `nl.zeros(..., buffer=nl.psum)` followed by `+=` matmuls costs no
  instruction; the first matmul of the group overwrites instead of accumulating;
- hoisting: a load (or a Tensor Engine transpose, with the PSUM->SBUF copy that lands it) whose
  read regions are identical across iterations of its innermost varying loop, and whose source
  was not written since, runs once; later instances alias the first instance's result;
- redundant loads: a second load of exactly the same HBM region into a fresh tile of the same
  shape within one loop iteration, the source not written in between and the first tile intact,
  is not issued; the kernel reads the first tile instead (*inferred*, as hoisting: the same
  redundant-load elimination applied within an iteration);
- physical buffer reuse: the logical buffers of one allocation site (a tile allocated in a loop
  body, or the blocks of a block-indexed tensor) share a pool of physical buffers
  `ModelOptions.sbuf_buffers` (3) times as large as the most of them live at once in SBUF (up to
  the 8 banks for PSUM accumulators; fewer where capacity runs short). Iteration i+3 reuses
  iteration i's buffer, so it waits for iteration i's readers (write-after-read);
- PSUM residency: a partition broadcast (a Tensor Engine matmul with ones) that fits a PSUM bank
  is read from PSUM by its consumers; any other Tensor Engine result the emulator stages in SBUF
  gets an explicit PSUM->SBUF copy on the Vector or Scalar Engine;
- spills: when the logical buffers live at a program point exceed SBUF (or PSUM, whole 2 KiB
  banks) capacity, the one used again furthest in the future is saved to HBM and reloaded
  before its next read (Belady's choice, what an allocator that sees the whole program makes).
  The sites whose live sets fit keep their multi-buffer copies (only what does not fit is
  spilled); optionally a value is not saved again while its copy in HBM is current; evictions
  leave room for the next arrivals to rotate, and each reload waits only for the space it
  lands on, so it can run ahead of its reader (`_SpillPlanner`; *inferred*). The public
  evidence is the Fused Mamba tutorial's v2 at seq_len 8192 (general/nki/tutorials/fused_mamba,
  "Increasing input seq_len size"; NKI_NOTES §7): spill traffic on its own DMA rows
  (`qSyncSpillReload0`, `qVectorSpillReload0`), Vector idle on semaphore waits for reloads
  (58.93% active), SBUF usage peaking at about 50% while it spills, 53.33 ms;
- spill onset and cost (issue 20): iterations of an innermost `affine_range` loop overlap by
  one, the next iteration's first tile taking its space while the current one runs
  (`ModelOptions.overlap_iterations`; the tutorial's seq_len table puts v2's onset between
  6144 and 7168); a tile still in HBM as loaded is reloaded from its source without a save,
  and a load whose tile is evicted unread is issued where the tile is needed instead
  (`rematerialize_loads`); an eviction frees little more than the kernel overflows by
  (`rotation_within_overflow`).

The result is an op list in program order whose accesses name *physical* locations, ready for
the event-driven scheduler in `timeline.py`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from accelopt.hardware.roofline import dtype_bytes
from accelopt.hardware.specs import HardwareSpec
from accelopt.nki.trace import Engine, LoopKind, Memory, Region, TensorInfo, Trace, TraceRecord
from accelopt.profiling.lowering import is_dma, is_tensor_engine

Box = tuple[tuple[int, int], ...]
Access = tuple[int, Box]  # (physical location id, box inside it)

_MAX_BLOCKS_PER_REGION = 4096  # beyond this a region is treated as touching its whole tensor


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Compiler behaviours the timing model mimics; each on by default (NKI_NOTES §4)."""

    hoist_invariant_loads: bool = True
    # a load repeating an earlier identical load of the same iteration reuses its tile
    eliminate_redundant_loads: bool = True
    hoist_transposes: bool = True
    buffer_reuse: bool = True
    spills: bool = True
    balance_unassigned: bool = True
    # a memset zero-filling PSUM right before matmuls accumulate into it becomes the first
    # matmul's "start accumulation" flag instead of an instruction
    fold_psum_zeroing: bool = True
    # Copies of an SBUF allocation site's live set the allocator rotates through (multi-buffering
    # depth), where capacity allows. *tuned*: 3 is the smallest depth at which our version of the
    # trn2 kernel-optimization tutorial's first matmul ([KOPT] in hardware/specs.py: Neuron
    # Explorer shows DMA 99.93% and Tensor Engine 87.28% active) keeps the DMA queues busy as
    # published; with 2 (NKI_NOTES §4's starting assumption) the queues idle 24% of the time
    # waiting for buffers to free, and the Tensor Engine reaches 0.73. It is also the depth of a
    # load / compute / store software pipeline, one iteration in each stage (the NKI tutorial
    # "Software pipelining", nki/guides/tutorials/tiled-grid-streaming: "the number of slots ...
    # sets how many steps can be in flight at once", with two- and three-stage pipelines).
    sbuf_buffers: int = 3
    # When the live sets overflow, the sites whose live sets fit (smallest first) keep their
    # copies; only what does not fit is spilled (see `_buffer_multipliers`)
    multibuffer_fitting: bool = True
    # Spilling leaves room to rotate and tracks where each buffer lands, and spill transfers
    # are placed like any DMA, as early as their data and landing space allow, instead of in
    # program order (see `_SpillPlanner`)
    prefetch_spills: bool = True
    # With prefetch_spills: how many more arrivals of its size an eviction makes room for
    # (None: `sbuf_buffers - 1`, the default). benchmarks/spill_study.py prints 0 beside it: on
    # the Fused Mamba tutorial's own v2 source the default makes room the hardware does not
    # seem to (3x the spill traffic, +41% at seq_len 8192, where 0 is +10%; issue-20 note).
    spill_rotation: int | None = None
    # The room an eviction makes beyond the arriving buffer is at most what the kernel's peak
    # live set exceeds SBUF by: a live set that barely overflows loses little more than its
    # excess, one that overflows by several tiles rotates as `spill_rotation` says (*inferred*:
    # an allocator that sees the whole program needs no more free space than the overflow.
    # The Fused Mamba v2 at seq_len 7168, one tile over: +18% of the published 41.3 ms with
    # room for three arrivals, -10% with the room bounded; 8192 is unchanged).
    rotation_within_overflow: bool = True
    # A buffer whose spill copy is current is evicted without saving it again, as register
    # allocators do. Off by default: every public spilling point is closer with each eviction
    # saving (Fused Mamba v2 at seq_len 8192: +4% against -9% of 53.33 ms, Vector 0.56 against
    # 0.63 of the published 0.59; the trn2 tutorial-order v3: DMA busy 0.68 against 0.59 of
    # the published 0.96), which would follow if neuronx-cc treats a reloaded tile as a new
    # value with a spill slot of its own (*inferred*; nothing public says).
    save_once: bool = False
    # A tile whose content is still in HBM unchanged (written whole by a load and not written
    # since, its source never written again) is evicted without a save and reloaded from its
    # source: rematerialization, as register allocators do with invariant loads (LLVM marks
    # such loads rematerializable instead of spilling what they loaded), and as the Fused Mamba
    # tutorial's v1 profile ([MAMBA] in hardware/specs.py) shows neuronx-cc doing with input
    # tiles it does not keep: "we reload both the input u and delta tensors around 7 times"
    # (warnings on the qSyncIO0 input-load row, no spill rows; *inferred*, since there the
    # kernel itself repeats the loads). A load whose tile is evicted before anything reads it
    # is dropped: its reload is its load. Effect: the trn2 tutorial-order v3 ([KOPT], published
    # Tensor Engine 1.00, no spill trouble) 40.4 -> 33.1 ms, Tensor Engine 0.68 -> 0.83, no
    # spill saves (5.4 GB before); Fused Mamba v2 at seq_len 8192 55.7 -> 48.7 ms (53.33
    # published). See `_SpillPlanner`.
    rematerialize_loads: bool = True
    # Iterations of an innermost `nl.affine_range` loop overlap by one: the allocator gives the
    # next iteration's first tile its space while the current iteration runs (double buffering
    # the loop's head), so that tile counts against SBUF from the current head's first access.
    # [ALLOC] in hardware/specs.py (NKI Direct Allocation Developer Guide, "Background"): the
    # allocator's "key performance goal ... is to achieve instruction parallelism across
    # different engines", and a loop body's tile needs two physical tiles for its producer (a
    # load) to run beside its consumer. Its reach (one tile, innermost loops only) is *tuned*
    # on the Fused Mamba tutorial's seq_len table ([MAMBA]): v2's spill onset lies between 6144
    # (27.5 ms, v2/v3 1.40) and 7168 (41.3 ms, 1.71), one [128, seq_len] fp32 tile above the
    # live set of our v2 (six tiles; seven fit at 6144, not at 7168). The head of every affine
    # loop (the channel loop's delta too) would make eight and spill at 6144 already.
    # See `_lookahead_reservations`.
    overlap_iterations: bool = True
    # compute instructions whose inputs are ready fill idle stretches their engine left earlier
    # (the compiler's scheduler reorders independent instructions; timeline._Slots)
    reorder_compute: bool = True
    # How many instructions the scheduler holds back to place, among those depending on no
    # held one, the one whose inputs are ready first (timeline._place_all), as the compiler's
    # list scheduler does ([NKI-SCHED] in hardware/specs.py: default heuristic "select the
    # instruction that can start first"): the dependent chains of an affine_range's iterations
    # then interleave on the engines instead of each iteration's chain running before the
    # next one's. 0: program order, with idle stretches filled (reorder_compute).
    # 8 (on since session 7): the NKIBench AdamW baseline reaches its resource floor on trn1
    # (2.58 -> 1.94 ms, Vector 0.99 and DMA 1.00 busy; in program order the next iteration's
    # tensor_tensor cannot fit the Vector Engine's short gaps), grouped-query attention
    # 14.8 -> 14.1 ms, and the LayerNorm ratio of NKI_NOTES §7 improves (+18.6% -> +7.9%); the
    # LayerNorm nl-API latency moves away (-9.8% -> -17.9%), every other public calibration
    # point moves by under 1%, and the model takes up to 1.6x longer. `prefetch_spills` then
    # makes little difference (the window issues spill reloads early by itself).
    schedule_window: int = 8
    # DMA descriptors made on the device by the hardware generators (trn2/trn3, [DGE] in
    # hardware/specs.py): each DMA instruction then holds one of `HardwareSpec.dge_instances`
    # for its ≈600 ns. Off by default because the product's hardware backend compiles with
    # `--disable-dge` (profiling/neuron.py COMPILE_OPTIONS; NKI_NOTES §8): descriptors are then
    # pre-computed on the host ([DGE] mode `none`, "lowest per-transfer latency"), no generator
    # caps the issue rate, and the simulator should time what that backend would measure.
    hardware_dge: bool = False


@dataclass(slots=True)
class PlannedOp:
    """One op for the scheduler: a trace record, or a spill transfer the compiler inserted."""

    record: int  # index into trace.records; -1 for a spill transfer
    kind: str  # the record's opcode, or "spill_save" / "spill_reload"
    reads: list[Access]
    writes: list[Access]
    spill_bytes: int = 0
    spill_partitions: int = 0
    cause: int = -1  # for a spill transfer: the record whose accesses made it necessary


@dataclass(slots=True)
class _Logical:
    group: int
    memory: Memory
    bytes_per_partition: int
    partitions: int
    full_box: Box
    first: int = -1
    last: int = -1
    space: str = ""  # memory.value, for fast dictionary keys
    accesses: list[int] = field(default_factory=list)
    # where the kernel placed it itself (ncc.sbuf/psum.(mod_)alloc): (memory, *location); such a
    # buffer is that physical location, outside the compiler's pools and never spilled
    placed: tuple[object, ...] | None = None
    # the loops (and iterations) a loop-body tile was allocated in; () for a tensor declared
    # outside every loop
    alloc_loops: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True)
class CompilerPlan:
    ops: list[PlannedOp]
    hoisted: set[int]
    spill_save_bytes: int
    spill_reload_bytes: int  # reloads of saved copies (rematerializing loads not included)
    peak_live_bytes: dict[str, int]  # memory -> peak live bytes per partition (before spilling)
    folded: set[int] = field(default_factory=set)  # PSUM zero-fills folded into a matmul
    deduplicated: set[int] = field(default_factory=set)  # loads repeating an earlier identical load
    psum_resident: set[int] = field(default_factory=set)  # SBUF tiles the compiler keeps in PSUM
    # bytes evicted tiles were loaded again from their unchanged HBM source (no save before)
    rematerialized_bytes: int = 0


class _Interner:
    def __init__(self) -> None:
        self.ids: dict[object, int] = {}

    def __call__(self, key: object) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.ids)
        return found


def _site_key(info: TensorInfo) -> object:
    if info.alloc_loops:  # a tile allocated in a loop body: one logical buffer per iteration
        return ("site", info.name, info.line, info.shape, info.memory.value, info.dtype)
    return ("tensor", info.tensor_id)


class _Resolver:
    """Maps trace regions to logical buffers (a tensor, or one block of a block-indexed tensor)."""

    def __init__(self, trace: Trace, psum_resident: set[int]) -> None:
        self.trace = trace
        self.psum_resident = psum_resident
        self.logical_ids = _Interner()
        self.groups = _Interner()
        self.logical: list[_Logical] = []
        self.cache: dict[tuple[int, Box], list[Access]] = {}
        # direct allocation: allocation site (line, name, shape) -> block index -> location
        self.placements: dict[tuple[object, ...], dict[tuple[int, ...], tuple[int, ...]]] = {}
        for line, name, shape, memory, entries in trace.placements:
            table = self.placements.setdefault((line, name, tuple(shape)), {})
            blocks = len(entries[0]) - (3 if memory == "psum" else 2) if entries else 0
            for entry in entries:
                table[tuple(entry[:blocks])] = (memory, *entry[blocks:])

    def _logical(self, key: object, info: TensorInfo, inner_shape: tuple[int, ...]) -> int:
        lid = self.logical_ids(key)
        if lid == len(self.logical):
            partitions = inner_shape[0] if inner_shape else 1
            per_partition = dtype_bytes(info.dtype)
            for extent in inner_shape[1:]:
                per_partition *= extent
            memory = Memory.PSUM if info.tensor_id in self.psum_resident else info.memory
            placed = None
            if self.placements and info.memory is not Memory.HBM:
                table = self.placements.get((info.line, info.name, info.shape))
                if table:
                    index = key[2] if isinstance(key, tuple) and key[0] == "b" else ()
                    placed = table.get(index) or next(iter(table.values()))
            self.logical.append(
                _Logical(
                    group=self.groups(_site_key(info)) if info.memory is not Memory.HBM else -1,
                    memory=memory,
                    bytes_per_partition=per_partition,
                    partitions=partitions,
                    full_box=tuple((0, s) for s in inner_shape),
                    space=memory.value,
                    placed=placed,
                    alloc_loops=tuple((f.loop_id, f.iteration) for f in info.alloc_loops),
                )
            )
        return lid

    def resolve(self, region: Region) -> list[Access]:
        cache_key = (region.tensor_id, region.box)
        found = self.cache.get(cache_key)
        if found is not None:
            return found
        info = self.trace.tensors.get(region.tensor_id)
        if info is None:  # a tensor the trace did not describe: treat as its own HBM buffer
            info = TensorInfo(
                region.tensor_id,
                f"t{region.tensor_id}",
                tuple(b for _, b in region.box),
                "float32",
                Memory.HBM,
                0,
            )
        bd = info.block_dims if info.memory is not Memory.HBM else 0
        inner = info.shape[bd:]
        if bd == 0:
            accesses = [(self._logical(("t", info.tensor_id), info, inner), region.box)]
        else:
            ranges = [range(a, b) for a, b in region.box[:bd]]
            count = 1
            for r in ranges:
                count *= len(r)
            key_of: Callable[[tuple[int, ...]], tuple[object, ...]]
            if count > _MAX_BLOCKS_PER_REGION:
                ranges = [range(0, 1)] * bd
                key_of = lambda idx: ("t", info.tensor_id)  # noqa: E731
            else:
                key_of = lambda idx: ("b", info.tensor_id, idx)  # noqa: E731
            local = region.box[bd:]
            accesses = [
                (self._logical(key_of(idx), info, inner), local) for idx in itertools.product(*ranges)
            ]
        self.cache[cache_key] = accesses
        return accesses


def _innermost_varying(rec: TraceRecord, trace: Trace) -> int | None:
    for pos in range(len(rec.loops) - 1, -1, -1):
        info = trace.loops.get(rec.loops[pos].loop_id)
        if info is None or info.trip_count > 1:
            return pos
    return None


def _is_te_transpose(rec: TraceRecord) -> bool:
    return rec.is_transpose and (rec.engine is Engine.TENSOR or rec.opcode in ("transpose", "nc_transpose"))


def _is_copy(rec: TraceRecord) -> bool:
    return rec.opcode in ("tensor_copy", "psum_copy", "copy")


def psum_resident_broadcasts(trace: Trace, hw: HardwareSpec) -> set[int]:
    """Tensors the emulator stages in SBUF that the compiler leaves in PSUM.

    The Tensor Engine writes only PSUM (NKI_NOTES §2), and an elementwise instruction may read
    one input straight from PSUM (at half the cost of an SBUF-only `tensor_tensor`, §4). A
    partition broadcast (`broadcast_to`, a matmul with ones) that fits a PSUM bank is
    therefore consumed from PSUM: no copy, and its readers pay the PSUM rate. *Inferred*, and
    consistent with the published Mamba kernels (§7): ≈7N Vector cycles per state for a
    broadcast multiply, a scan, a broadcast multiply and an accumulate.
    """
    resident: set[int] = set()
    for rec in trace.records:
        if rec.opcode != "broadcast" or rec.dst_memory is Memory.PSUM:
            continue
        for region in rec.writes:
            info = trace.tensors.get(region.tensor_id)
            if info is None or info.memory is not Memory.SBUF:
                continue
            per_partition = dtype_bytes(info.dtype)
            for extent in info.shape[info.block_dims + 1 :]:
                per_partition *= extent
            if per_partition <= hw.psum_bank_bytes:
                resident.add(region.tensor_id)
    return resident


def plan(trace: Trace, hw: HardwareSpec, options: ModelOptions) -> CompilerPlan:
    if "skip_middle_end_transformations" in trace.compiler_flags:
        # the kernel asked the compiler to leave its loops as written: nothing is hoisted
        options = dataclasses.replace(options, hoist_invariant_loads=False, hoist_transposes=False)
    psum_resident = psum_resident_broadcasts(trace, hw)
    resolver = _Resolver(trace, psum_resident)
    alias: dict[int, int] = {}
    last_write: dict[int, int] = {}  # logical buffer -> index of the last record writing it
    seen: dict[tuple[object, ...], int] = {}  # hoisting key -> first record instance
    hoisted: set[int] = set()
    deduplicated: set[int] = set()
    # (iteration, source regions, tile shapes) -> (record that wrote the tiles, the tiles)
    loaded: dict[tuple[object, ...], tuple[int, list[int]]] = {}
    transposed: set[int] = set()  # logical buffers written by Tensor Engine transposes
    # PSUM buffer -> the zero-fills (memsets) of it not yet consumed; a buffer zeroed piece by
    # piece (one memset per slice) has several
    zero_psum: dict[int, list[int]] = {}
    folded: set[int] = set()  # zero-fills folded into the first matmul of their accumulation group
    zero_left: dict[int, set[int]] = {}  # zero-fill -> PSUM buffers not yet reached by a matmul
    zero_box: dict[tuple[int, int], Box] = {}  # (zero-fill, PSUM buffer) -> the box it zeroes
    kept_zeroing: set[int] = set()  # zero-fills something other than a matmul consumed
    per_record: list[tuple[list[tuple[int, Box]], list[tuple[int, Box]]] | None] = []

    def canon(lid: int) -> int:
        while lid in alias:
            lid = alias[lid]
        return lid

    cache = resolver.cache
    resolve = resolver.resolve
    for position, rec in enumerate(trace.records):
        reads = []
        for region in rec.reads:
            found = cache.get((region.tensor_id, region.box))
            reads.extend(found if found is not None else resolve(region))
        writes = []
        for region in rec.writes:
            found = cache.get((region.tensor_id, region.box))
            writes.extend(found if found is not None else resolve(region))
        if alias:
            reads = [(canon(lid), box) for lid, box in reads]
            writes = [(canon(lid), box) for lid, box in writes]
        candidate = False
        is_load = (
            rec.src_memory is Memory.HBM
            and rec.dst_memory is not Memory.HBM
            and rec.opcode.startswith(("dma", "load"))
        )
        same: tuple[object, ...] | None = None
        if is_load and options.eliminate_redundant_loads and _fills_fresh_tiles(writes, resolver.logical):
            same = (
                rec.opcode,
                rec.loops,
                tuple(reads),
                tuple((resolver.logical[lid].memory, resolver.logical[lid].full_box) for lid, _ in writes),
            )
            earlier = loaded.get(same)
            if earlier is not None:
                writer, tiles = earlier
                unchanged_source = all(last_write.get(lid, -1) < writer for lid, _ in reads)
                results_intact = all(last_write.get(lid, -1) == writer for lid in tiles)
                if unchanged_source and results_intact:
                    for (lid, _), lid0 in zip(writes, tiles):
                        if lid != lid0:
                            alias[lid] = lid0
                    hoisted.add(position)
                    deduplicated.add(position)
                    per_record.append(None)
                    continue
            loaded[same] = (position, [lid for lid, _ in writes])
        if is_load:
            candidate = options.hoist_invariant_loads
        elif _is_te_transpose(rec):
            candidate = options.hoist_transposes
        elif _is_copy(rec) and reads and all(lid in transposed for lid, _ in reads):
            candidate = options.hoist_transposes
        pos = _innermost_varying(rec, trace) if candidate else None
        if pos is not None and writes:
            outer = tuple((f.loop_id, f.iteration) for i, f in enumerate(rec.loops) if i != pos)
            key = (
                rec.opcode,
                rec.line,
                rec.loops[pos].loop_id,
                outer,
                tuple(reads),
                tuple((resolver.logical[lid].group, box) for lid, box in writes),
            )
            first = seen.get(key)
            if first is None:
                seen[key] = position
            else:
                first_record = per_record[first]
                first_writes = first_record[1] if first_record is not None else []
                unchanged_source = all(last_write.get(lid, -1) < first for lid, _ in reads)
                results_intact = all(last_write.get(lid, -1) == first for lid, _ in first_writes)
                if unchanged_source and results_intact and len(first_writes) == len(writes):
                    for (lid, _), (lid0, _) in zip(writes, first_writes):
                        if lid != lid0:
                            alias[lid] = lid0
                    if same is not None:  # a repeat of this load in the iteration reads the same tile
                        loaded[same] = (first, [lid0 for lid0, _ in first_writes])
                    hoisted.add(position)
                    per_record.append(None)
                    continue
                seen[key] = position  # the source changed: this instance is the new reference
        if _is_te_transpose(rec):
            transposed.update(lid for lid, _ in writes)
        zero_fill = (
            options.fold_psum_zeroing
            and rec.opcode == "memset"
            and not reads
            and bool(writes)
            and float(rec.extra.get("value", 0.0) or 0.0) == 0.0  # a non-zero start is real work
            and all(resolver.logical[lid].memory is Memory.PSUM for lid, _ in writes)
        )
        if zero_psum and not zero_fill:  # (another zero-fill of the same buffer keeps it pending)
            tensor_write = is_tensor_engine(rec)
            for lid, box in itertools.chain(reads, writes):
                pending_fills = zero_psum.pop(lid, None)
                if pending_fills is None:
                    continue
                for pending in pending_fills:
                    left = zero_left[pending]
                    # The Tensor Engine only writes PSUM. Accumulating, the first matmul of the
                    # group takes the zero-fill's place (its "start accumulation" flag);
                    # overwriting (NKI 0.7's default accumulate=None after a memset, or
                    # accumulate=False), it makes the zero-fill dead wherever it covers it.
                    consumed = tensor_write and (rec.accumulate or _contains(box, zero_box[(pending, lid)]))
                    if consumed:
                        left.discard(lid)
                        if not left and pending not in kept_zeroing:
                            per_record[pending] = None
                            folded.add(pending)
                    else:  # something else reads or writes the zeros: the memset stays
                        kept_zeroing.add(pending)
                        for other in left:
                            others = zero_psum.get(other)
                            if others is not None and pending in others:
                                others.remove(pending)
                                if not others:
                                    del zero_psum[other]
        if zero_fill:
            # One zero-fill may cover several accumulation groups (the blocks of a PSUM
            # tensor such as nl.zeros((2, 2, nl.par_dim(128), 512), buffer=nl.psum)): it folds
            # away once every group's first access is its first matmul.
            zero_left[position] = {lid for lid, _ in writes}
            for lid, box in writes:
                zero_psum.setdefault(lid, []).append(position)
                zero_box[(position, lid)] = box
        for lid, _ in writes:
            last_write[lid] = position
        per_record.append((reads, writes))

    # Liveness, in program order, over the records that still execute.
    logical = resolver.logical
    for idx, accesses in enumerate(per_record):
        if accesses is None:
            continue
        for lid, _ in itertools.chain(*accesses):
            lb = logical[lid]
            if lb.first < 0:
                lb.first = idx
            if lb.last != idx:
                lb.accesses.append(idx)
            lb.last = idx

    reservations = _lookahead_reservations(logical, trace) if options.overlap_iterations else {}
    reserved_from = {lid: at for at, lids in reservations.items() for lid in lids}
    slot_of = _assign_slots(
        logical, options.buffer_reuse, hw, options.sbuf_buffers, options.multibuffer_fitting, reserved_from
    )
    physical = _Interner()
    phys_of = [
        physical(("hbm", lid))
        if lb.memory is Memory.HBM
        else physical(("placed", *lb.placed))
        if lb.placed is not None
        else physical(("slot", lb.group, slot_of[lid]))
        for lid, lb in enumerate(logical)
    ]
    phys = phys_of.__getitem__

    ops: list[PlannedOp] = []
    peak = _peak_live(logical, hw, reserved_from)
    overflow = peak["sbuf"] > _capacity(Memory.SBUF, hw) or peak["psum"] > _capacity(Memory.PSUM, hw)
    spills = None
    if options.spills and overflow:
        # HBM buffers -> the last record writing them: a tile loaded from a region nothing writes
        # afterwards can be loaded again instead of saved (`ModelOptions.rematerialize_loads`)
        hbm_last_write = {lid: at for lid, at in last_write.items() if logical[lid].memory is Memory.HBM}
        spills = _SpillPlanner(logical, hw, phys, physical, options, hbm_last_write, reservations)
        if options.rotation_within_overflow:
            spills.excess = max(0, peak["sbuf"] - _capacity(Memory.SBUF, hw))
    for idx, accesses in enumerate(per_record):
        if accesses is None:
            continue
        reads, writes = accesses
        rec = trace.records[idx]
        extra_writes: list[Access] = []
        if spills is not None:
            loads = rec.src_memory is Memory.HBM and rec.dst_memory is not Memory.HBM and is_dma(rec)
            ops.extend(spills.before(idx, reads, writes, extra_writes, loads))
        phys_reads = [(phys_of[lid], box) for lid, box in reads]
        phys_writes = [(phys_of[lid], box) for lid, box in writes] + extra_writes
        if (
            rec.dst_memory is Memory.SBUF
            and is_tensor_engine(rec)
            and not any(logical[lid].memory is Memory.PSUM for lid, _ in writes)
        ):
            # The Tensor Engine result lands in PSUM and is copied to the SBUF tile the kernel
            # reads (§4: nl.matmul = transpose + copy + matmul).
            staging = [(physical(("staging", idx)), box) for _, box in phys_writes]
            ops.append(PlannedOp(record=idx, kind=rec.opcode, reads=phys_reads, writes=staging))
            ops.append(PlannedOp(-1, "staging_copy", staging, phys_writes, cause=idx))
        else:
            ops.append(PlannedOp(record=idx, kind=rec.opcode, reads=phys_reads, writes=phys_writes))
        if spills is not None:
            spills.after(idx, ops[-1])
    if spills is not None and spills.dropped:
        ops = [op for op in ops if id(op) not in spills.dropped]
    return CompilerPlan(
        ops=ops,
        hoisted=hoisted,
        spill_save_bytes=spills.saved if spills else 0,
        spill_reload_bytes=spills.reloaded if spills else 0,
        peak_live_bytes=peak,
        psum_resident=psum_resident,
        folded=folded,
        deduplicated=deduplicated,
        rematerialized_bytes=spills.rematerialized if spills else 0,
    )


def _contains(outer: Box, inner: Box) -> bool:
    return len(outer) == len(inner) and all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


def _fills_fresh_tiles(writes: list[tuple[int, Box]], logical: list[_Logical]) -> bool:
    """Whether a load writes whole logical buffers (fresh tiles), so a later identical load can
    read the first one's tile in their place."""
    return bool(writes) and all(
        logical[lid].memory is not Memory.HBM and logical[lid].placed is None and box == logical[lid].full_box
        for lid, box in writes
    )


def _lookahead_reservations(logical: list[_Logical], trace: Trace) -> dict[int, list[int]]:
    """Record index -> SBUF tiles whose space is taken there, one iteration ahead of their use.

    In every innermost `nl.affine_range` loop (one with no loop inside it) the first tile an
    iteration allocates (its head, in program order) is given its space when the previous
    iteration's head is: the two iterations overlap by one step, as double buffering the
    loop's producer lets it run beside the consumer (`ModelOptions.overlap_iterations`).
    """
    parents = {info.parent_id for info in trace.loops.values() if info.parent_id is not None}
    innermost = {
        loop_id
        for loop_id, info in trace.loops.items()
        if info.kind is LoopKind.AFFINE and info.trip_count > 1 and loop_id not in parents
    }
    if not innermost:
        return {}
    # (enclosing iterations, loop) -> iteration -> its head (the tile it allocates first)
    heads: dict[tuple[object, ...], dict[int, int]] = {}
    for lid, lb in enumerate(logical):
        if lb.memory is not Memory.SBUF or lb.first < 0 or lb.placed is not None or not lb.alloc_loops:
            continue
        loop_id, iteration = lb.alloc_loops[-1]
        if loop_id not in innermost:
            continue
        per_iteration = heads.setdefault((lb.alloc_loops[:-1], loop_id), {})
        head = per_iteration.get(iteration)
        if head is None or lb.first < logical[head].first:
            per_iteration[iteration] = lid
    reservations: dict[int, list[int]] = {}
    for per_iteration in heads.values():
        order = sorted(per_iteration)
        for current, following in itertools.pairwise(order):
            at = logical[per_iteration[current]].first
            lid = per_iteration[following]
            if at < logical[lid].first:
                reservations.setdefault(at, []).append(lid)
    return reservations


def _footprint(lb: _Logical, hw: HardwareSpec) -> int:
    if lb.memory is Memory.PSUM:  # PSUM is allocated in whole banks
        banks = -(-lb.bytes_per_partition // hw.psum_bank_bytes)
        return banks * hw.psum_bank_bytes
    return lb.bytes_per_partition


def _capacity(memory: Memory, hw: HardwareSpec) -> int:
    return hw.psum_bytes_per_partition if memory is Memory.PSUM else hw.sbuf_bytes_per_partition


def _peak_live(
    logical: list[_Logical], hw: HardwareSpec, reserved_from: dict[int, int] | None = None
) -> dict[str, int]:
    deltas: dict[str, dict[int, int]] = {"sbuf": {}, "psum": {}}
    reserved_from = reserved_from or {}
    for lid, lb in enumerate(logical):
        if lb.memory is Memory.HBM or lb.first < 0 or lb.placed is not None:
            continue
        d = deltas[lb.memory.value]
        first = reserved_from.get(lid, lb.first)
        d[first] = d.get(first, 0) + _footprint(lb, hw)
        d[lb.last + 1] = d.get(lb.last + 1, 0) - _footprint(lb, hw)
    peak = {}
    for mem, d in deltas.items():
        live = best = 0
        for _, delta in sorted(d.items()):
            live += delta
            best = max(best, live)
        peak[mem] = best
    return peak


def _buffer_multipliers(
    by_group: dict[int, list[int]],
    peaks: dict[int, int],
    logical: list[_Logical],
    hw: HardwareSpec,
    sbuf_buffers: int,
    multibuffer_fitting: bool = True,
) -> dict[int, int]:
    """How many copies of its live set each allocation site gets (multi-buffering).

    Every site gets one; then, round by round and smallest first while capacity lasts, sites
    with more than one logical buffer get one more: up to `sbuf_buffers` in SBUF
    (`ModelOptions.sbuf_buffers`), up to the 8 banks in PSUM (§3: 8 accumulation groups in flight).
    When the live sets cannot all fit (the kernel spills), capacity is counted over the sites
    that do fit, smallest first (`ModelOptions.multibuffer_fitting`): a [128, 512] load tile
    keeps rotating while a 512 KiB array of score blocks goes to HBM, as an allocator that
    spills the data used furthest ahead would leave it (*inferred*). Counting every site, one
    array larger than SBUF left every other site a single copy and serialised its loop.
    """
    multiplier = dict.fromkeys(by_group, 1)
    for memory, limit in ((Memory.SBUF, sbuf_buffers), (Memory.PSUM, hw.psum_banks)):
        groups = [g for g, lids in by_group.items() if logical[lids[0]].memory is memory]
        size = {g: peaks[g] * _footprint(logical[by_group[g][0]], hw) for g in groups}
        capacity = _capacity(memory, hw)
        used = sum(size.values())
        if used > capacity and multibuffer_fitting:
            # The live sets cannot all stay: what does not fit is spilled (`_SpillPlanner`)
            # and takes no room from the copies of the sites that do fit, smallest first.
            used = 0
            for g in sorted(groups, key=lambda g: size[g]):
                if used + size[g] > capacity:
                    break
                used += size[g]
        growable = sorted((g for g in groups if len(by_group[g]) > 1), key=lambda g: size[g])
        for level in range(2, limit + 1):
            for g in growable:
                if multiplier[g] == level - 1 and used + size[g] <= capacity:
                    multiplier[g] = level
                    used += size[g]
    return multiplier


def _assign_slots(
    logical: list[_Logical],
    reuse: bool,
    hw: HardwareSpec,
    sbuf_buffers: int,
    multibuffer_fitting: bool = True,
    reserved_from: dict[int, int] | None = None,
) -> list[int]:
    """Physical buffer of every logical buffer: a FIFO pool per allocation site.

    The pool holds the most logical buffers the site has live at once times its multiplier
    (`_buffer_multipliers`); buffers are taken first-freed-first so consecutive iterations
    alternate. With reuse off every logical buffer gets a buffer of its own.
    """
    if not reuse:
        return list(range(len(logical)))
    by_group: dict[int, list[int]] = {}
    for lid, lb in enumerate(logical):
        if lb.memory is not Memory.HBM and lb.first >= 0 and lb.placed is None:
            by_group.setdefault(lb.group, []).append(lid)
    peaks: dict[int, int] = {}
    start = reserved_from or {}
    for group, lids in by_group.items():
        events = sorted(
            [(logical[lid].first, 1) for lid in lids] + [(logical[lid].last + 1, -1) for lid in lids]
        )
        live = best = 0
        for _, delta in events:
            live += delta
            best = max(best, live)
        peaks[group] = best
    multiplier = _buffer_multipliers(by_group, peaks, logical, hw, sbuf_buffers, multibuffer_fitting)
    slot = [0] * len(logical)
    # a site whose next tile is held a step ahead (`_lookahead_reservations`) has it in a
    # buffer of its own: at least one more than it has live at once
    held_ahead = {logical[lid].group for lid in start}
    for group, lids in by_group.items():
        lids.sort(key=lambda lid: start.get(lid, logical[lid].first))
        pool = peaks[group] * multiplier[group]
        if group in held_ahead:
            pool = max(pool, peaks[group] + 1)
        free: deque[int] = deque(range(pool))
        active: list[tuple[int, int]] = []  # (last access, slot), kept sorted by last access
        next_slot = pool
        for lid in lids:
            first = start.get(lid, logical[lid].first)
            still = []
            for last, s in active:
                if last < first:
                    free.append(s)
                else:
                    still.append((last, s))
            active = still
            if free:
                s = free.popleft()
            else:
                s, next_slot = next_slot, next_slot + 1
            slot[lid] = s
            active.append((logical[lid].last, s))
            active.sort()
    return slot


@dataclass(slots=True)
class _FreeSpace:
    """Bytes per partition left free by a buffer, and what a newcomer there waits for."""

    access: Access
    size: int
    evicted: bool  # left by a victim (wait for its save) rather than by a dead buffer


class _SpillPlanner:
    """Belady spilling over logical buffers, per on-chip memory, in program order.

    With `ModelOptions.prefetch_spills` (*inferred*; each step below is what an allocator
    with the whole program in view does, none is a published figure):

    - room to rotate: when a buffer must evict others to come into SBUF, they are evicted
      until there is room for it and `sbuf_buffers - 1` more of its size, so the next
      arrivals land on space whose save has been under way since an earlier eviction, the
      way loop-body tiles rotate through `sbuf_buffers` copies, instead of each arrival
      waiting for the save of the victim evicted just for it (PSUM keeps evicting only what
      it must: its banks are the accumulation groups themselves);
    - landing: a buffer coming on chip occupies space never used yet, then space freed by
      buffers that died or were evicted, oldest first (the first-freed-first order of
      `_assign_slots`). A reload waits for the last accesses of what was there; a first write
      waits for the saves of the victims it lands on. A reload may then start as early as
      its saved copy and its landing space allow (`timeline.py` no longer holds spill
      transfers to program order): far ahead of its reader when earlier buffers have died,
      not at all when it lands on the buffer the kernel has just finished with.

    With `ModelOptions.rematerialize_loads` (on by default, see there) a tile written whole by
    a load from HBM that nothing writes afterwards, and not written since, is evicted without a
    save: its reload reads the load's source again (a transfer like any reload, counted apart
    from spill traffic as `rematerialized`). Evicted before anything read it, the tile's load
    is dropped from the plan: the reload is its one load, where the tile is needed.

    With `ModelOptions.overlap_iterations` (on by default) the tiles `_lookahead_reservations`
    names take their space a step ahead of their first access: what does not fit then is
    evicted then. With `ModelOptions.rotation_within_overflow` (on by default) an eviction's
    room for rotation is at most what the kernel's peak live set exceeds the memory by.

    With `ModelOptions.save_once` (off by default, see there) a buffer whose spill copy is
    current (reloaded and not written since) is dropped on eviction without another save: the
    copy in HBM still holds its value (register allocators skip such stores; LLVM's spiller
    counts them as "omitted spills of reloads", llvm/lib/CodeGen/InlineSpiller.cpp).
    """

    def __init__(
        self,
        logical: list[_Logical],
        hw: HardwareSpec,
        phys: Callable[[int], int],
        physical: _Interner,
        options: ModelOptions,
        hbm_last_write: dict[int, int] | None = None,
        reservations: dict[int, list[int]] | None = None,
    ) -> None:
        self.logical = logical
        # record index -> tiles whose space is taken there ahead of their first access
        self.reservations = reservations or {}
        self.reserved: dict[int, int] = {}  # tile -> bytes per partition held for it
        # the most bytes per partition an eviction frees beyond the arriving buffer's own
        # (`ModelOptions.rotation_within_overflow`)
        self.excess = 1 << 62
        self.hw = hw
        self.phys = phys
        self.physical = physical
        self.prefetch = options.prefetch_spills
        rotation = options.sbuf_buffers - 1 if options.spill_rotation is None else options.spill_rotation
        self.rotation = max(0, rotation) if options.prefetch_spills else 0
        self.save_once = options.save_once
        # keyed by the memory's name: str hashes are cached, enum hashes run Python code
        self.resident: dict[str, dict[int, int]] = {"sbuf": {}, "psum": {}, "hbm": {}}
        self.used = {"sbuf": 0, "psum": 0, "hbm": 0}
        # space never occupied yet, and space freed since, oldest first
        self.untouched = {"sbuf": _capacity(Memory.SBUF, hw), "psum": _capacity(Memory.PSUM, hw), "hbm": 0}
        self.released: dict[str, deque[_FreeSpace]] = {"sbuf": deque(), "psum": deque(), "hbm": deque()}
        self.cursor: dict[int, int] = {}  # logical buffer -> position in its access list
        self.has_data: set[int] = set()
        self.spilled: set[int] = set()
        self.clean: set[int] = set()  # spilled buffers reloaded and not written since
        self.dying: dict[int, list[int]] = {}
        for lid, lb in enumerate(logical):
            if lb.memory is not Memory.HBM and lb.first >= 0 and lb.placed is None:
                self.dying.setdefault(lb.last, []).append(lid)
        self.saved = 0
        self.reloaded = 0
        self.rematerialized = 0
        self.remat = options.rematerialize_loads
        self.hbm_last_write = hbm_last_write or {}
        # on-chip buffer -> the HBM regions it was loaded from whole, while it still holds them
        self.source: dict[int, list[Access]] = {}
        self.remat_from: dict[int, list[Access]] = {}  # evicted without a save: reload from here
        # loaded tiles nothing has read yet -> the load that brought them; such a tile evicted
        # before its first read was loaded for nothing: the load is dropped (`dropped`) and its
        # reload from the source is the load, issued where the tile is needed
        self.unread: dict[int, tuple[PlannedOp, int]] = {}  # (the load, bytes it moves)
        self.loaded_at: dict[int, int] = {}  # record index -> the one tile its load brought whole
        self.dropped: set[int] = set()  # id() of the loads dropped

    def _home(self, lid: int) -> Access:
        return (self.phys(lid), self.logical[lid].full_box)

    def _release_dead(self, space: str, lid: int, size: int, last: PlannedOp) -> None:
        """A dead buffer's space: newcomers wait for its last op, through a marker that op reads
        (the buffer's physical slot is reused by its allocation site, so waiting on the slot
        would tie the newcomer to unrelated later tiles)."""
        marker = (self.physical(("space", lid)), ((0, 1), (0, 1)))
        last.reads.append(marker)
        self.released[space].append(_FreeSpace(marker, size, evicted=False))

    def _land(self, space: str, size: int, reload: bool) -> list[Access]:
        """Occupy `size` bytes per partition of free space; the accesses the newcomer waits for."""
        take = min(size, self.untouched[space])
        self.untouched[space] -= take
        size -= take
        released = self.released[space]
        landed: list[Access] = []
        while size > 0 and released:
            entry = released[0]
            if reload or entry.evicted:
                landed.append(entry.access)
            if entry.size > size:
                entry.size -= size
                break
            size -= entry.size
            released.popleft()
        return landed

    def _next_use(self, lid: int, now: int) -> int:
        lb = self.logical[lid]
        pos = self.cursor.get(lid, 0)
        while pos < len(lb.accesses) and lb.accesses[pos] <= now:
            pos += 1
        self.cursor[lid] = pos
        return lb.accesses[pos] if pos < len(lb.accesses) else 1 << 62

    def _transfer(self, kind: str, lid: int, cause: int, source: list[Access] | None = None) -> PlannedOp:
        lb = self.logical[lid]
        home = (self.phys(lid), lb.full_box)
        spill_slot = (self.physical(("spill", lid)), lb.full_box)
        nbytes = lb.bytes_per_partition * lb.partitions
        if kind == "spill_save":
            self.saved += nbytes
            return PlannedOp(-1, kind, [home], [spill_slot], nbytes, lb.partitions, cause)
        if source is not None:  # rematerialized: the load again, from the tile's own source
            self.rematerialized += nbytes
            return PlannedOp(-1, kind, list(source), [home], nbytes, lb.partitions, cause)
        self.reloaded += nbytes
        return PlannedOp(-1, kind, [spill_slot], [home], nbytes, lb.partitions, cause)

    def _track_sources(
        self, idx: int, reads: list[tuple[int, Box]], writes: list[tuple[int, Box]], load: bool
    ) -> None:
        """Which on-chip buffers still hold exactly what a load brought from HBM."""
        logical = self.logical
        rematerializable = (
            load
            and bool(reads)
            and all(
                logical[lid].memory is Memory.HBM and self.hbm_last_write.get(lid, -1) < idx
                for lid, _ in reads
            )
        )
        for lid, box in writes:
            lb = logical[lid]
            if lb.memory is Memory.HBM or lb.placed is not None:
                continue
            self.remat_from.pop(lid, None)
            self.unread.pop(lid, None)
            if rematerializable and len(writes) == 1 and box == lb.full_box:
                self.source[lid] = [(self.phys(h), hbox) for h, hbox in reads]
                self.loaded_at[idx] = lid
            else:
                self.source.pop(lid, None)

    def before(
        self,
        idx: int,
        reads: list[tuple[int, Box]],
        writes: list[tuple[int, Box]],
        extra_writes: list[Access],
        load: bool = False,
    ) -> list[PlannedOp]:
        ops: list[PlannedOp] = []
        logical = self.logical
        if self.unread:
            for lid, _ in reads:
                self.unread.pop(lid, None)
        if self.remat and writes:
            self._track_sources(idx, reads, writes, load)
        ahead = self.reservations.get(idx)
        if ahead:
            self._reserve(idx, ahead, {lid for lid, _ in itertools.chain(reads, writes)}, ops)
        missing = [
            lid
            for lid, _ in itertools.chain(reads, writes)
            if logical[lid].memory is not Memory.HBM
            and logical[lid].placed is None
            and lid not in self.resident[logical[lid].space]
        ]
        has_data = self.has_data
        clean = self.clean
        for lid, _ in writes:
            if lid not in has_data:
                has_data.add(lid)
            if clean:
                clean.discard(lid)
        if not missing:
            return ops
        touched = {lid for lid, _ in itertools.chain(reads, writes)}
        read_set = {lid for lid, _ in reads}
        written = {lid for lid, _ in writes}
        for lid in dict.fromkeys(missing):
            lb = logical[lid]
            resident = self.resident[lb.space]
            if lid in resident:
                continue
            size = _footprint(lb, self.hw)
            capacity = _capacity(lb.memory, self.hw)
            used = self.used
            held = self.reserved.pop(lid, None)
            if held is not None:  # its space was taken ahead of time: it arrives into it
                used[lb.space] -= held
            room = size
            if self.rotation and lb.memory is Memory.SBUF and used[lb.space] + size > capacity:
                room = min(capacity, size * (1 + self.rotation), size + self.excess)
            space: list[Access] = []  # where the incoming data lands (without prefetch: the victims' places)
            self._evict(lb.memory, room, touched, idx, ops, space)
            reloading = lid in self.spilled and lid in read_set
            if self.prefetch:
                space = self._land(lb.space, size, reloading)
            if reloading:
                source = self.remat_from.pop(lid, None)
                reload = self._transfer("spill_reload", lid, idx, source)
                # the reload writes over what it lands on: after its last accesses and saves
                reload.writes.extend(space)
                ops.append(reload)
                if self.save_once and lid not in written:
                    clean.add(lid)  # its spill copy stays current until it is written
                else:
                    self.spilled.discard(lid)
            else:
                extra_writes.extend(space)
            resident[lid] = size
            used[lb.space] += size
        return ops

    def _evict(
        self,
        memory: Memory,
        room: int,
        protected: set[int],
        idx: int,
        ops: list[PlannedOp],
        space: list[Access],
    ) -> None:
        """Evict (Belady) until `room` bytes per partition are free in `memory`."""
        name = memory.value
        resident = self.resident[name]
        used = self.used
        capacity = _capacity(memory, self.hw)
        while used[name] + room > capacity:
            victim = self._victim(memory, protected, idx)
            if victim is None:
                break
            vsize = resident.pop(victim)
            used[name] -= vsize
            if victim in self.has_data and not (self.save_once and victim in self.clean):
                source = self.source.get(victim)
                if source is not None:  # still in HBM as loaded: nothing to save
                    self.remat_from[victim] = source
                    wasted = self.unread.pop(victim, None)
                    if wasted is not None:  # never read: its reload will be its only load
                        self.dropped.add(id(wasted[0]))
                        self.rematerialized -= wasted[1]
                else:
                    ops.append(self._transfer("spill_save", victim, idx))
                self.spilled.add(victim)
            self.clean.discard(victim)
            if self.prefetch:
                self.released[name].append(_FreeSpace(self._home(victim), vsize, evicted=True))
            else:
                space.append(self._home(victim))

    def _reserve(self, idx: int, lids: list[int], protected: set[int], ops: list[PlannedOp]) -> None:
        """Take the space of tiles the next loop iteration allocates first, ahead of their use
        (`_lookahead_reservations`): what does not fit then is evicted now."""
        for lid in lids:
            lb = self.logical[lid]
            if lid in self.reserved or lid in self.resident[lb.space]:
                continue
            size = _footprint(lb, self.hw)
            self._evict(lb.memory, size, protected, idx, ops, [])
            self.used[lb.space] += size
            self.reserved[lid] = size

    def _victim(self, memory: Memory, protected: set[int], now: int) -> int | None:
        best, best_use = None, -1
        for lid in self.resident[memory.value]:
            if lid in protected:
                continue
            use = self._next_use(lid, now)
            if use > best_use:
                best, best_use = lid, use
        return best

    def after(self, idx: int, last: PlannedOp) -> None:
        brought = self.loaded_at.pop(idx, None)
        if brought is not None and idx not in self.dying:  # (a load other spaces wait on is never dropped)
            lb = self.logical[brought]
            self.unread[brought] = (last, lb.bytes_per_partition * lb.partitions)
        for lid in self.dying.pop(idx, ()):
            lb = self.logical[lid]
            size = self.resident[lb.space].pop(lid, None)
            if size is not None:
                self.used[lb.space] -= size
                if self.prefetch:
                    self._release_dead(lb.space, lid, size, last)
            self.spilled.discard(lid)
            self.clean.discard(lid)
            self.source.pop(lid, None)
            self.remat_from.pop(lid, None)
            self.unread.pop(lid, None)
