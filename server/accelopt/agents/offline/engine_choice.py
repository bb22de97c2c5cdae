"""Which engine should take an instruction a rewrite moves: the one expected to finish soonest.

A move helps only when the engines involved finish their work sooner afterwards. For a move of
one instruction (its busy time `w` on the source engine, from the profile's line costs) to a
target engine, the expected busy time of each ALU engine after the move is

    source: S - w        target: T + w * r

where S and T are the engines' busy times in the profile and `r` is how much longer the target
takes for the same instruction, asked of the timing model's own lowering
(profiling/lowering.lower_compute) for a representative tile, so it carries the hardware's
clocks, GpSimd's elementwise factor, the Vector Engine's slow reciprocal and performance mode.
On hardware whose Vector Engine and GpSimd share the SBUF ports (Trainium1,
HardwareSpec.port_conflicts) the timeline serialises their SBUF work, so the two count as one
resource with their busy times summed. The time the ALU engines need is the largest of these
(the Tensor Engine and DMA are unchanged by a move); a target is worth proposing only when that
drops below what the profile shows now.
"""

from __future__ import annotations

from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.hardware.specs import HardwareSpec, get_hardware
from accelopt.nki.trace import Engine, TraceRecord
from accelopt.profiling.lowering import lower_compute
from accelopt.profiling.profile import Profile

ALU_ENGINES = ("vector", "scalar", "gpsimd")
_BUSY_FIELDS = {
    "vector": "vector_engine_active_time_percent",
    "scalar": "scalar_engine_active_time_percent",
    "gpsimd": "gpsimd_engine_active_time_percent",
}
# The tile the per-engine cost ratio is taken at: 128 partitions x 512 fp32 elements, the common
# tile of the kernels here. The ratio hardly depends on it once the tile streams (free size well
# above the ~64-cycle instruction floor).
_REPRESENTATIVE_FREE_SIZE = 512
# When the profile has no cost for the instruction's line, the moved work is taken as this share
# of its engine's busy time (a guess, stated as one).
_UNKNOWN_SHARE = 0.25


def instruction_seconds(opcode: str, engine: str, hw: HardwareSpec) -> float:
    """How long the timing model takes for `opcode` on `engine` on a representative SBUF tile."""
    record = TraceRecord(
        index=0,
        engine=Engine.UNASSIGNED,
        opcode=opcode,
        partitions=hw.partitions,
        free_size=_REPRESENTATIVE_FREE_SIZE,
        dtype="float32",
        out_dtype="float32",
        reads=(),
        writes=(),
        src_memory=None,
        dst_memory=None,
        line=0,
        extra={"engines": [engine]},
    )
    ((_, seconds),) = lower_compute(record, {}, hw, balance=False).options
    return seconds


def alu_horizon(busy: dict[str, float], hw: HardwareSpec) -> float:
    """The time the ALU engines need for their work (fractions of the kernel's latency)."""
    if hw.port_conflicts:
        return max(busy["vector"] + busy["gpsimd"], busy["scalar"])
    return max(busy.values())


def expected_horizons(site: Site, profile: Profile) -> tuple[float, dict[str, float]] | None:
    """(ALU time now, ALU time after moving the site's instruction to each target engine), as
    fractions of the profiled latency; None when the site moves nothing this module knows."""
    if site.runs_on is None or not all("engine" in v for v in site.variants):
        return None
    opcode, source = site.runs_on
    try:
        hw = get_hardware(profile.hardware)
    except ValueError:
        return None  # hardware the timing model does not know: no cost to compare
    busy = {e: float(getattr(profile, _BUSY_FIELDS[e])) for e in ALU_ENGINES}
    moved = _moved_share(site, profile, source, busy[source])
    source_seconds = instruction_seconds(opcode, source, hw)
    now = alu_horizon(busy, hw)
    after: dict[str, float] = {}
    for variant in site.variants:
        target = str(variant["engine"])
        if target not in ALU_ENGINES:
            continue
        target_opcode = _opcode_on(opcode, source, target)
        ratio = instruction_seconds(target_opcode, target, hw) / source_seconds
        moved_busy = dict(busy)
        moved_busy[source] = max(0.0, busy[source] - moved)
        moved_busy[target] = busy[target] + moved * ratio
        after[target] = alu_horizon(moved_busy, hw)
    return now, after


def best_engine(site: Site, profile: Profile) -> Params | None:
    """The target expected to finish soonest; None when the model has no say for this site."""
    horizons = expected_horizons(site, profile)
    if horizons is None or not horizons[1]:
        return None
    _, after = horizons
    return {"engine": min(after, key=lambda e: after[e])}


def worthwhile_variants(site: Site, profile: Profile | None) -> list[Params]:
    """The site's engine variants expected to make the ALU engines finish sooner (all of them
    when the model has no say)."""
    horizons = expected_horizons(site, profile) if profile is not None else None
    if horizons is None:
        return list(site.variants)
    now, after = horizons
    return [v for v in site.variants if after.get(str(v["engine"]), now) < now]


def _moved_share(site: Site, profile: Profile, source: str, source_busy: float) -> float:
    """Busy time (fraction of latency) of the site's line on the source engine."""
    if profile.latency_ms > 0:
        for cost in profile.lines:
            if cost.line == site.line and source in cost.engines:
                return min(source_busy, cost.engines[source] / profile.latency_ms)
    return _UNKNOWN_SHARE * source_busy


def _opcode_on(opcode: str, source: str, target: str) -> str:
    # A scale-and-shift activation leaves the Scalar Engine as a tensor_scalar multiply-add
    # (rebalance_engines writes it so).
    if opcode == "activation" and target != source:
        return "tensor_scalar"
    return opcode
