"""Timing an SPMD launch grid: the instances spread over the physical NeuronCores of the logical
core, the way the hardware runs them.

The emulator runs every program instance and marks each one's records (``Trace.programs``, with
the physical core the instance runs on, accelopt.nki.spmd). Here:

- each instance is timed alone, exactly as a kernel launched without a grid is
  (`timeline.schedule_instance`: the compiler model and the engine schedule of one NeuronCore);
- the instances of one physical core run one after another: the core's time is the sum of its
  instances' times (instance k starts when instance k-1 has finished);
- physical cores run in parallel, each with its own engines, SBUF, PSUM and DMA queues, and its
  own share of the chip's HBM bandwidth: the grid's time is the slowest core's.

So a grid of one instance times exactly like the kernel without a grid, and a grid of two
instances on ``nl.nc(2)`` takes max(t0, t1) where the same instances on one core take t0 + t1.

Why these rules (Neuron SDK docs, v2.33): the "Using Logical NeuronCores (LNC)" guide says an
LNC=2 kernel runs on two physical cores "that have shared HBM memory", each running its own
instruction streams; the Trainium2 architecture guide gives every physical NeuronCore its own
engines, SBUF and PSUM and the chip's HBM shared by its 8 physical cores (NKI_NOTES §3, which
hardware.specs already divides per core). Instances that share one physical core share its
engines; *inferred*: we do not overlap consecutive instances (the compiler may, a little, at
their seams), which makes a one-core grid an upper bound.
"""

from __future__ import annotations

from accelopt.hardware.specs import HardwareSpec, get_hardware
from accelopt.nki.trace import Trace
from accelopt.profiling.compiler_model import ModelOptions
from accelopt.profiling.timeline import ScheduledOp, Timeline, schedule_instance, with_kernel_start

_SUMMED = (
    "spill_save_bytes",
    "spill_reload_bytes",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "sbuf_read_bytes",
    "sbuf_write_bytes",
    "psum_read_bytes",
    "psum_write_bytes",
    "dma_transfers",
    "instructions",
)


def schedule(trace: Trace, hw: HardwareSpec | str, options: ModelOptions | None = None) -> Timeline:
    """Time `trace` on `hw`: one NeuronCore, or for an SPMD grid of several instances, every
    instance on its physical core."""
    spec = get_hardware(hw) if isinstance(hw, str) else hw
    opts = options or ModelOptions()
    if len(trace.programs) > 1:  # one launch: the device's kernel start is paid once
        return with_kernel_start(schedule_grid(trace, spec, opts), spec)
    return with_kernel_start(schedule_instance(trace, spec, opts), spec)


def instance_trace(trace: Trace, first: int, end: int) -> Trace:
    """The records of one program instance as a trace of their own (tensors and loops shared)."""
    return Trace(
        kernel_name=trace.kernel_name,
        source_path=trace.source_path,
        records=trace.records[first:end],
        tensors=trace.tensors,
        loops=trace.loops,
        numerics=trace.numerics,
        grid=trace.grid,
        target=trace.target,
    )


def schedule_grid(trace: Trace, hw: HardwareSpec, options: ModelOptions) -> Timeline:
    """Time every program instance of `trace.programs` and lay them out over their cores."""
    core_clock: dict[int, float] = {}
    ops: list[ScheduledOp] = []
    hoisted: set[int] = set()
    busy: dict[str, float] = {}
    queues: list[float] = []
    totals = dict.fromkeys(_SUMMED, 0)
    peak: dict[str, int] = {}
    for span in trace.programs:
        part = schedule_instance(instance_trace(trace, span.first, span.end), hw, options)
        offset = core_clock.get(span.core, 0.0)
        core_clock[span.core] = offset + part.total_time
        for op in part.ops:
            op.start += offset
            op.end += offset
            if op.record >= 0:
                op.record += span.first
            op.core = span.core
            if op.pieces:
                op.pieces = tuple((q, s + offset, e + offset) for q, s, e in op.pieces)
            ops.append(op)
        hoisted.update(r + span.first for r in part.hoisted_records)
        for engine, seconds in part.engine_busy.items():
            busy[engine] = busy.get(engine, 0.0) + seconds
        if len(queues) < len(part.dma_queue_busy):
            queues.extend([0.0] * (len(part.dma_queue_busy) - len(queues)))
        for q, seconds in enumerate(part.dma_queue_busy):
            queues[q] += seconds
        for name in _SUMMED:
            totals[name] += getattr(part, name)
        for memory, live in part.peak_live_bytes.items():
            peak[memory] = max(peak.get(memory, 0), live)
    ops.sort(key=lambda op: (op.start, op.core))
    return Timeline(
        hardware=hw.name,
        options=options,
        ops=ops,
        total_time=max(core_clock.values(), default=0.0),
        engine_busy=busy,
        dma_queue_busy=queues,
        hoisted_records=hoisted,
        peak_live_bytes=peak,
        cores=max(1, len(core_clock)),
        **totals,
    )
