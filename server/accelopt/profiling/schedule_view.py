"""The schedule a person looks at: one lane per engine and per DMA queue, one bar per instruction
(start, end, source line, opcode), and where the kernel sits on the roofline. It is what the
editor's timeline view draws; it comes from the timing model's `Timeline` (or, later, from a
hardware profile's per-instruction data) and says which.

A kernel can issue hundreds of thousands of instructions; a view needs far fewer bars to show
where the time goes. Past `max_bars`, neighbouring bars of one lane and one source line that
(nearly) touch are drawn as one, with the gap allowed growing until the count fits.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from accelopt.hardware.specs import get_hardware
from accelopt.profiling.profile import Profile
from accelopt.profiling.timeline import Timeline

COMPUTE_LANES = ("tensor", "vector", "scalar", "gpsimd")
MAX_BARS = 20_000


class _Model(BaseModel):
    # camelCase on the wire (the editor reads these as they are), snake_case in Python
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Lane(_Model):
    name: str
    busy_us: float


class RooflinePoint(_Model):
    """The kernel on the roofline: FLOPs per HBM byte against FLOP/s achieved."""

    intensity: float = Field(description="FLOPs per byte of HBM traffic (the task's work)")
    achieved_flops_per_s: float
    compute_peak_flops_per_s: float = Field(description="the roofline's compute ceiling for this work")
    bandwidth_bytes_per_s: float = Field(description="the roofline's HBM bandwidth")
    ridge_intensity: float = Field(description="where the bandwidth slope meets the compute ceiling")
    percent_of_peak: float = Field(description="a fraction, as in the profile")
    bound: str


class Schedule(_Model):
    kernel_name: str
    label: str = Field(description="how the figures were obtained, e.g. 'simulated on trn1'")
    total_us: float
    lanes: list[Lane]
    kinds: list[str] = Field(description="opcode names; bars refer to them by index")
    # (lane, start_us, end_us, line, kind index) per bar, in lane then time order.
    bars: list[tuple[int, float, float, int, int]]
    coalesced: bool = Field(False, description="neighbouring bars of one line were drawn as one to fit")
    instructions: int
    roofline: RooflinePoint | None = None


def roofline_point(profile: Profile) -> RooflinePoint | None:
    work = profile.work
    flops = work.matmul_flops + work.vector_flops
    if profile.latency_ms <= 0 or work.hbm_bytes <= 0 or flops <= 0:
        return None
    try:
        hw = get_hardware(profile.hardware)
    except (KeyError, ValueError):
        return None
    compute_peak = hw.roofline_matmul_flops if work.matmul_flops >= work.vector_flops else hw.roofline_vector_flops
    bandwidth = hw.roofline_hbm_bytes_per_s
    return RooflinePoint(
        intensity=flops / work.hbm_bytes,
        achieved_flops_per_s=flops / (profile.latency_ms * 1e-3),
        compute_peak_flops_per_s=compute_peak,
        bandwidth_bytes_per_s=bandwidth,
        ridge_intensity=compute_peak / bandwidth,
        percent_of_peak=profile.percent_of_peak,
        bound=profile.bound,
    )


def _coalesce(bars: list[tuple[int, float, float, int, int]], gap_us: float) -> list[tuple[int, float, float, int, int]]:
    merged: list[tuple[int, float, float, int, int]] = []
    for bar in bars:
        if merged:
            lane, start, end, line, kind = merged[-1]
            if bar[0] == lane and bar[3] == line and bar[1] - end <= gap_us:
                merged[-1] = (lane, start, max(end, bar[2]), line, kind)
                continue
        merged.append(bar)
    return merged


def schedule_of(
    timeline: Timeline, profile: Profile | None, kernel_name: str, *, max_bars: int = MAX_BARS
) -> Schedule:
    dma_queues = len(timeline.dma_queue_busy)
    names = [*COMPUTE_LANES, *(f"DMA queue {q}" for q in range(dma_queues))]
    busy = [timeline.engine_busy.get(name, 0.0) for name in COMPUTE_LANES] + list(timeline.dma_queue_busy)
    kinds: dict[str, int] = {}
    bars: list[tuple[int, float, float, int, int]] = []
    for op in timeline.ops:
        kind = kinds.setdefault(op.kind, len(kinds))
        if op.pieces:
            for queue, start, end in op.pieces:
                bars.append((len(COMPUTE_LANES) + queue, start * 1e6, end * 1e6, op.line, kind))
        elif op.engine in COMPUTE_LANES:
            bars.append((COMPUTE_LANES.index(op.engine), op.start * 1e6, op.end * 1e6, op.line, kind))
    bars.sort(key=lambda b: (b[0], b[1]))
    total_us = timeline.total_time * 1e6
    coalesced = False
    gap = total_us / 20_000
    while len(bars) > max_bars and gap < total_us:
        bars, coalesced, gap = _coalesce(bars, gap), True, gap * 2
    label = profile.label if profile is not None else f"simulated on {timeline.hardware}"
    return Schedule(
        kernel_name=kernel_name,
        label=label,
        total_us=total_us,
        lanes=[Lane(name=n, busy_us=b * 1e6) for n, b in zip(names, busy, strict=True)],
        kinds=list(kinds),
        bars=[(lane, round(s, 4), round(e, 4), line, k) for lane, s, e, line, k in bars[:max_bars]],
        coalesced=coalesced,
        instructions=len(timeline.ops),
        roofline=roofline_point(profile) if profile is not None else None,
    )
