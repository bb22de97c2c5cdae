"""Lowering: one trace record -> the engine work it costs (NKI_NOTES §4).

A compute record lowers to the engines that may legally run it, each with its duration; the
scheduler picks one (the kernel's own choice, or the least-loaded legal engine for work left to
the compiler). A DMA record lowers to one piece per DMA engine serving its partitions, each
occupying that engine for its bytes at the engine's streaming rate (reduced for small packets:
a packet is one partition's row, or all the engine's rows when they lie back to back in HBM,
`adjacent_hbm_rows`), plus a fixed completion latency that does not occupy the engine
(transfers pipeline).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from accelopt.hardware.roofline import dtype_bytes
from accelopt.hardware.specs import HardwareSpec
from accelopt.nki.trace import Engine, Memory, Region, Trace, TraceRecord

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")

# Legal engines for work the kernel left to the compiler, the default first.
_UNASSIGNED_CHOICES: dict[str, tuple[str, ...]] = {
    "tensor_scalar": ("vector", "scalar", "gpsimd"),
    "tensor_copy": ("vector", "scalar", "gpsimd"),
    "copy": ("vector", "scalar", "gpsimd"),
    "memset": ("vector", "gpsimd"),  # [ISA-MEMSET]: "using Vector or GpSimd Engine"
    "psum_copy": ("vector", "scalar"),
    "reciprocal": ("vector", "scalar"),
    "tensor_tensor": ("vector", "gpsimd"),
    "select": ("vector", "gpsimd"),
    "tensor_reduce": ("vector", "gpsimd"),
    "activation": ("scalar",),
    "activation_reduce": ("scalar",),
    "iota": ("gpsimd",),
    "affine_select": ("gpsimd",),
}
_TENSOR_ENGINE_OPS = frozenset({"nc_matmul", "matmul", "transpose", "nc_transpose", "broadcast"})
_DMA_TRANSPOSE_OPS = frozenset({"load_transpose2d", "dma_transpose"})


@dataclass(slots=True)
class ComputeWork:
    """A compute record: legal engines with the seconds each would take."""

    options: tuple[tuple[str, float], ...]


@dataclass(slots=True)
class DmaWork:
    """A DMA record: (DMA engine, seconds it occupies the engine) pieces + completion latency."""

    pieces: tuple[tuple[int, float], ...]
    latency_s: float
    hbm_read_bytes: int
    hbm_write_bytes: int


def region_bytes(trace: Trace, region: Region) -> int:
    info = trace.tensors.get(region.tensor_id)
    size = dtype_bytes(info.dtype) if info is not None else 4
    n = 1
    for start, stop in region.box:
        n *= max(0, stop - start)
    return n * size


def _is_psum(memory: Mapping[int, Memory], region: Region) -> bool:
    return memory.get(region.tensor_id) is Memory.PSUM


def _on_chip_inputs(memory: Mapping[int, Memory], rec: TraceRecord) -> int:
    count = 0
    for region in rec.reads:
        where = memory.get(region.tensor_id)
        if where is not None and where is not Memory.HBM:
            count += 1
    return count


def _psum_inputs(memory: Mapping[int, Memory], rec: TraceRecord) -> int:
    return sum(1 for region in rec.reads if _is_psum(memory, region))


def _is_half(dtype: str) -> bool:
    return dtype_bytes(dtype) <= 2


_BF16_FAST_OPS = frozenset({"add", "multiply", "subtract"})
_BF16 = frozenset({"bfloat16", "bf16"})


def _is_bf16_streaming(rec: TraceRecord) -> bool:
    """[ISA-TT]'s one-pass case of a tensor_tensor with both inputs in SBUF: every input and the
    output bf16, the operator add/multiply/subtract, contiguous elements (a record that says
    nothing about its stride is taken as contiguous)."""
    return (
        rec.dtype in _BF16
        and (rec.out_dtype or rec.dtype) in _BF16
        and str(rec.extra.get("op", "")) in _BF16_FAST_OPS
        and int(rec.extra.get("stride_bytes", 0) or 0) <= dtype_bytes(rec.dtype)
    )


def is_tensor_engine(rec: TraceRecord) -> bool:
    return rec.engine is Engine.TENSOR or (
        rec.engine is Engine.UNASSIGNED and rec.opcode in _TENSOR_ENGINE_OPS
    )


def _is_mx(rec: TraceRecord) -> bool:
    """A microscaled (MXFP8/MXFP4) matmul: the x4-packed dtypes or the `_mx` instruction."""
    return "mx" in rec.opcode or "_x4" in rec.dtype


def tensor_engine_cycles(rec: TraceRecord, hw: HardwareSpec) -> float:
    """`max(min(64, M), N)` cycles, x4 for fp32 operands, at the sustained efficiency (§4).

    fp8 operands run at the generation's fp8 rate (Trainium2: double-FP8 mode, a 256-deep
    contraction in the time of a 128-deep one), MX operands at its MX rate (Trainium3: 4x); the
    emulator sizes K by the logical contraction, so the faster rate shows as fewer cycles.
    """
    if rec.matmul_kmn is not None:
        _, m, n = rec.matmul_kmn
    else:  # a broadcast/transpose the emulator did not size: stream the main input once
        m, n = hw.pe_array, rec.free_size
    cycles = float(max(min(hw.min_initiation_cycles, m), n, 1))
    if dtype_bytes(rec.dtype) >= 4 and rec.dtype not in ("tfloat32", "tf32"):
        cycles *= hw.fp32_matmul_factor
        if rec.is_transpose:
            cycles /= hw.fp32_transpose_speedup
    elif _is_mx(rec):
        cycles /= hw.tensor_mx_speedup
    elif dtype_bytes(rec.dtype) == 1 and rec.matmul_kmn is not None and rec.matmul_kmn[0] > hw.pe_array:
        cycles /= hw.tensor_fp8_speedup  # a double-row fp8 matmul: K up to 2 x 128 in one pass
    return cycles / hw.tensor_efficiency


def _base_cycles(
    opcode: str, engine: str, rec: TraceRecord, memory: Mapping[int, Memory], hw: HardwareSpec
) -> int:
    """Cycles of an ALU-engine instruction by the §4 table (before per-access overheads)."""
    n = max(rec.free_size, 0)
    floor = hw.min_initiation_cycles
    if opcode in ("activation", "activation_reduce"):
        cycles = max(floor, n)
        if opcode == "activation_reduce" or rec.extra.get("has_reduce"):
            cycles += 64  # §4: activation + reduction
        return cycles
    if opcode in ("tensor_tensor", "select"):
        if _psum_inputs(memory, rec) >= 1:
            return max(floor, n)
        # [ISA-TT]: both inputs in SBUF cost 2N, except N when inputs and output are all bf16,
        # the operator is add, multiply or subtract and the elements are contiguous
        return max(floor, n if _is_bf16_streaming(rec) else 2 * n)
    if opcode == "scalar_tensor_tensor":
        # [ISA-STT]: 2N; N only for bf16 data and operand1 with op0 subtract, op1 multiply, N even
        fast = (
            rec.dtype in _BF16
            and str(rec.extra.get("op", "")) == "subtract"
            and str(rec.extra.get("op1", "")) == "multiply"
            and n % 2 == 0
        )
        return max(floor, n if fast else 2 * n)
    if opcode == "tensor_copy_predicated":
        # [ISA-COPYPRED]: N when the source or the predicate is in PSUM, 2N when both are in SBUF
        return max(floor, n if _psum_inputs(memory, rec) >= 1 else 2 * n)
    if opcode == "tensor_tensor_scan":
        return max(floor, 2 * n)
    if opcode == "tensor_reduce":
        # [ISA-TR]: N/2 when input and output are both bf16 and the operator is add or maximum
        op = str(rec.extra.get("op", "")).lower()
        both_bf16 = rec.dtype in _BF16 and (rec.out_dtype or rec.dtype) in _BF16
        if both_bf16 and any(k in op for k in ("add", "max", "sum")):
            return max(floor, n // 2)
        return max(floor, n)
    if opcode == "reciprocal" or (opcode == "tensor_scalar" and _operators(rec) == ("reciprocal", None)):
        # [ISA-RECIP], [NKI-OPS]: 8N on the Vector Engine, N as a Scalar Engine activation
        return max(floor, _VECTOR_RECIPROCAL_FACTOR * n) if engine == "vector" else max(floor, n)
    if opcode in ("iota", "affine_select"):
        return 150 + n
    if opcode == "memset":
        # [ISA-MEMSET]: N/2 when the value is zero and the output bf16/fp16, else N
        half_out = _is_half(rec.out_dtype or rec.dtype)
        return max(floor, n // 2 if fills_zero(rec) and half_out else n)
    if rec.extra.get("dynamic"):
        # a copy placed by a run-time offset waits for the offset ([ISA-DYNCOPY], specs.py)
        return max(hw.dynamic_min_initiation_cycles, n)
    # tensor_scalar, memset, tensor_copy, psum_copy, bn_stats, bn_aggr and anything unlisted:
    # one pass over the main input (§4).
    return max(floor, n)


def fills_zero(rec: TraceRecord) -> bool:
    """A memset of zeros ([ISA-MEMSET] prices it apart); the scheduler's cache of lowered
    instructions keys on it too."""
    return float(rec.extra.get("value", 1.0) or 0.0) == 0.0


# [ISA-TS] (nki.isa.tensor_scalar): "the Scalar Engine only supports a subset of the operator
# combination: op0=np.multiply and op1=np.add; op0=np.multiply and op1=None; op0=add and
# op1=None", and "the compiler instruction scheduler selects the engine automatically based on
# the operator types"; GpSimd is "only allowed for rsqrt" (the legacy reference's `engine`).
# [NKI-OPS] narrows the Scalar Engine's part by generation: "Add and Multiply are supported on
# Scalar Engine only from NeuronCore-v3" (`HardwareSpec.scalar_alu_arithmetic`, `_scalar_runs`).
_SCALAR_TENSOR_SCALAR_OPS = frozenset({("multiply", "add"), ("multiply", None), ("add", None)})

# [NKI-OPS] "Supported Activation Functions for NKI ISA": the functions the Scalar Engine
# evaluates (as an `activation` instruction, on every generation). A one-operand elementwise op
# among them that the kernel left to the compiler (`nl.square`, `nl.reciprocal`, `nl.abs`, ...,
# which the emulator records as a tensor_scalar) may run there as well as on the Vector Engine.
SCALAR_ACTIVATION_FUNCTIONS = frozenset(
    {
        "copy",
        "square",
        "sigmoid",
        "relu",
        "gelu",
        "gelu_dx",
        "gelu_apprx_tanh",
        "gelu_apprx_sigmoid",
        "gelu_apprx_sigmoid_dx",
        "silu",
        "silu_dx",
        "tanh",
        "softplus",
        "mish",
        "erf",
        "erf_dx",
        "exp",
        "log",
        "sin",
        "arctan",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sign",
        "abs",
    }
)

# [NKI-OPS] "NKI Engine Selection for Operators Supported on Multiple Engines": reciprocal on
# the Vector Engine costs max(MIN_II, 8N) against max(MIN_II, N) as a Scalar activation; rsqrt
# on GpSimd (`tensor_scalar(op0=rsqrt)`) has "4x lower" throughput than on the Scalar Engine.
_VECTOR_RECIPROCAL_FACTOR = 8
_GPSIMD_RSQRT_FACTOR = 4


def _operators(rec: TraceRecord) -> tuple[str | None, str | None]:
    op0 = str(rec.extra.get("op", "")) or None
    op1 = str(rec.extra["op1"]) if rec.extra.get("op1") else None
    return op0, op1


def _operand_is_tile(rec: TraceRecord, index: int) -> bool:
    """Whether a tensor_scalar's operand `index` (0 or 1) is a [P, 1] tile, not a constant."""
    kinds = rec.extra.get("tile_operands")
    if kinds:
        return bool(kinds[index])
    # a record that does not say: its reads are the data tile, then its tile operands in order;
    # with one tile among two operands, which one is unknown, so the add's is taken as constant
    tiles = len(rec.reads) - 1
    return tiles >= index + 1


def _scalar_runs(op0: str, op1: str | None, rec: TraceRecord, hw: HardwareSpec) -> bool:
    """Whether the Scalar Engine implements a tensor_scalar with operators (op0, op1) on `hw`.

    One activation-table function alone runs there on every generation ([NKI-OPS]). The
    multiply/add pairs of [ISA-TS] run there as ALU operators from NeuronCore-v3 on ([NKI-OPS]);
    before that only as the activation's pipelined multiply-add, func(data * scale + bias) with
    func the identity ([TRN-ARCH] "Pipelined Multiply-Add": "the bias can only be a tile from
    SBUF/PSUM with one element/partition", the scale a tile or a constant; [PERF-GUIDE] Opt #5a
    shows such IDENTITY activations on NeuronCore-v2 "equivalent to calling
    nki.isa.tensor_scalar(op0=nl.multiply, op1=add)"). So on NeuronCore-v2 an add of a constant
    stays off the Scalar Engine. *inferred* from those statements together.
    """
    if op1 is None and op0 in SCALAR_ACTIVATION_FUNCTIONS:
        return True
    if (op0, op1) not in _SCALAR_TENSOR_SCALAR_OPS:
        return False
    if hw.scalar_alu_arithmetic:
        return True
    if op1 == "add":
        return _operand_is_tile(rec, 1)
    if op0 == "add":
        return _operand_is_tile(rec, 0)
    return True  # (multiply, -): the activation's scale, a constant or a tile


def _tensor_scalar_engines(rec: TraceRecord, choices: tuple[str, ...], hw: HardwareSpec) -> tuple[str, ...]:
    """The engines among `choices` whose ALUs implement the record's operator pair on `hw`."""
    op0, op1 = _operators(rec)
    if op0 is None:  # a record that does not say its operators: keep every choice
        return choices
    legal = []
    for engine in choices:
        if engine == "scalar" and not _scalar_runs(op0, op1, rec, hw):
            continue
        if engine == "gpsimd" and "rsqrt" not in (op0, op1):
            continue
        if engine == "vector" and op0 == "rsqrt" and op1 is None and "scalar" in choices:
            continue  # [NKI-OPS]: rsqrt runs on GpSimd or Scalar, not on the Vector Engine
        legal.append(engine)
    return tuple(legal) or ("vector",)


def _legal_engines(rec: TraceRecord, memory: Mapping[int, Memory], hw: HardwareSpec) -> tuple[str, ...]:
    if rec.engine is not Engine.UNASSIGNED:
        return (rec.engine.value,)
    declared = rec.extra.get("engines")  # the emulator lists the legal engines it saw
    if declared:
        choices = tuple(str(e) for e in declared if str(e) in COMPUTE_ENGINES and str(e) != "tensor")
    else:
        choices = _UNASSIGNED_CHOICES.get(rec.opcode, ("vector", "scalar"))
    choices = choices or ("vector",)
    if rec.opcode == "tensor_scalar":
        choices = _tensor_scalar_engines(rec, choices, hw)
    elif rec.opcode == "memset":  # [ISA-MEMSET]: no Scalar Engine memset
        choices = tuple(e for e in choices if e != "scalar") or ("vector",)
    touches_psum = any(_is_psum(memory, r) for r in (*rec.reads, *rec.writes))
    if touches_psum:  # GpSimd has no PSUM access (§2)
        choices = tuple(e for e in choices if e != "gpsimd") or ("vector",)
    return choices


# [TRN2-ARCH] lists tensor_copy and tensor_scalar (and tensor_tensor) for performance mode;
# memset is not among them and keeps its own bf16 rate ([ISA-MEMSET], `_base_cycles`).
_PERF_MODE_COPIES = frozenset({"tensor_copy", "copy", "tensor_scalar", "psum_copy"})


def vector_perf_mode(rec: TraceRecord, memory: Mapping[int, Memory], hw: HardwareSpec, stride: int) -> float:
    """The Vector Engine's performance-mode speedup for `rec` (1 when it does not apply).

    Trainium2's rules ([TRN2-ARCH] in hardware/specs.py), with bf16/fp16 input and output:
    tensor_copy / tensor_scalar with both sides in SBUF and contiguous innermost elements 4x;
    the same non-contiguous, or with one side in PSUM, 2x; tensor_tensor with both inputs in
    SBUF 2x. Trainium1 has no performance mode (every factor 1). A reduction keeps its own
    bf16 rate (§4: N/2) and is not sped up again.
    """
    if not (_is_half(rec.dtype) and _is_half(rec.out_dtype or rec.dtype)):
        return 1.0
    psum_sides = sum(1 for r in (*rec.reads, *rec.writes) if _is_psum(memory, r))
    opcode = rec.opcode
    if opcode in _PERF_MODE_COPIES:
        if psum_sides == 0 and stride <= dtype_bytes(rec.dtype):
            return hw.vector_perf_mode_copy_speedup
        return hw.vector_perf_mode_speedup if psum_sides <= 1 else 1.0
    if opcode in ("tensor_tensor", "select") and psum_sides == 0:
        return hw.vector_perf_mode_speedup
    return 1.0


def lower_compute(
    rec: TraceRecord, memory: Mapping[int, Memory], hw: HardwareSpec, balance: bool
) -> ComputeWork:
    """Engines that may run `rec` and how long each takes. `memory` maps tensor ids to where
    the compiler keeps them (a Tensor Engine broadcast result stays in PSUM, see
    compiler_model)."""
    if is_tensor_engine(rec):
        seconds = tensor_engine_cycles(rec, hw) / hw.tensor_clock_hz
        return ComputeWork(options=(("tensor", seconds),))
    engines = _legal_engines(rec, memory, hw)
    if not balance:
        engines = engines[:1]
    inputs = max(1, _on_chip_inputs(memory, rec))
    stride = int(rec.extra.get("stride_bytes", 0) or 0)
    options = []
    tiny = rec.free_size <= hw.min_initiation_cycles
    speedup = vector_perf_mode(rec, memory, hw, stride)
    for engine in engines:
        cycles = float(_base_cycles(rec.opcode, engine, rec, memory, hw))
        if stride > hw.stride_penalty_bytes:
            cycles *= 2  # §4: innermost stride over 16 B halves the streaming bandwidth
        if engine == "vector" and speedup > 1:
            cycles = max(hw.min_initiation_cycles, cycles / speedup)
        if engine == "gpsimd" and rec.opcode not in ("iota", "affine_select"):
            if rec.opcode == "tensor_scalar" and "rsqrt" in _operators(rec):
                cycles *= _GPSIMD_RSQRT_FACTOR  # [NKI-OPS]: 4x the Scalar Engine's time
            else:
                cycles *= hw.gpsimd_elementwise_factor
        cycles += hw.access_init_cycles * inputs  # §4: ≈60 cycles per SBUF/PSUM access
        if tiny:
            # §4: ≈100 cycles static overhead when instructions are tiny. *inferred*: an
            # instruction long enough to stream hides it (and the wait on a predecessor) behind
            # the previous instruction's streaming; the published Mamba kernels (§7) run five
            # dependent 512-element Vector instructions per state at ≈10N cycles in total.
            cycles += hw.static_overhead_cycles
        options.append((engine, cycles / hw.engine_clock_hz(engine)))
    return ComputeWork(options=tuple(options))


def staging_copy(free_size: int, hw: HardwareSpec, balance: bool) -> ComputeWork:
    """The PSUM -> SBUF copy that lands a Tensor Engine result the kernel uses from SBUF (§4:
    `nl.matmul` = transpose + copy + matmul), on the Vector or the Scalar Engine."""
    cycles = max(hw.min_initiation_cycles, free_size) + hw.access_init_cycles
    if free_size <= hw.min_initiation_cycles:
        cycles += hw.static_overhead_cycles
    engines = ("vector", "scalar") if balance else ("vector",)
    return ComputeWork(options=tuple((e, cycles / hw.engine_clock_hz(e)) for e in engines))


def chunk_efficiency(chunk_bytes: float, hw: HardwareSpec) -> float:
    """Streaming efficiency of a DMA moving contiguous chunks of `chunk_bytes`."""
    anchors = hw.dma_chunk_efficiency
    if chunk_bytes <= anchors[0][0]:
        return anchors[0][1]
    if chunk_bytes >= anchors[-1][0]:
        return anchors[-1][1]
    x = math.log2(chunk_bytes)
    for (c0, e0), (c1, e1) in itertools.pairwise(anchors):
        if chunk_bytes <= c1:
            t = (x - math.log2(c0)) / (math.log2(c1) - math.log2(c0))
            return e0 + t * (e1 - e0)
    return anchors[-1][1]


def _partition_span(trace: Trace, region: Region) -> tuple[int, int] | None:
    info = trace.tensors.get(region.tensor_id)
    if info is None or info.memory is Memory.HBM:
        return None
    axis = info.block_dims
    if axis >= len(region.box):
        return None
    return region.box[axis]


@functools.lru_cache(maxsize=4096)
def dma_pieces(
    nbytes: int, span: tuple[int, int] | None, chunk: float, hw: HardwareSpec, efficiency: float = 1.0
) -> tuple[tuple[int, float], ...]:
    """Split `nbytes` over the DMA engines serving partitions `span` (all engines if None)."""
    rate = hw.dma_queue_bytes_per_s * chunk_efficiency(chunk, hw) * efficiency
    per = hw.partitions_per_dma_engine
    if span is None:
        share = nbytes / hw.dma_engines
        return tuple((q, share / rate) for q in range(hw.dma_engines))
    p0, p1 = span
    p1 = max(p1, p0 + 1)
    parts = p1 - p0
    pieces = []
    first, last = p0 // per, (p1 - 1) // per
    for engine in range(first, last + 1):
        lo, hi = max(p0, engine * per), min(p1, (engine + 1) * per)
        share = nbytes * (hi - lo) / parts
        pieces.append((engine % hw.dma_engines, share / rate))
    return tuple(pieces)


def dma_transpose_efficiency(rec: TraceRecord, hw: HardwareSpec) -> float | None:
    """A transposing DMA's streaming rate as a share of a plain copy's; None for other DMAs.

    The emulator records `nl.load_transpose2d` as a `dma_load` and `nisa.dma_transpose` as a
    `dma_copy`, both with `is_transpose` (older traces name the opcode itself). The DMA engines'
    own transpose (Trainium2 on: `dma_hw_transpose_efficiency`, [TRN2-ARCH] "DMA Transpose")
    takes only 2-byte elements ([ISA-DMAT]: the hardware-DGE and the indirect transpose both
    require "src.dtype is 2 bytes"); anything else is moved element by element
    (`dma_transpose_efficiency`). With SBUF on both sides the engines' transpose runs at
    `dma_sbuf_transpose_efficiency` ([TRN2-ARCH]: SBUF2SBUF up to 50%, HBM2SBUF up to 90%).
    """
    if not (rec.is_transpose or rec.opcode in _DMA_TRANSPOSE_OPS):
        return None
    by_dma_engine = rec.opcode == "dma_transpose" or rec.extra.get("api") == "nisa.dma_transpose"
    if by_dma_engine and dtype_bytes(rec.dtype) == 2:
        if rec.src_memory is Memory.SBUF and rec.dst_memory is Memory.SBUF:
            return hw.dma_sbuf_transpose_efficiency
        return hw.dma_hw_transpose_efficiency
    return hw.dma_transpose_efficiency


def hbm_region(rec: TraceRecord, trace: Trace) -> Region | None:
    """The region of HBM a DMA reads or writes (None for an on-chip to on-chip copy)."""
    for region in (*rec.reads, *rec.writes):
        info = trace.tensors.get(region.tensor_id)
        if info is not None and info.memory is Memory.HBM:
            return region
    return None


def adjacent_hbm_rows(rec: TraceRecord, trace: Trace) -> int:
    """How many consecutive partitions' rows of a DMA lie back to back in HBM (1 if none do).

    A DMA engine moves the rows of its 8 partitions as one packet, and when those rows are
    adjacent in HBM the packet is one contiguous read or write of all of them: [DMA-OV]'s
    A[128, 128] bf16 load (rows of 256 B, one after the other in HBM) has "each DMA engine
    performing a single DMA operation of 2KiB (8 rows x 128 elements x 2 bytes per element)",
    moved in 97 ns, 0.92 of the engine's 23 B/ns ([DMA-BW]), where 256 B chunks would be
    overhead-bound. Counted only when the HBM region is exactly the rows moved (no gaps, no
    indirection) and, for a plain copy, each partition's row is one contiguous chunk; the run
    is then how far the region stays contiguous in row-major order. A transposing DMA is
    charged against a plain copy of its tile (`dma_transpose_efficiency`), so its rows are
    that copy's: the tile's bytes per partition.
    """
    if rec.partitions <= 1 or rec.extra.get("indirect"):
        return 1
    transpose = rec.is_transpose or rec.opcode in _DMA_TRANSPOSE_OPS
    if transpose:
        row = rec.bytes // rec.partitions if rec.bytes % rec.partitions == 0 else 0
    else:
        row = rec.dma_chunk_bytes if rec.dma_chunks == rec.partitions else 0
    if row <= 0:
        return 1
    region = hbm_region(rec, trace)
    info = trace.tensors.get(region.tensor_id) if region is not None else None
    if region is None or info is None or len(info.shape) != len(region.box):
        return 1
    item = dtype_bytes(info.dtype)
    elements = 1
    for start, stop in region.box:
        elements *= max(0, stop - start)
    if elements * item != row * rec.partitions:
        return 1
    run = 1
    for (start, stop), size in zip(reversed(region.box), reversed(info.shape), strict=True):
        run *= stop - start
        if stop - start != size:
            break
    return max(1, min(rec.partitions, run * item // row))


def lower_dma(rec: TraceRecord, trace: Trace, hw: HardwareSpec) -> DmaWork:
    nbytes = rec.bytes or sum(region_bytes(trace, r) for r in rec.writes)
    on_chip = [r for r in (*rec.writes, *rec.reads) if _partition_span(trace, r) is not None]
    span = _partition_span(trace, on_chip[0]) if on_chip else None
    partitions = (span[1] - span[0]) if span else max(1, rec.partitions)
    chunk = rec.dma_chunk_bytes or nbytes / max(1, partitions)
    efficiency = 1.0
    transpose = dma_transpose_efficiency(rec, hw)
    if transpose is not None:
        # the transpose efficiencies are against a plain copy of the same tile, so the stream
        # is charged as that copy's rows (the record's element-sized chunks would count the
        # element granularity a second time)
        chunk = nbytes / max(1, partitions)
        efficiency = transpose
    # an engine's packet spans its partitions' rows when they are adjacent in HBM
    chunk *= min(adjacent_hbm_rows(rec, trace), hw.partitions_per_dma_engine)
    pieces = dma_pieces(nbytes, span, chunk, hw, efficiency)
    hbm_read = nbytes if rec.src_memory is Memory.HBM else 0
    hbm_write = nbytes if rec.dst_memory is Memory.HBM else 0
    return DmaWork(
        pieces=pieces, latency_s=hw.dma_fixed_latency_s, hbm_read_bytes=hbm_read, hbm_write_bytes=hbm_write
    )


def is_dma(rec: TraceRecord) -> bool:
    return rec.engine is Engine.DMA or rec.opcode.startswith("dma_") or rec.opcode in _DMA_TRANSPOSE_OPS
