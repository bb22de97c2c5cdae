"""Plausibility: facts no honest profile can violate, checked on every profile before it counts.

- No kernel runs faster than the hardware can do its task's work (`roofline.physical_floor`):
  the convention's Tensor Engine and HBM terms of the roofline (NKI_NOTES §6), and a vector
  term that credits every ALU engine at its own clock with fused instructions. A latency below
  it means the trace or the timing model was fooled. (The convention's vector peak is no such
  bound: a fused softmax runs above it, so ``percent_of_peak`` may exceed 100% honestly.)
- The outputs have to reach HBM: at least their bytes are written there.
- What the task's work needs from HBM has to be read: at least the work's HBM bytes minus the
  outputs' bytes (the task's own formula counts inputs once plus outputs once).

A violation makes the evaluation `rejected`, with the figures in the message.
"""

from __future__ import annotations

from accelopt.hardware.roofline import dtype_bytes, physical_floor
from accelopt.hardware.specs import get_hardware
from accelopt.nki.trace import Memory, Trace
from accelopt.profiling.profile import Profile

# Float rounding in the two latency sums only; any real excess is far above this.
_SLACK = 1e-6


def output_bytes(trace: Trace) -> int:
    """Bytes of the kernel's HBM outputs, as the trace declares them."""
    total = 0
    for info in trace.tensors.values():
        if info.is_output and info.memory is Memory.HBM:
            n = 1
            for s in info.shape:
                n *= s
            total += n * dtype_bytes(info.dtype)
    return total


def _floor_ms(profile: Profile) -> float:
    """The physical floor of the profile's work on its hardware, in ms; the roofline's peak
    latency where the hardware is not one the model knows."""
    try:
        hw = get_hardware(profile.hardware)
    except ValueError:
        return profile.peak_latency_ms
    return physical_floor(profile.work, hw) * 1e3


def implausibility(profile: Profile, trace: Trace) -> str | None:
    """None if the profile is possible for the work it claims; else why not, in words."""
    floor_ms = _floor_ms(profile)
    if floor_ms > 0 and profile.latency_ms < floor_ms * (1 - _SLACK):
        return (
            f"the simulated latency {profile.latency_ms * 1e3:.3f} us is below the hardware's floor "
            f"{floor_ms * 1e3:.3f} us for the task's work ({profile.percent_of_peak:.0%} of the "
            "roofline peak); no kernel can run faster than the engines and HBM allow"
        )
    written = output_bytes(trace)
    if profile.hbm_write_bytes < written:
        return (
            f"the kernel writes {profile.hbm_write_bytes} bytes to HBM but its outputs hold {written} bytes"
        )
    needed = max(0.0, profile.work.hbm_bytes - written)
    if profile.hbm_read_bytes < needed * (1 - _SLACK):
        return (
            f"the kernel reads {profile.hbm_read_bytes} bytes from HBM but its work needs at "
            f"least {needed:.0f}"
        )
    return None
