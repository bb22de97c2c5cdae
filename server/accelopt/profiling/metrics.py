"""Profile from a trace and its schedule: the neuron-profile summary fields (NKI_NOTES §5), the
roofline view (§6) and where the time went, line by line."""

from __future__ import annotations

from accelopt.hardware.roofline import peak_latency, work_from_trace
from accelopt.hardware.specs import HardwareSpec, get_hardware
from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace
from accelopt.profiling.grid import schedule
from accelopt.profiling.lowering import is_tensor_engine
from accelopt.profiling.profile import Bound, LineCost, Profile
from accelopt.profiling.timeline import ModelOptions, Timeline

# A run is bound by a resource when that resource is busy at least this fraction of the time
# (DMA engines -> "hbm", Tensor Engine -> "tensor", the busiest of Vector/Scalar/GpSimd ->
# "vector"); when none is, it is bound by latency: dependencies, fixed DMA costs and
# instruction overheads leave every resource idle much of the time. Our choice, not a
# profiler field; the roofline's own dominant term is reported as `roofline_bound`.
SATURATED = 0.6

# For a profile without a schedule (the `neuron` backend's measured summary): the roofline's
# dominant term is the bound unless the kernel runs below this fraction of its peak, where it is
# bound by latency instead.
LATENCY_BOUND_BELOW = 0.2


def bound_from_busy(tensor: float, vector: float, scalar: float, gpsimd: float, dma: float) -> Bound:
    """The resource that limited a run, from engine busy fractions (simulated or measured)."""
    candidates: dict[Bound, float] = {"hbm": dma, "tensor": tensor, "vector": max(vector, scalar, gpsimd)}
    best = max(candidates, key=lambda k: candidates[k])
    return best if candidates[best] >= SATURATED else "latency"


def run_bound(timeline: Timeline) -> Bound:
    total = timeline.total_time * timeline.cores  # engine time of every physical core used
    if total <= 0:
        return "latency"
    busy = timeline.engine_busy
    return bound_from_busy(
        busy["tensor"] / total,
        busy["vector"] / total,
        busy["scalar"] / total,
        busy["gpsimd"] / total,
        busy["dma"] / total,
    )


def tensor_flops(trace: Trace, hoisted: set[int] | None = None) -> tuple[int, int]:
    """(hardware_flops, transpose_flops) of the Tensor Engine instructions that execute.

    2·K·M·N per instruction, doubled for fp32 operands, transposes and partition broadcasts
    included (§5); the emulator's own count (`flops`) wins when it gave one.
    """
    hoisted = hoisted or set()
    total = transposes = 0
    for position, rec in enumerate(trace.records):
        if position in hoisted or not is_tensor_engine(rec):
            continue
        flops = rec.flops
        if not flops and rec.matmul_kmn is not None:
            k, m, n = rec.matmul_kmn
            flops = 2 * k * m * n * (2 if rec.dtype in ("float32", "fp32") else 1)
        total += flops
        if rec.is_transpose:
            transposes += flops
    return total, transposes


def _fraction(busy: float, total: float) -> float:
    if total <= 0:
        return 0.0
    return min(1.0, max(0.0, busy / total))


def line_costs(trace: Trace, timeline: Timeline, source_text: str | None = None) -> list[LineCost]:
    """Busy engine time per kernel source line, costliest first.

    A compute instruction counts its engine time; a DMA counts the mean occupancy of its pieces
    (the wall time of the transfer on its engines, without the fixed latency).
    """
    per_line: dict[int, dict[str, float]] = {}
    counts: dict[int, int] = {}
    for op in timeline.ops:
        busy = op.busy / len(op.pieces) if op.pieces else op.busy
        engines = per_line.setdefault(op.line, {})
        engines[op.engine] = engines.get(op.engine, 0.0) + busy
        counts[op.line] = counts.get(op.line, 0) + 1
    grand = sum(sum(e.values()) for e in per_line.values())
    source_lines = source_text.splitlines() if source_text else []
    costs = []
    for line, engines in per_line.items():
        seconds = sum(engines.values())
        text = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
        costs.append(
            LineCost(
                line=line,
                time_ms=seconds * 1e3,
                fraction=_fraction(seconds, grand),
                instructions=counts[line],
                engines={k: v * 1e3 for k, v in sorted(engines.items())},
                text=text,
            )
        )
    costs.sort(key=lambda c: (-c.time_ms, c.line))
    return costs


def build_profile(
    trace: Trace,
    timeline: Timeline,
    hw: HardwareSpec,
    work: Work | None = None,
    source_text: str | None = None,
) -> Profile:
    total = timeline.total_time
    hardware_flops, transpose_flops = tensor_flops(trace, timeline.hoisted_records)
    hbm = timeline.hbm_read_bytes + timeline.hbm_write_bytes
    roof_work = work if work is not None else work_from_trace(trace)
    peak_s, roof_bound = peak_latency(roof_work, hw)
    # an SPMD grid on several physical cores has their peaks together (profiling.grid)
    peak_s /= timeline.cores
    percent = peak_s / total if total > 0 else 0.0
    busy = timeline.engine_busy
    # busy fractions are of the engine time of every physical core the run used
    engine_time = total * timeline.cores
    return Profile(
        backend="simulator",
        hardware=hw.name,
        latency_ms=total * 1e3,
        hbm_read_bytes=timeline.hbm_read_bytes,
        hbm_write_bytes=timeline.hbm_write_bytes,
        sbuf_read_bytes=timeline.sbuf_read_bytes,
        sbuf_write_bytes=timeline.sbuf_write_bytes,
        psum_read_bytes=timeline.psum_read_bytes,
        psum_write_bytes=timeline.psum_write_bytes,
        spill_save_bytes=timeline.spill_save_bytes,
        spill_reload_bytes=timeline.spill_reload_bytes,
        hardware_flops=hardware_flops,
        transpose_flops=transpose_flops,
        mm_arithmetic_intensity=(hardware_flops - transpose_flops) / hbm if hbm else 0.0,
        peak_flops_bandwidth_ratio=hw.peak_flops_bandwidth_ratio,
        hfu_estimated_percent=(
            hardware_flops / (hw.tensor_bf16_flops * engine_time) if engine_time > 0 else 0.0
        ),
        tensor_engine_active_time_percent=_fraction(busy["tensor"], engine_time),
        vector_engine_active_time_percent=_fraction(busy["vector"], engine_time),
        scalar_engine_active_time_percent=_fraction(busy["scalar"], engine_time),
        gpsimd_engine_active_time_percent=_fraction(busy["gpsimd"], engine_time),
        dma_active_time_percent=_fraction(busy["dma"], engine_time),
        instruction_count=timeline.instructions,
        physical_cores=timeline.cores,
        dma_transfer_count=timeline.dma_transfers,
        work=roof_work,
        peak_latency_ms=peak_s * 1e3,
        percent_of_peak=percent,
        bound=run_bound(timeline),
        roofline_bound=roof_bound if peak_s > 0 else None,
        lines=line_costs(trace, timeline, source_text),
    )


def profile_trace(
    trace: Trace,
    hardware: str = "trn1",
    work: Work | None = None,
    options: ModelOptions | None = None,
    source_text: str | None = None,
) -> tuple[Profile, Timeline]:
    """Schedule `trace` on `hardware` and summarise it. A task's `work` overrides the roofline
    work derived from the trace."""
    hw = get_hardware(hardware)
    timeline = schedule(trace, hw, options)
    return build_profile(trace, timeline, hw, work, source_text), timeline
