"""FAKE `neuronxcc.nki`: the documented `jit` / `baremetal` interface, backed by AccelOpt's emulator.

`baremetal(kernel, save_neff_name=, save_trace_name=, additional_compile_opt=)` returns a callable
that runs the kernel on numpy inputs and returns its outputs, writes a NEFF file and, when asked,
(when asked) an NTFF; the NEFF carries the simulated metrics the fake `neuron-explorer` reports.
Every call is appended to `FAKE_NEURON_LOG` (JSON lines) so tests can check what the backend asked
for: the compile options, the environment, the file names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from accelopt.nki import runtime as _emulator

FAKE = True


def jit(func: Any = None, **options: Any) -> Any:
    return _emulator.jit(func, **options)


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_NEURON_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def baremetal(
    func: Any = None,
    *,
    save_neff_name: str | None = None,
    save_trace_name: str | None = None,
    additional_compile_opt: str | None = None,
    **options: Any,
) -> Any:
    if func is None:
        return lambda f: baremetal(
            f,
            save_neff_name=save_neff_name,
            save_trace_name=save_trace_name,
            additional_compile_opt=additional_compile_opt,
            **options,
        )
    fn = _emulator.unwrap(func)

    def run(*inputs: Any) -> Any:
        _log(
            {
                "kernel": fn.__name__,
                "save_neff_name": save_neff_name,
                "save_trace_name": save_trace_name,
                "additional_compile_opt": additional_compile_opt,
                "NEURON_CC_FLAGS": os.environ.get("NEURON_CC_FLAGS"),
                "NEURON_RT_NUM_CORES": os.environ.get("NEURON_RT_NUM_CORES"),
                "shapes": [list(getattr(a, "shape", ())) for a in inputs],
            }
        )
        result = _emulator.run_kernel(fn, list(inputs))
        if save_neff_name or save_trace_name:
            from accelopt.profiling.metrics import profile_trace

            profile, _ = profile_trace(result.trace, "trn1")
            # What Neuron Explorer would report of this program (Summary.parquet field names;
            # `*_percent` in percent). The fake NEFF carries it to the fake `neuron-explorer`.
            metrics = {
                "total_time": profile.latency_ms / 1e3,
                "hbm_read_bytes": profile.hbm_read_bytes,
                "hbm_write_bytes": profile.hbm_write_bytes,
                "hardware_flops": profile.hardware_flops,
                "vector_engine_active_time_percent": 100 * profile.vector_engine_active_time_percent,
                "dma_active_time_percent": 100 * profile.dma_active_time_percent,
                "peak_flops_bandwidth_ratio": 223.78,
            }
            # per source line and engine, the simulated busy seconds (the fake Instruction table)
            lines = [
                [fn.__code__.co_filename, cost.line, engine, ms / 1e3]
                for cost in profile.lines
                for engine, ms in cost.engines.items()
            ]
            if save_neff_name:
                payload = {"kernel": fn.__name__, "metrics": metrics, "lines": lines}
                Path(save_neff_name).write_text("FAKE-NEFF " + json.dumps(payload))
            if save_trace_name:  # the legacy in-process trace: one execution, no scripted time
                Path(save_trace_name).write_text(json.dumps({"fake_ntff": True, "metrics": metrics}))
        if result.single and len(result.outputs) == 1:
            return result.outputs[0]
        return tuple(result.outputs)

    return run
