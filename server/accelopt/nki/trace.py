"""The instruction trace: what an emulated kernel asked the hardware to do.

Every NKI API call that becomes hardware work appends one `TraceRecord`. The timing model
(`accelopt.profiling.timeline`) consumes only this trace, so everything it needs to schedule an
instruction (engine, sizes, the exact regions read and written, the loop nest, the source line)
is recorded here and nothing else is.

Traces cross a process boundary (the sandboxed worker produces them, the trusted parent times
them), so they serialize to plain JSON-compatible data and are rebuilt with validation, never
with pickle.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any


class Engine(str, enum.Enum):
    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"
    # The kernel left the choice to the compiler (`engine=nki.isa.unknown_engine` or an `nl.*`
    # call that several engines can run); the timing model places it on the least-loaded legal engine.
    UNASSIGNED = "unassigned"


class Memory(str, enum.Enum):
    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


class LoopKind(str, enum.Enum):
    AFFINE = "affine"  # nl.affine_range: independent iterations, may overlap
    SEQUENTIAL = "sequential"  # nl.sequential_range and plain range(): ordered
    STATIC = "static"  # nl.static_range: unrolled


@dataclass(frozen=True, slots=True)
class Region:
    """A box of a tensor: half-open [start, stop) along every declared dimension of the tensor
    (block dimensions included). A masked or strided access reports its bounding box."""

    tensor_id: int
    box: tuple[tuple[int, int], ...]

    def overlaps(self, other: Region) -> bool:
        if self.tensor_id != other.tensor_id:
            return False
        return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(self.box, other.box, strict=True))


@dataclass(frozen=True, slots=True)
class LoopFrame:
    """One enclosing loop of an instruction and the iteration it was in."""

    loop_id: int
    iteration: int


@dataclass(slots=True)
class LoopInfo:
    loop_id: int
    kind: LoopKind
    trip_count: int
    line: int
    parent_id: int | None = None


@dataclass(slots=True)
class TensorInfo:
    tensor_id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    memory: Memory
    line: int
    # Number of leading logical block dimensions (before the partition dimension). Block
    # dimensions are logical: they never make a tensor "too big" by themselves.
    block_dims: int = 0
    is_input: bool = False
    is_output: bool = False
    # The loops (and iterations) the tensor was allocated in; a tile allocated inside a loop is a
    # fresh logical buffer per iteration.
    alloc_loops: tuple[LoopFrame, ...] = ()


@dataclass(slots=True)
class TraceRecord:
    """One hardware instruction (or DMA transfer) issued by the kernel."""

    index: int
    engine: Engine
    # Lower-case opcode: dma_load, dma_store, dma_copy, nc_matmul, transpose, broadcast,
    # activation, activation_reduce, tensor_scalar, tensor_tensor, tensor_tensor_scan,
    # tensor_reduce, tensor_copy, psum_copy, reciprocal, memset, iota, affine_select,
    # bn_stats, bn_aggr, select, ...
    opcode: str
    partitions: int  # partition extent of the main operand
    free_size: int  # elements per partition of the main input (N in the cost tables)
    dtype: str  # dtype of the main input
    out_dtype: str
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    src_memory: Memory | None
    dst_memory: Memory | None
    line: int  # the kernel's own source line
    loops: tuple[LoopFrame, ...] = ()  # enclosing loops, outermost first
    bytes: int = 0  # bytes moved for DMA; bytes of the main input otherwise
    # Tensor Engine hardware flops: 2*K*M*N, doubled again for fp32 operands (NKI_NOTES §5).
    flops: int = 0
    # Elementwise work for the roofline's vector term: elements x non-trivial ops
    # (operations whose operands are all constant scalars are not counted).
    vector_ops: int = 0
    is_transpose: bool = False
    accumulate: bool = False  # result accumulated into PSUM (`+=`) rather than overwritten
    matmul_kmn: tuple[int, int, int] | None = None  # (K, M, N) for Tensor Engine work
    # DMA shape: contiguous bytes per chunk on the HBM side and how many chunks in total.
    dma_chunk_bytes: int = 0
    dma_chunks: int = 0
    # Anything else an instruction's cost depends on (e.g. {"num_ops": 2, "has_reduce": True,
    # "stride_bytes": 8, "psum_inputs": 1}).
    # Keys the emulator emits: "engines" (legal engines of an UNASSIGNED record), "op"/"op1"
    # (operator names), "num_ops", "has_bias", "has_scale", "has_reduce", "reduce_op",
    # "psum_inputs", "partition_reduce", "negate", "value" (memset/fill), "api" (the NKI call),
    # "strict" (nisa Tensor Engine op), "transpose" (transposing DMA), "onezero" (0/1 operand hint),
    # "tile_operands" (nisa.tensor_scalar: whether operand0/operand1 are tiles, not constants).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProgramSpan:
    """One program instance of an SPMD launch grid: its ids, the physical NeuronCore it runs on
    (within the logical core) and its records, trace.records[first:end]."""

    ids: tuple[int, ...]
    core: int
    first: int
    end: int


@dataclass(slots=True)
class Trace:
    kernel_name: str
    source_path: str
    records: list[TraceRecord] = field(default_factory=list)
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    loops: dict[int, LoopInfo] = field(default_factory=dict)
    numerics: bool = True  # False for a trace-only run
    # SPMD: the launch grid's sizes (() without a grid) and, for a grid of more than one
    # instance, every instance's span of records (accelopt.nki.spmd; timed by profiling.grid)
    grid: tuple[int, ...] = ()
    programs: list[ProgramSpan] = field(default_factory=list)
    # the NeuronCore generation the kernel ran for (what nisa.get_nc_version answered)
    target: str = "trn1"
    # the NKI rules it ran under (apiversion.KernelApi.key): the re-run applies the same ones
    nki_api: str = "legacy"
    # direct allocation (accelopt.nki.compiler): per allocation site [line, name, shape, memory,
    # [[*block index, *location], ...]] (location: SBUF (partition, byte address), PSUM (bank,
    # partition, byte address)); and the compiler decorators the kernel carries
    placements: list[list[Any]] = field(default_factory=list)
    compiler_flags: tuple[str, ...] = ()
    # A numeric run to be verified: every API call the kernel made, as plain data a trusted
    # process re-runs (calllog.py, rerun.py); or why the run could not be logged.
    calls: list[Any] | None = None
    calls_failure: str | None = None

    # --- serialization (JSON-compatible, validated on the way in) -------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel_name": self.kernel_name,
            "source_path": self.source_path,
            "numerics": self.numerics,
            "loops": [
                [lp.loop_id, lp.kind.value, lp.trip_count, lp.line, lp.parent_id]
                for lp in self.loops.values()
            ],
            "tensors": [
                [
                    t.tensor_id,
                    t.name,
                    list(t.shape),
                    t.dtype,
                    t.memory.value,
                    t.line,
                    t.block_dims,
                    t.is_input,
                    t.is_output,
                    [[f.loop_id, f.iteration] for f in t.alloc_loops],
                ]
                for t in self.tensors.values()
            ],
            "records": [_record_to_list(r) for r in self.records],
            "grid": list(self.grid),
            "programs": [[list(p.ids), p.core, p.first, p.end] for p in self.programs],
            "target": self.target,
            "nki_api": self.nki_api,
            "placements": self.placements,
            "compiler_flags": list(self.compiler_flags),
            "calls": self.calls,
            "calls_failure": self.calls_failure,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        trace = cls(
            kernel_name=str(data["kernel_name"]),
            source_path=str(data["source_path"]),
            numerics=bool(data.get("numerics", True)),
        )
        for loop_id, kind, trip, line, parent in data["loops"]:
            trace.loops[int(loop_id)] = LoopInfo(
                int(loop_id), LoopKind(kind), int(trip), int(line), None if parent is None else int(parent)
            )
        for tid, name, shape, dtype, mem, line, bdims, is_in, is_out, alloc in data["tensors"]:
            trace.tensors[int(tid)] = TensorInfo(
                tensor_id=int(tid),
                name=str(name),
                shape=tuple(int(s) for s in shape),
                dtype=str(dtype),
                memory=Memory(mem),
                line=int(line),
                block_dims=int(bdims),
                is_input=bool(is_in),
                is_output=bool(is_out),
                alloc_loops=tuple(LoopFrame(int(a), int(b)) for a, b in alloc),
            )
        trace.records = [_record_from_list(row) for row in data["records"]]
        trace.grid = tuple(int(s) for s in data.get("grid", ()))
        count = len(trace.records)
        for ids, core, first, end in data.get("programs", ()):
            span = ProgramSpan(tuple(int(i) for i in ids), int(core), int(first), int(end))
            if not 0 <= span.first <= span.end <= count or span.core < 0:
                raise ValueError("trace program span outside the records")
            trace.programs.append(span)
        trace.target = str(data.get("target", "trn1"))
        trace.nki_api = str(data.get("nki_api", "legacy"))
        for line, name, shape, memory, entries in data.get("placements", ()):
            trace.placements.append(
                [
                    int(line),
                    str(name),
                    [int(s) for s in shape],
                    Memory(memory).value,
                    [[int(v) for v in entry] for entry in entries],
                ]
            )
        trace.compiler_flags = tuple(str(f) for f in data.get("compiler_flags", ()))
        calls = data.get("calls")
        if calls is not None and not isinstance(calls, list):
            raise ValueError("trace 'calls' must be a list")
        trace.calls = calls
        failure = data.get("calls_failure")
        trace.calls_failure = None if failure is None else str(failure)[:2000]
        return trace

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))


def _regions_to_list(regions: tuple[Region, ...]) -> list[Any]:
    return [[r.tensor_id, [list(b) for b in r.box]] for r in regions]


def _regions_from_list(rows: list[Any]) -> tuple[Region, ...]:
    return tuple(Region(int(tid), tuple((int(a), int(b)) for a, b in box)) for tid, box in rows)


def _record_to_list(r: TraceRecord) -> list[Any]:
    return [
        r.index,
        r.engine.value,
        r.opcode,
        r.partitions,
        r.free_size,
        r.dtype,
        r.out_dtype,
        _regions_to_list(r.reads),
        _regions_to_list(r.writes),
        None if r.src_memory is None else r.src_memory.value,
        None if r.dst_memory is None else r.dst_memory.value,
        r.line,
        [[f.loop_id, f.iteration] for f in r.loops],
        r.bytes,
        r.flops,
        r.vector_ops,
        r.is_transpose,
        r.accumulate,
        None if r.matmul_kmn is None else list(r.matmul_kmn),
        r.dma_chunk_bytes,
        r.dma_chunks,
        r.extra,
    ]


def _record_from_list(row: list[Any]) -> TraceRecord:
    (
        index,
        engine,
        opcode,
        partitions,
        free_size,
        dtype,
        out_dtype,
        reads,
        writes,
        src,
        dst,
        line,
        loops,
        nbytes,
        flops,
        vector_ops,
        is_transpose,
        accumulate,
        kmn,
        chunk_bytes,
        chunks,
        extra,
    ) = row
    if not isinstance(extra, dict):
        raise ValueError("trace record 'extra' must be an object")
    return TraceRecord(
        index=int(index),
        engine=Engine(engine),
        opcode=str(opcode),
        partitions=int(partitions),
        free_size=int(free_size),
        dtype=str(dtype),
        out_dtype=str(out_dtype),
        reads=_regions_from_list(reads),
        writes=_regions_from_list(writes),
        src_memory=None if src is None else Memory(src),
        dst_memory=None if dst is None else Memory(dst),
        line=int(line),
        loops=tuple(LoopFrame(int(a), int(b)) for a, b in loops),
        bytes=int(nbytes),
        flops=int(flops),
        vector_ops=int(vector_ops),
        is_transpose=bool(is_transpose),
        accumulate=bool(accumulate),
        matmul_kmn=None if kmn is None else (int(kmn[0]), int(kmn[1]), int(kmn[2])),
        dma_chunk_bytes=int(chunk_bytes),
        dma_chunks=int(chunks),
        extra=dict(extra),
    )
