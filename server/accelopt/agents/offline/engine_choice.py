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
resource with their busy times summed. The time the ALU engines need is the largest of these;
the Tensor Engine and the DMA queues are unchanged by a move, so the kernel's expected horizon is
the larger of that and their busy time, and a target is worth proposing only when the horizon
drops below what the profile shows now (a DMA-bound kernel gains nothing from a move and pays
cross-engine semaphores for it).

Work the kernel left to the compiler (assign_engine) may run on several engines; the profile's
line costs say how much on each, and all of it goes to the target. Where the profile does not
say (no line cost for the site), the model has no say and the planner falls back to the least
busy engine. A line that holds several instructions counts as one move (an overestimate).
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
    """(Expected busy horizon now, and after moving the site's instruction to each target
    engine), as fractions of the profiled latency; None when the site moves nothing this module
    knows or the profile does not say where its work runs."""
    if site.runs_on is None or not all("engine" in v for v in site.variants):
        return None
    opcode, source = site.runs_on
    try:
        hw = get_hardware(profile.hardware)
    except ValueError:
        return None  # hardware the timing model does not know: no cost to compare
    busy = {e: float(getattr(profile, _BUSY_FIELDS[e])) for e in ALU_ENGINES}
    moved = _moved_work(site, profile, source, busy)
    if not moved:
        return None  # work the compiler placed, and the profile does not say where: no say
    # The Tensor Engine and the DMA queues keep their work: the kernel cannot get shorter than
    # they are busy, so a move pays only when the ALU engines are what bounds it.
    floor = max(profile.dma_active_time_percent, profile.tensor_engine_active_time_percent)
    now = max(alu_horizon(busy, hw), floor)
    after: dict[str, float] = {}
    for variant in site.variants:
        target = str(variant["engine"])
        if target not in ALU_ENGINES:
            continue
        moved_busy = dict(busy)
        for engine, share in moved.items():
            ratio = instruction_seconds(_opcode_on(opcode, engine, target), target, hw) / instruction_seconds(
                opcode, engine, hw
            )
            moved_busy[engine] = max(0.0, moved_busy[engine] - share)
            moved_busy[target] += share * ratio
        after[target] = max(alu_horizon(moved_busy, hw), floor)
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


def _moved_work(site: Site, profile: Profile, source: str, busy: dict[str, float]) -> dict[str, float]:
    """Busy time (fraction of latency) of the site's line per ALU engine: all of it on the
    source for pinned work; spread over several engines where the compiler placed the work."""
    if profile.latency_ms > 0:
        for cost in profile.lines:
            if cost.line == site.line:
                work = {
                    e: min(busy[e], ms / profile.latency_ms)
                    for e, ms in cost.engines.items()
                    if e in ALU_ENGINES and (e == source or not source) and ms > 0
                }
                if work:
                    return work
    return {source: _UNKNOWN_SHARE * busy[source]} if source else {}


def _opcode_on(opcode: str, source: str, target: str) -> str:
    # A scale-and-shift activation leaves the Scalar Engine as a tensor_scalar multiply-add
    # (rebalance_engines writes it so).
    if opcode == "activation" and source == "scalar" and target != "scalar":
        return "tensor_scalar"
    return opcode
