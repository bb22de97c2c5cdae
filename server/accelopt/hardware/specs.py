"""What a NeuronCore is, as data: one frozen `HardwareSpec` per chip generation.

Every number the timing model uses lives here, never in the scheduler. Each carries a comment
saying where it comes from: a fact from `shared/NKI_NOTES.md` (section given), *inferred* (our
own reading of those facts) or *tuned* (chosen so that our calibration kernels reproduce the
published Trainium1 measurements of NKI_NOTES §7; `benchmarks/calibration.py` prints them).
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
    # Extra throughput of the Vector Engine on bf16 SBUF-only work (Trainium2 "performance mode").
    vector_bf16_speedup: float
    # GpSimd runs the same elementwise work as the Vector Engine this many times slower.
    gpsimd_elementwise_factor: float

    # --- per-instruction overheads (engine cycles) -----------------------------------------
    min_initiation_cycles: int  # no instruction on an ALU engine is shorter than this
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


# The chunk-efficiency anchors shared by both generations (same DMA engine design):
# - 4 KiB chunks and above stream at full speed ("≥4 KiB per partition saturates", NKI_NOTES §4);
# - at 2 KiB half the time is overhead ("chunks under ≈2 KiB are overhead-dominated", §4);
# - below 1 KiB the efficiency floors at 0.35. *tuned*: the published DMA-bound matmul versions
#   (§7: 51.80 ms and 42.96 ms moving 5.4 GB and 4.4 GB in 256 B and 1 KiB chunks) sustain
#   ≈100 GB/s = 0.37 of the 272 GB/s the 16 engines stream, for 256 B and 1 KiB chunks alike.
_CHUNK_EFFICIENCY: tuple[tuple[int, float], ...] = ((512, 0.35), (1024, 0.4), (2048, 0.5), (4096, 1.0))

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
    partitions_per_dma_engine=8,  # §3
    dma_engine_bytes_per_s=17e9,  # §3: ≈17 B/ns per engine
    hbm_bytes_per_s=410e9,  # §3: 820 GB/s per chip shared by 2 cores
    dma_fixed_latency_s=1.2e-6,  # §4: ≈1–1.5 µs per transfer; low end, transfers pipeline
    dma_chunk_efficiency=_CHUNK_EFFICIENCY,
    # *inferred*: a transposing load moves one element per descriptor; §4 only says "much
    # slower", we charge it a tenth of the streaming rate.
    dma_transpose_efficiency=0.1,
    stride_penalty_bytes=16,  # §4
    roofline_vector_flops=286.7e9,  # §6: 2 engines x 128 lanes x 1.12 GHz
    roofline_matmul_flops=23.75e12,  # §6: fp32 Tensor Engine peak
    roofline_hbm_bytes_per_s=440.2e9,  # §6: 410 GiB/s
    peak_flops_bandwidth_ratio=223.78,  # §5: 91.75e12 / 410e9
    port_conflicts=True,  # §3
    profiler_clock_hz=1.4e9,  # §3
)

TRN2 = HardwareSpec(
    name="trn2",
    tensor_clock_hz=2.4e9,  # §3
    vector_clock_hz=0.96e9,  # §3
    scalar_clock_hz=1.2e9,  # §3
    gpsimd_clock_hz=1.2e9,  # §3
    partitions=128,
    pe_array=128,
    tensor_bf16_flops=79e12,  # §3
    # Neuron architecture docs (Trainium2 page): 8 cores deliver 181 FP32 TFLOPS against 667
    # BF16, i.e. 22.6 vs 79 TFLOP/s per core (§3's 79).
    fp32_matmul_factor=79 / (181 / 8),
    tensor_efficiency=0.86,  # *inferred*: same as Trainium1 (no Trainium2 measurement in §7)
    vector_bf16_speedup=2.0,  # §3: 2–4x "performance mode" for bf16 SBUF ops; low end
    gpsimd_elementwise_factor=2.0,  # *inferred*, as Trainium1
    min_initiation_cycles=64,  # *inferred*: same instruction pipeline as Trainium1
    static_overhead_cycles=100,
    access_init_cycles=60,
    semaphore_latency_s=30e-9,
    sbuf_bytes_per_partition=212_984,  # §3
    psum_bytes_per_partition=16 * 1024,  # §3: same PSUM
    psum_banks=8,
    psum_bank_bytes=2048,
    dma_engines=16,  # §3
    partitions_per_dma_engine=8,
    dma_engine_bytes_per_s=23e9,  # §3: ≈23 B/ns per engine
    hbm_bytes_per_s=2.9e12 / 8,  # §3: 2.9 TB/s per chip shared by 8 cores
    dma_fixed_latency_s=1.2e-6,  # *inferred*: as Trainium1
    dma_chunk_efficiency=_CHUNK_EFFICIENCY,
    dma_transpose_efficiency=0.1,
    stride_penalty_bytes=16,
    # *inferred* from §3 with the §6 convention: 2 engines x 128 lanes x 0.96 GHz; fp32 matmul
    # = the docs' 181 TFLOPS per chip / 8 cores; HBM = this core's 2.9 TB/s / 8 share.
    roofline_vector_flops=2 * 128 * 0.96e9,
    roofline_matmul_flops=181e12 / 8,
    roofline_hbm_bytes_per_s=2.9e12 / 8,
    peak_flops_bandwidth_ratio=79e12 / (2.9e12 / 8),
    port_conflicts=False,  # §3: lifted on Trainium2
    profiler_clock_hz=1.2e9,  # §3
)

_HARDWARE = {spec.name: spec for spec in (TRN1, TRN2)}


def get_hardware(name: str) -> HardwareSpec:
    try:
        return _HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown hardware {name!r}; choose one of {sorted(_HARDWARE)}") from None
