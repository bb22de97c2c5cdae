"""The schedule as a Chrome/Perfetto trace (the JSON "Trace Event Format"): one track per engine
and per DMA engine (per physical NeuronCore for an SPMD grid on several cores), one slice per
instruction named by opcode and source line. Open the file in https://ui.perfetto.dev or
chrome://tracing."""

from __future__ import annotations

from typing import Any

from accelopt.nki.trace import Trace
from accelopt.profiling.timeline import Timeline

_COMPUTE_TRACKS = {"tensor": 1, "vector": 2, "scalar": 3, "gpsimd": 4}
_DMA_TRACK_BASE = 100
_CORE_TRACKS = 1000  # track ids of physical core c start at c * _CORE_TRACKS
_PID = 1


def _us(seconds: float) -> float:
    return seconds * 1e6


def to_chrome_trace(trace: Trace, timeline: Timeline) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": _PID,
            "args": {"name": f"{trace.kernel_name} (simulated {timeline.hardware})"},
        }
    ]
    for core in range(timeline.cores):
        prefix = f"core {core} " if timeline.cores > 1 else ""
        base = core * _CORE_TRACKS
        tracks = [(base + tid, f"{prefix}{engine} engine") for engine, tid in _COMPUTE_TRACKS.items()]
        tracks += [
            (base + _DMA_TRACK_BASE + queue, f"{prefix}DMA engine {queue}")
            for queue in range(len(timeline.dma_queue_busy))
        ]
        for tid, label in tracks:
            events.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": label}})
            events.append(
                {"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tid, "args": {"sort_index": tid}}
            )
    for op in timeline.ops:
        name = f"{op.kind} L{op.line}" if op.line else op.kind
        args = {"line": op.line, "record": op.record}
        base = op.core * _CORE_TRACKS
        if op.pieces:
            for queue, start, end in op.pieces:
                events.append(
                    {
                        "name": name,
                        "cat": "dma",
                        "ph": "X",
                        "pid": _PID,
                        "tid": base + _DMA_TRACK_BASE + queue,
                        "ts": _us(start),
                        "dur": _us(end - start),
                        "args": args,
                    }
                )
        else:
            events.append(
                {
                    "name": name,
                    "cat": op.engine,
                    "ph": "X",
                    "pid": _PID,
                    "tid": base + _COMPUTE_TRACKS.get(op.engine, 0),
                    "ts": _us(op.start),
                    "dur": _us(op.end - op.start),
                    "args": args,
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "kernel": trace.kernel_name,
            "source": trace.source_path,
            "hardware": timeline.hardware,
            "total_time_s": timeline.total_time,
            "simulated": True,
        },
    }
