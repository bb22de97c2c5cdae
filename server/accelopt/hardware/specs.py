"""What a NeuronCore is, as data: one frozen `HardwareSpec` per chip generation.

Every number the timing model uses lives here, never in the scheduler. Each carries a comment
saying where it comes from: a fact from `shared/NKI_NOTES.md` (section given), a public Neuron
SDK document (title and URL), *inferred* (our own reading of those facts) or *tuned* (chosen so
that our calibration kernels reproduce the published measurements of NKI_NOTES §7;
`benchmarks/calibration.py` prints them).

Documents cited below (AWS Neuron SDK documentation, awsdocs-neuron.readthedocs-hosted.com):
- [TRN2-ARCH] "Trainium2 Architecture Guide for NKI", /en/latest/nki/guides/architecture/trainium2_arch.html
- [TRN3-ARCH] "Trainium3 Architecture Guide for NKI", /en/latest/nki/about/trainium3_arch.html
- [NCV4] "NeuronCore-v4 Architecture", /en/latest/about-neuron/arch/neuron-hardware/neuron-core-v4.html
- [DMA-BW] "Guideline to Avoid Under-Utilizing DMA Bandwidth", /en/latest/nki/deep-dives/nki-dma-bandwidth-guide.html
- [ISA-RECIP] "nki.isa.reciprocal", /en/latest/nki/api/generated/nki.isa.reciprocal.html
- [ISA-DMAT] "nki.isa.dma_transpose" (SDK 2.29 on), /en/latest/nki/api/generated/nki.isa.dma_transpose.html:
  the hardware-DGE and the indirect (software-DGE) transpose both require 2-byte elements
- [ISA-TS] "nki.isa.tensor_scalar" (legacy reference, /en/v2.26.1/nki/api/generated/nki.isa.tensor_scalar.html):
  on the Scalar Engine only (multiply, add), (multiply, -) and (add, -); GpSimd only for rsqrt;
  the compiler picks the engine "based on the operator types" (used in profiling/lowering.py)
- [ISA-MEMSET] "nki.isa.memset" (legacy reference, /en/v2.26.1/nki/api/generated/nki.isa.memset.html):
  "using Vector or GpSimd Engine"; max(MIN_II, N/2) Vector Engine cycles for a zero value into
  bf16/fp16, max(MIN_II, N) otherwise (used in profiling/lowering.py)
- [ISA-DYNCOPY] "nki.isa.tensor_copy_dynamic_src" / "tensor_copy_dynamic_dst" (legacy reference,
  /en/v2.26.1/nki/api/generated/nki.isa.tensor_copy_dynamic_dst.html and
  /en/latest/general/nki/api/generated/nki.isa.tensor_copy_dynamic_src.html): "max(MIN_II_DYNAMIC,
  N) engine cycles", "MIN_II_DYNAMIC is roughly 600 engine cycles" (used in profiling/lowering.py)
- [ISA-TT], [ISA-STT], [ISA-COPYPRED], [ISA-TR]: the NKI ISA reference of the legacy
  `neuronxcc.nki.isa` (SDK 2.26, the NeuronCore-v2 costs), "Estimated instruction cost" of
  "nki.isa.tensor_tensor", "nki.isa.scalar_tensor_tensor", "nki.isa.tensor_copy_predicated" and
  "nki.isa.tensor_reduce",
  /en/v2.26.1/nki/api/generated/nki.isa.<name>.html (used in profiling/lowering.py)
- [NKI-OPS] "NKI API Common Fields" (legacy reference, /en/v2.26.1/nki/api/nki.api.shared.html; source
  general/nki/api/nki.api.shared.rst in github.com/aws-neuron/aws-neuron-sdk): the table "Supported
  Math Operators for NKI ISA" with its "Supported Engine" column and the note "Add and Multiply are
  supported on Scalar Engine only from NeuronCore-v3"; "Supported Activation Functions for NKI
  ISA" (the functions the Scalar Engine evaluates); "NKI Engine Selection for Operators Supported
  on Multiple Engines" (reciprocal max(MIN_II, N) on Scalar, max(MIN_II, 8*N) on Vector; rsqrt on
  GpSimd at 4x lower throughput than on Scalar). Used in profiling/lowering.py
- [NKI-SCHED] "nki.language.no_reorder", /en/latest/nki/api/generated/nki.language.no_reorder.html
  ("Without this directive, the compiler scheduler is free to reorder independent operations for
  better hardware utilization") and "nki.compiler.SchedulingHeuristic" (default ASAP: "select the
  instruction that can start first"), used in profiling/timeline.py
- [PERF-GUIDE] "NKI Performance Guide" (legacy, /en/v2.26.1/nki/deep-dives/nki_perf_guide.html; source
  general/nki/nki_perf_guide.rst in github.com/aws-neuron/aws-neuron-sdk), "Opt #5a": a NeuronCore-v2
  profile of back-to-back IDENTITY activations "equivalent to calling nki.isa.tensor_scalar(op0=
  nl.multiply, op1=add)" on the Scalar Engine (used in profiling/lowering.py)
- [KOPT] "Introduction to NKI Kernel Optimization" (trn2, Neuron Explorer), /en/latest/nki/guides/tutorials/kernel-optimization.html
- [ISA-MM] "nki.isa.nc_matmul", "Cost (Tensor Engine Cycles)" (the legacy reference, SDK 2.26,
  /en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html; the same formula as NKI_NOTES §4)
- [TRN-ARCH] "Trainium/Inferentia2 Architecture Guide for NKI", "Tensor Engine" (pipelined
  MultiplyMoving, background and fast LoadStationary), /en/latest/nki/guides/architecture/trainium_inferentia2_arch.html;
  its "Scalar Engine" / "Pipelined Multiply-Add": func(data * scale + bias) in one activation, "the
  scale can either be a tile from SBUF/PSUM with one element/partition or a compile-time constant.
  On the other hand, the bias can only be a tile" (used in profiling/lowering.py)
- [DMA-OV] "Introduction to Direct Memory Access (DMA) with NKI", /en/latest/nki/about/nki-dma-overview.html
- [DMA-INEFF] "How to identify and reduce inefficient DMA transfers" (Neuron Explorer),
  /en/latest/tools/neuron-explorer/how-to-reduce-inefficient-dma-transfers.html: a transfer is
  split "into packets, one per engine per group of SBUF partitions", and "a fixed cost that does
  not depend on its size" (descriptors, semaphores, a setup latency per packet)
- [PERF] "NKI Performance Optimizations", /en/latest/nki/deep-dives/nki_perf_guide.html, Opt #9:
  a [128, 1024] fp32 load of a [128, 1024] tensor maps "to 16 DMA transfers (1 transfer/DMA
  engine), with each DMA transfer moving 8 partitions worth of data: 8 partitions * 1024
  elements * 4B/element = 32 KiB"; "Beyond 1024 has diminished return on bandwidth"
- [ALLOC] "NKI Direct Allocation Developer Guide", /en/latest/general/nki/nki_direct_allocation_guide.html:
  the compiler's allocator decides "how many physical tiles are allocated to each tensor", its
  "key performance goal ... is to achieve instruction parallelism across different engines in
  NeuronCore while minimizing memory usage", double buffering lets a loop's load run beside
  the compute on the tile before; 16 KiB of each partition is "allocated for compiler internal
  usage" (used in profiling/compiler_model.py: `ModelOptions.overlap_iterations`)
- [MAMBA] "Fused Mamba" tutorial, /en/latest/general/nki/tutorials/fused_mamba.html: v1 at 4096
  channels reloads "the input u and delta tensors around 7 times" (input-load warnings, no
  spill rows), v2 spills at seq_len 8192 (qSyncSpillReload0, qVectorSpillReload0), and the
  seq_len table (v2 27.5 ms at 6144, 41.3 ms at 7168) puts the onset between them (used in
  profiling/compiler_model.py: `ModelOptions.rematerialize_loads`, `overlap_iterations`)
- [DGE] "Descriptor Generation Engine (DGE) Reference", /en/latest/nki/deep-dives/nki-dge.html: the
  modes `none` (descriptors pre-computed on the host and stored in HBM, "lowest per-transfer
  latency"), `swdge` (GpSimd makes them at run time), `hwdge` ("Each TRN2 NeuronCore has two DGE
  instances"; "Each hardware-DGE DMA instruction takes approximately 600 ns to execute"; NeuronCore-v3
  on) and `unknown` (the default: the compiler chooses)

Trainium3 (`TRN3`) is data from those specs only: nothing about it was measured, and every
figure the product shows for it says "from specs, not calibrated" (`calibrated` below).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    name: str

    # --- engines -------------------------------------------------------------------------
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    partitions: int  # lanes of every engine and rows of SBUF/PSUM
    pe_array: int  # the Tensor Engine's systolic array is pe_array x pe_array
    tensor_bf16_flops: float  # bf16 Tensor Engine peak, FLOP/s
    fp32_matmul_factor: float  # fp32 matmul runs this many times slower than bf16/tf32
    tensor_efficiency: float  # sustained / ideal Tensor Engine throughput when it is the bottleneck
    # Extra throughput of the Vector Engine on bf16 SBUF-only work (Trainium2 "performance mode");
    # kept for callers, the lowering uses the finer `vector_perf_mode_*` factors below.
    vector_bf16_speedup: float
    # GpSimd runs the same elementwise work as the Vector Engine this many times slower.
    gpsimd_elementwise_factor: float

    # --- per-instruction overheads (engine cycles) -----------------------------------------
    min_initiation_cycles: int  # no instruction on an ALU engine is shorter than this
    # no copy placed by a run-time offset (tensor_copy_dynamic_src/dst) is shorter than this
    dynamic_min_initiation_cycles: int
    static_overhead_cycles: int  # paid by tiny instructions (see lowering.lower_compute)
    access_init_cycles: int  # per SBUF/PSUM input operand an instruction streams
    semaphore_latency_s: float  # a cross-engine dependency is signalled through a semaphore

    # --- on-chip memories ------------------------------------------------------------------
    sbuf_bytes_per_partition: int  # usable by kernels
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int  # per partition

    # --- DMA and HBM -------------------------------------------------------------------------
    dma_engines: int
    partitions_per_dma_engine: int
    dma_engine_bytes_per_s: float  # one engine's streaming bandwidth
    hbm_bytes_per_s: float  # this core's share of the chip's HBM bandwidth
    dma_fixed_latency_s: float  # descriptor set-up + semaphore round trip of every transfer
    # Streaming efficiency against contiguous chunk size (bytes per chunk on the HBM side):
    # piecewise linear in log2(chunk) between the anchors, flat outside them.
    dma_chunk_efficiency: tuple[tuple[int, float], ...]
    dma_transpose_efficiency: float  # nl.load_transpose2d: element-granular DMA
    stride_penalty_bytes: int  # an innermost free-dim stride above this halves SBUF bandwidth

    # --- roofline (AccelOpt's convention, NKI_NOTES §6) --------------------------------------
    roofline_vector_flops: float
    roofline_matmul_flops: float
    roofline_hbm_bytes_per_s: float
    # Tensor Engine max ops/s ÷ HBM bandwidth, the profiler's peak_flops_bandwidth_ratio.
    peak_flops_bandwidth_ratio: float

    port_conflicts: bool  # Trainium1: Vector/GpSimd share SBUF ports, Vector/Scalar share PSUM
    profiler_clock_hz: float

    # --- generation features ------------------------------------------------------------------
    # Vector Engine performance mode (Trainium2 on): the speedup of tensor_copy/tensor_scalar with
    # bf16/fp16 input and output both in SBUF, and of the other cases the [TRN2-ARCH] lists at 2x
    # (tensor_tensor with both inputs in SBUF, copies with one side in PSUM).
    vector_perf_mode_copy_speedup: float = 1.0
    vector_perf_mode_speedup: float = 1.0
    # Matmul rate multiplier for fp8 / MX (microscaled fp8/fp4) operands over bf16.
    tensor_fp8_speedup: float = 1.0
    tensor_mx_speedup: float = 1.0
    # The Tensor Engine's transpose mode (NeuronCore-v3 on): an fp32 transpose this much faster.
    fp32_transpose_speedup: float = 1.0
    # Efficiency of an HBM<->SBUF DMA transpose (nisa.dma_transpose) of 2-byte elements against
    # a plain copy ([ISA-DMAT]: other dtypes are not the engines' transpose; they are charged
    # `dma_transpose_efficiency`, see lowering.dma_transpose_efficiency).
    dma_hw_transpose_efficiency: float = 0.1
    # The same transpose with SBUF on both sides (SBUF2SBUF), against a plain copy ([TRN2-ARCH]
    # "SBUF2SBUF DMA transpose": "up to 50% of DMA throughput on Trainium2").
    dma_sbuf_transpose_efficiency: float = 0.1
    # Time from the start of a kernel's execution on the device to its first instruction, which
    # the profiler's total_time includes (see TRN2 below); 0 where nothing public gives it.
    kernel_start_s: float = 0.0
    # Hardware descriptor generators (DGE) per NeuronCore; each DMA instruction holds one for
    # `dma_fixed_latency_s` ([DGE]). 0: descriptors are made before the kernel runs (Trainium1).
    dge_instances: int = 0
    # Whether the Vector Engine's performance mode runs on a memory bus shared with GpSimd
    # ([TRN2-ARCH] "Data Movement Updates"): such instructions and GpSimd's SBUF work take turns.
    vector_gpsimd_shared_bus: bool = False
    # Whether the Scalar Engine's ALU runs tensor_scalar's add and multiply ([NKI-OPS]: "only from
    # NeuronCore-v3"); before that it evaluates only the activation functions (lowering.py).
    scalar_alu_arithmetic: bool = True
    # Whether the numbers were checked against measurements; False = "from specs, not calibrated".
    calibrated: bool = True

    @property
    def label(self) -> str:
        """How figures for this hardware are introduced: its name, and whether it is calibrated."""
        return self.name if self.calibrated else f"{self.name} (from specs, not calibrated)"

    def engine_clock_hz(self, engine: str) -> float:
        return {
            "tensor": self.tensor_clock_hz,
            "vector": self.vector_clock_hz,
            "scalar": self.scalar_clock_hz,
            "gpsimd": self.gpsimd_clock_hz,
        }[engine]

    @property
    def dma_queue_bytes_per_s(self) -> float:
        """Per-queue bandwidth once the queues together are capped by this core's HBM share."""
        return min(self.dma_engine_bytes_per_s, self.hbm_bytes_per_s / self.dma_engines)


# The chunk-efficiency anchors shared by every generation (same DMA engine design, [DMA-BW]):
# - 4 KiB per partition and above stream at full speed ([DMA-BW]: "≥ 4 KiB per partition
#   (target for full saturation)");
# - 2 KiB "approaches peak bandwidth" ([DMA-BW]: the minimum recommended payload): 0.92 of the
#   streaming rate, the one 2 KiB packet a public profile times ([DMA-OV]'s A[128, 128] bf16
#   load: each engine reads 2 KiB in 97 ns, 21.1 B/ns against the 23 B/ns [DMA-BW] gives its
#   generation). That profile is of a NeuronCore-v3; *inferred* for Trainium1 because [DMA-OV]
#   gives the v2 and v3 DMA engines the same theoretical rate (27.2 GB/s). (Until issue 20 we
#   charged 0.5 here, from NKI_NOTES §4's "chunks under ≈2 KiB are overhead-dominated", then
#   0.85 inferred from "approaches peak"; the DMA audit of issue 20 replaced it by the
#   measurement.) Consistent with [KOPT]: its first trn2 matmul version streams 2 KiB rhs rows
#   and 512 B lhsT rows and keeps the Tensor Engine 70–87% busy, which needs the 2 KiB rows
#   near full rate.
# - below 1 KiB the efficiency floors at 0.35. *tuned*: the published DMA-bound matmul versions
#   (§7: 51.80 ms and 42.96 ms moving 5.4 GB and 4.4 GB in 256 B and 1 KiB chunks) sustain
#   ≈100 GB/s = 0.37 of the 272 GB/s the 16 engines stream, for 256 B and 1 KiB chunks alike
#   ([DMA-BW]: "256 B – 2 KiB per partition: improving but still below peak").
#
# The chunk is an engine's packet ([DMA-INEFF]: "one per engine per group of SBUF partitions";
# [PERF]: one transfer per engine "moving 8 partitions worth of data" of a contiguous tensor):
# one partition's row, or the rows of all the engine's partitions when they lie back to back in
# HBM. [DMA-OV]'s A[128, 128] bf16 load has "each DMA engine performing a single DMA operation of
# 2KiB (8 rows x 128 elements x 2 bytes per element)", moved in 97 ns (21 B/ns, 0.92 of the trn2
# engine's 23 B/ns), not at the rate of 256 B chunks (lowering.adjacent_hbm_rows). The tutorial
# matmuls above move rows apart in HBM (256 B of 8 KiB rows, 1 KiB of 16 KiB rows): unaffected.
_CHUNK_EFFICIENCY: tuple[tuple[int, float], ...] = ((512, 0.35), (1024, 0.4), (2048, 0.92), (4096, 1.0))

# Trainium2's DMA (hardware descriptor generation, [TRN2-ARCH] "DGE") keeps small payloads much
# closer to peak than Trainium1's. *tuned* on [KOPT]'s first trn2 version (fp32, rows of 512 B
# from lhsT and 2 KiB from rhs): Neuron Explorer shows DMA 99.9% and Tensor Engine 87% active,
# i.e. ≈10.7 GB moved in ≈1.15x the Tensor Engine's 27.5 ms, which needs ≈0.75 of the streaming
# rate at 512 B and ≈0.95 at 2 KiB. Trainium3 is assumed to keep this curve (*inferred*).
_CHUNK_EFFICIENCY_DGE: tuple[tuple[int, float], ...] = ((512, 0.75), (1024, 0.85), (2048, 0.95), (4096, 1.0))

# [DMA-BW]: "every DMA transfer incurs descriptor setup, synchronization, and
# semaphore-to-start latency (~1300 ns cross-engine)", the same on every generation.
_DMA_FIXED_LATENCY_S = 1.3e-6

TRN1 = HardwareSpec(
    name="trn1",
    tensor_clock_hz=2.8e9,  # §3
    vector_clock_hz=1.12e9,  # §3
    scalar_clock_hz=1.4e9,  # §3
    gpsimd_clock_hz=1.4e9,  # §3
    partitions=128,  # §3
    pe_array=128,  # §3: 128x128 systolic array
    tensor_bf16_flops=91.75e12,  # §3 (= 128*128*2*2.8e9)
    fp32_matmul_factor=4,  # §3/§4: fp32 at 1/4 rate
    tensor_efficiency=0.86,  # §4: measured 0.85–0.87 of ideal when the Tensor Engine bounds
    vector_bf16_speedup=1.0,  # §3: no performance mode on Trainium1
    # *inferred*: GpSimd is 8 general-purpose cores x 16 lanes (§3); elementwise work that the
    # Vector Engine streams in one pass takes it about twice as long.
    gpsimd_elementwise_factor=2.0,
    min_initiation_cycles=64,  # §4
    # [ISA-DYNCOPY]: "max(MIN_II_DYNAMIC, N) engine cycles", MIN_II_DYNAMIC "roughly 600"
    dynamic_min_initiation_cycles=600,
    static_overhead_cycles=100,  # §4
    access_init_cycles=60,  # §4
    # *inferred*: dependent one-element Scalar instructions issue every ≈189 ns (§4) =
    # 265 cycles at 1.4 GHz, of which 64 + 60 + 100 are the initiation interval, one access
    # and the static overhead; the ≈30 ns left is the cross-engine signalling we charge.
    semaphore_latency_s=30e-9,
    sbuf_bytes_per_partition=180_224,  # §3 (192 KiB minus 16 KiB reserved)
    psum_bytes_per_partition=16 * 1024,  # §3
    psum_banks=8,  # §3
    psum_bank_bytes=2048,  # §3
    dma_engines=16,  # §3
    # §3; [DMA-OV]: "each DMA engine is typically responsible for moving data for eight SBUF
    # partitions", and its profiled A[4, 4096] load keeps a single engine busy
    partitions_per_dma_engine=8,
    # §3; [DMA-BW]'s table: 17 B/ns per engine (272 GB/s over 16) is what "large contiguous
    # payloads (≥4 KiB per partition) ... allow each engine to sustain". [DMA-OV] gives 27.2 GB/s
    # per engine, but as the *theoretical* bandwidth and the same for NeuronCore-v2 and -v3, where
    # [DMA-BW] sustains 17 and 23 B/ns: a link rate, not a streaming rate. The sustained figure is
    # the one the model needs, and it agrees with the counters of real trn1 kernels (NKI_NOTES §3,
    # §7: large transfers and DMA-bound kernels sustain 225-295 GB/s; 16 x 27.2 = 435 GB/s would
    # also exceed the core's 410 GB/s HBM share). Decided on what each document measures.
    dma_engine_bytes_per_s=17e9,
    hbm_bytes_per_s=410e9,  # §3: 820 GB/s per chip shared by 2 cores
    dma_fixed_latency_s=_DMA_FIXED_LATENCY_S,  # [DMA-BW]; NKI_NOTES §4: ≈1–1.5 µs
    dma_chunk_efficiency=_CHUNK_EFFICIENCY,
    # *inferred*: a transposing load moves one element per descriptor; §4 only says "much
    # slower", we charge it a tenth of a plain copy's rate of the same tile (lowering.lower_dma).
    dma_transpose_efficiency=0.1,
    stride_penalty_bytes=16,  # §4
    roofline_vector_flops=286.7e9,  # §6: 2 engines x 128 lanes x 1.12 GHz
    roofline_matmul_flops=23.75e12,  # §6: fp32 Tensor Engine peak
    roofline_hbm_bytes_per_s=440.2e9,  # §6: 410 GiB/s
    peak_flops_bandwidth_ratio=223.78,  # §5: 91.75e12 / 410e9
    port_conflicts=True,  # §3
    profiler_clock_hz=1.4e9,  # §3
    # [NKI-OPS]: "Add and Multiply are supported on Scalar Engine only from NeuronCore-v3": a
    # tensor_scalar multiply/add left to the compiler reaches the Scalar Engine of NeuronCore-v2
    # only as an activation's scale and bias tile (profiling/lowering.py `_scalar_runs`)
    scalar_alu_arithmetic=False,
)

TRN2 = HardwareSpec(
    name="trn2",
    tensor_clock_hz=2.4e9,  # §3; [TRN2-ARCH] engine table
    vector_clock_hz=0.96e9,  # §3; [TRN2-ARCH]
    scalar_clock_hz=1.2e9,  # §3; [TRN2-ARCH]
    gpsimd_clock_hz=1.2e9,  # §3; [TRN2-ARCH]
    partitions=128,
    pe_array=128,
    tensor_bf16_flops=79e12,  # §3; [TRN2-ARCH]: 79 BF16/FP16/TF32 dense TFLOPS
    # [TRN2-ARCH]: "158 FP8, 79 BF16/FP16/TF32 and 20 FP32 dense TFLOPS" per NeuronCore-v3.
    fp32_matmul_factor=79 / 20,
    # [ISA-MM]: a bf16 matmul costs max(min(64, N_stationary), N_moving) Tensor Engine cycles,
    # with no derating, and [TRN-ARCH]: back-to-back MultiplyMoving instructions issue every
    # max(N, 64) cycles while the next stationary tile loads in the background ("background
    # LoadStationary"), so a stream of [128, 128] x [128, 512] matmuls runs at the engine's
    # peak: one moving column per cycle, 128 x 128 x 2 x 2.4e9 = 78.6 TFLOPS, [TRN2-ARCH]'s 79.
    # Checked on [KOPT]'s trn2 profiles: against the trn1-tuned 0.86 (§4, which absorbs the rest
    # of trn1's published v4 latency, not a Tensor Engine figure), 1.0 brings the model's busy
    # shares of the four tutorial versions closer to Neuron Explorer's (median error over the 14
    # published figures 5 -> 4 points; v2's DMA 0.80 -> 0.93 against 0.997, v1's Tensor Engine
    # 0.97 -> 0.83 against 0.87, v4's 0.98 -> 0.99 against 0.995); only the tutorial-order v3,
    # which spills in the model and not on the device, sees its Tensor Engine share drop
    # (0.70 -> 0.63 against 0.995: its spill waits become a larger share).
    tensor_efficiency=1.0,
    # [TRN2-ARCH] "Vector Engine Performance Mode": 4x for tensor_copy/tensor_scalar with bf16/fp16
    # input and output in SBUF (contiguous); 2x for tensor_tensor with both inputs in SBUF and for
    # copies/tensor_scalar with one side in PSUM.
    vector_bf16_speedup=2.0,
    vector_perf_mode_copy_speedup=4.0,
    vector_perf_mode_speedup=2.0,
    tensor_fp8_speedup=2.0,  # [TRN2-ARCH]: double FP8 matmul throughput
    fp32_transpose_speedup=2.0,  # [TRN2-ARCH] "Built-in Transpose Support": 2x for FP32 transposes
    gpsimd_elementwise_factor=2.0,  # *inferred*, as Trainium1
    min_initiation_cycles=64,  # *inferred*: same instruction pipeline as Trainium1
    dynamic_min_initiation_cycles=600,  # *inferred*: as Trainium1 ([ISA-DYNCOPY] covers Trn1/Trn2)
    static_overhead_cycles=100,
    access_init_cycles=60,
    semaphore_latency_s=30e-9,
    sbuf_bytes_per_partition=212_984,  # §3; [TRN2-ARCH]: 128 partitions of 224 KiB
    psum_bytes_per_partition=16 * 1024,  # §3: same PSUM
    psum_banks=8,
    psum_bank_bytes=2048,
    dma_engines=16,  # §3; [DMA-BW]
    partitions_per_dma_engine=8,  # [TRN2-ARCH]: "each DMA engine would be responsible for ... 128/16 = 8"
    dma_engine_bytes_per_s=23e9,  # §3; [DMA-BW]: 23 B/ns per engine, 368 GB/s aggregate
    hbm_bytes_per_s=2.9e12 / 8,  # §3: 2.9 TB/s per chip shared by 8 cores
    # [TRN2-ARCH] "Descriptor Generation Engine": "Each DGE-based DMA instruction takes about
    # 600 ns to execute on NeuronCore-v3" (descriptors made on demand by hardware; [DGE] gives the
    # same figure), against the ≈1.3 µs of a software-set-up transfer ([DMA-BW]).
    dma_fixed_latency_s=0.6e-6,
    # [DGE]: two hardware DGE instances per TRN2 NeuronCore, each instruction ≈600 ns on one of
    # them: at most 2 DMA instructions start per 600 ns (timeline._Scheduler), when descriptors
    # are generated on the device (ModelOptions.hardware_dge). Off by default: the product's
    # hardware backend compiles with `--disable-dge` ([DGE] mode `none`, descriptors pre-computed
    # on the host). Not settled: what fixed cost per transfer replaces the 600 ns in that mode
    # ([DGE] says only "lowest per-transfer latency"); the model keeps `dma_fixed_latency_s`.
    dge_instances=2,
    dma_chunk_efficiency=_CHUNK_EFFICIENCY_DGE,
    dma_transpose_efficiency=0.1,  # nl.load_transpose2d (element-granular), as Trainium1
    # [TRN2-ARCH] "DMA Transpose": HBM->SBUF transpose reaches up to 90% of a copy's throughput.
    dma_hw_transpose_efficiency=0.9,
    # [TRN2-ARCH] "SBUF2SBUF DMA transpose": "can achieve up to 50% of DMA throughput on
    # Trainium2" (the 90% above is the HBM2SBUF figure).
    dma_sbuf_transpose_efficiency=0.5,
    stride_penalty_bytes=16,
    # *inferred* from §3 with the §6 convention: 2 engines x 128 lanes x 0.96 GHz; fp32 matmul
    # = [TRN2-ARCH]'s 20 FP32 TFLOPS; HBM = this core's 2.9 TB/s / 8 share.
    roofline_vector_flops=2 * 128 * 0.96e9,
    roofline_matmul_flops=20e12,
    roofline_hbm_bytes_per_s=2.9e12 / 8,
    peak_flops_bandwidth_ratio=79e12 / (2.9e12 / 8),
    port_conflicts=False,  # §3; [TRN2-ARCH] "Data Movement Updates": both restrictions lifted
    # [TRN2-ARCH] "Data Movement Updates": "VectorE's performance mode leverages a shared memory
    # bus between the VectorE and GpsimdE engines", with the hardware "arbitrating between
    # GpsimdE and relevant VectorE instructions"
    vector_gpsimd_shared_bus=True,
    profiler_clock_hz=1.2e9,  # §3
    # [DMA-OV]: in both device traces it shows for one trn2 NeuronCore, the kernel's first
    # instruction (its first DMA trigger, compiler PC 2) comes ≈21 µs (the A[4, 4096] example:
    # the load sits at 21,000-21,500 ns) and ≈33 µs (A[128, 128]: trigger at 33,300 ns) after
    # the trace starts. *inferred*: that start is part of every profiled execution; we charge
    # the smaller figure. (Trainium1: no public trace gives it, so TRN1 charges none.)
    # Not settled: the nrtpy tutorial ("Tutorial: Validate, benchmark, and trace a kernel with
    # nrtpy", /en/latest/neuron-runtime/nrtpy/tutorial-validate-benchmark.html) shows a
    # device-side benchmark ("measures only NeuronCore execution") of a [4, 3] fp16 add at a
    # 3.2 µs mean (3.0 min): no such start in that measurement. The Fused Mamba tutorial (trn1)
    # says "every NEFF execution involves certain start-up and tear-down overhead" without a
    # figure. So the start belongs to profiler-trace totals (what Neuron Explorer's total_time
    # reports), and probably not to a device-side benchmark; the model charges it always.
    kernel_start_s=21e-6,
)

# Trainium3 (NeuronCore-v4): every figure from the published specs; nothing here was measured.
TRN3 = HardwareSpec(
    name="trn3",
    tensor_clock_hz=2.4e9,  # [TRN3-ARCH] engine table
    vector_clock_hz=1.2e9,  # [TRN3-ARCH]
    scalar_clock_hz=1.2e9,  # [TRN3-ARCH]
    gpsimd_clock_hz=1.2e9,  # [TRN3-ARCH]
    partitions=128,
    pe_array=128,
    tensor_bf16_flops=79e12,  # [TRN3-ARCH]: 79 BF16/FP16/TF32 TFLOPS
    fp32_matmul_factor=79 / 20,  # [TRN3-ARCH]: 20 FP32 TFLOPS
    tensor_efficiency=1.0,  # *inferred*: the ISA's cost without derating, as NeuronCore-v3
    vector_bf16_speedup=2.0,  # [TRN3-ARCH]: 512 BF16 vs 256 other elements per cycle
    vector_perf_mode_copy_speedup=4.0,  # *inferred*: performance mode as NeuronCore-v3
    vector_perf_mode_speedup=2.0,
    tensor_fp8_speedup=2.0,  # *inferred*: NeuronCore-v3's double-FP8 mode is kept
    tensor_mx_speedup=4.0,  # [TRN3-ARCH]: MX matmul at 4x the BF16 throughput (315 TFLOPS)
    fp32_transpose_speedup=2.0,  # *inferred*: NeuronCore-v3's transpose mode is kept
    gpsimd_elementwise_factor=2.0,  # *inferred*, as before
    min_initiation_cycles=64,  # *inferred*: same instruction pipeline
    dynamic_min_initiation_cycles=600,  # *inferred*: as before
    static_overhead_cycles=100,
    access_init_cycles=60,
    semaphore_latency_s=30e-9,
    # [TRN3-ARCH]: SBUF 32 MiB = 128 x 256 KiB; *inferred*: 16 KiB per partition reserved as before.
    sbuf_bytes_per_partition=256 * 1024 - 16 * 1024,
    psum_bytes_per_partition=16 * 1024,  # [TRN3-ARCH]: PSUM stays 2 MiB
    psum_banks=8,
    psum_bank_bytes=2048,
    dma_engines=16,  # [DMA-BW]
    partitions_per_dma_engine=8,
    dma_engine_bytes_per_s=33e9,  # [DMA-BW]: 33 B/ns per engine, 528 GB/s aggregate
    hbm_bytes_per_s=4.7e12 / 8,  # [TRN3-ARCH]: 4.7 TB/s per chip, 8 NeuronCores
    dma_fixed_latency_s=0.6e-6,  # *inferred*: hardware descriptor generation as NeuronCore-v3
    dge_instances=2,  # *inferred*: [DGE]'s two instances per NeuronCore-v3 core are kept
    dma_chunk_efficiency=_CHUNK_EFFICIENCY_DGE,
    dma_transpose_efficiency=0.1,
    dma_hw_transpose_efficiency=0.9,  # *inferred*: as NeuronCore-v3
    dma_sbuf_transpose_efficiency=0.5,  # *inferred*: as NeuronCore-v3
    stride_penalty_bytes=16,
    # §6 convention with [TRN3-ARCH]'s figures: 2 engines x 128 lanes x 1.2 GHz, 20 FP32 TFLOPS.
    roofline_vector_flops=2 * 128 * 1.2e9,
    roofline_matmul_flops=20e12,
    roofline_hbm_bytes_per_s=4.7e12 / 8,
    peak_flops_bandwidth_ratio=79e12 / (4.7e12 / 8),
    port_conflicts=False,
    vector_gpsimd_shared_bus=True,  # *inferred*: performance mode as NeuronCore-v3
    profiler_clock_hz=1.2e9,  # *inferred*: as NeuronCore-v3
    kernel_start_s=21e-6,  # *inferred*: as NeuronCore-v3 ([DMA-OV])
    calibrated=False,
)

_HARDWARE = {spec.name: spec for spec in (TRN1, TRN2, TRN3)}
HARDWARE_NAMES: tuple[str, ...] = tuple(_HARDWARE)


def get_hardware(name: str) -> HardwareSpec:
    try:
        return _HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown hardware {name!r}; choose one of {sorted(_HARDWARE)}") from None


def hardware_label(name: str) -> str:
    """`name`, marked "(from specs, not calibrated)" for hardware no measurement checked."""
    spec = _HARDWARE.get(name)
    return spec.label if spec is not None else name
