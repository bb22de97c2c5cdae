"""How the timing model charges SBUF spills, on kernels that spill (issue 20).

Prints, for each kernel, the simulated latency, the spill volume (saved / reloaded) and the
engines' busy fractions under the current spill model and under the previous one (spill
transfers held to program order, every save repeated, every evicted tile saved, nothing held
ahead of its loop iteration, multi-buffering dropped for the whole kernel once anything
overflows) and with evictions making room for the arriving buffer only
(`ModelOptions(spill_rotation=0)`, "no-room"), so the effect of each spill switch shows:

- the Fused Mamba tutorial's v2 and v3 over its published seq_len sweep (general/nki/
  tutorials/fused_mamba, the table "mamba_v2 / mamba_v3 Measured Latency"; C = 4096, 16
  states), simulated against the published latency: v2 starts to spill on hardware between
  seq_len 6144 and 7168. v2 twice: with delta*u computed once per channel tile (`mamba_v2`,
  the calibration kernel) and recomputed in every state iteration as the tutorial's own source
  does (`mamba_v2_du_per_state`): both spill where the hardware starts to (the first since the
  next state's first tile takes its space a step ahead, `ModelOptions.overlap_iterations`);
  "no-remat" saves every evicted tile (`rematerialize_loads=False`), "no-overlap" holds no tile
  ahead (`overlap_iterations=False`);
- our batched matmul followed by a softmax whose score blocks exceed SBUF
  (benchmarks/spill_kernels/, legacy and NKI 0.7, at the NKIBench bmm_softmax shape B16 K64
  M4096 N4096, fp32), with no published figure: its whole DMA traffic divided by the DMA's
  peak is the floor that perfect overlap would reach.

    .venv/bin/python benchmarks/spill_study.py              # everything (a few minutes)
    .venv/bin/python benchmarks/spill_study.py --only bmm   # one group: mamba or bmm
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from accelopt.hardware.specs import get_hardware
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.nki.trace import Trace
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.timeline import ModelOptions
from calibration import MAMBA_SWEEP  # a script beside this one: its folder is on sys.path

HERE = Path(__file__).resolve().parent
PREVIOUS = ModelOptions(
    multibuffer_fitting=False,
    prefetch_spills=False,
    save_once=False,
    rematerialize_loads=False,
    overlap_iterations=False,
    rotation_within_overflow=False,
)
MODELS = {
    "current": ModelOptions(),
    "previous": PREVIOUS,
    "no-room": ModelOptions(spill_rotation=0),
    "no-remat": ModelOptions(rematerialize_loads=False),
    "no-overlap": ModelOptions(overlap_iterations=False),
}


def _trace(path: Path, kernel: str, inputs: list[np.ndarray]) -> Trace:
    text = path.read_text()
    return run_kernel(
        load_kernel(text, kernel, str(path)), inputs, numerics=False, source_path=str(path)
    ).trace


def _row(label: str, trace: Trace, hardware: str, published_ms: float | None = None) -> None:
    for name, options in MODELS.items():
        started = time.perf_counter()
        profile, timeline = profile_trace(trace, hardware, options=options)
        busy = " ".join(
            f"{engine[:3]} {seconds / timeline.total_time:.2f}"
            for engine, seconds in timeline.engine_busy.items()
        )
        versus = ""
        if published_ms is not None:
            versus = (
                f"  pub {published_ms:7.2f} ms  err {100 * (profile.latency_ms / published_ms - 1):+6.1f}%"
            )
        print(
            f"{hardware} {label:28s} {name:9s} sim {profile.latency_ms:8.3f} ms{versus}"
            f"  spill {timeline.spill_save_bytes / 2**20:6.0f} / {timeline.spill_reload_bytes / 2**20:6.0f} MiB"
            f"  {busy}  [{time.perf_counter() - started:.1f}s]"
        )


def mamba() -> None:
    path = HERE / "calibration_kernels" / "mamba.py"
    for seq, (v2_ms, v3_ms) in MAMBA_SWEEP.items():
        f = np.float32
        inputs = [np.zeros((4096, seq), f), np.zeros((4096, seq), f), np.zeros((4096, 16), f)]
        inputs += [np.zeros((16, seq), f), np.zeros((16, seq), f)]
        _row(f"mamba v2 L{seq}", _trace(path, "mamba_v2", inputs), "trn1", v2_ms)
        # the tutorial's own v2 source recomputes delta*u per state: one live tile more
        _row(f"mamba v2 du/state L{seq}", _trace(path, "mamba_v2_du_per_state", inputs), "trn1", v2_ms)
        if seq >= 6144:
            _row(f"mamba v3 L{seq}", _trace(path, "mamba_v3", inputs), "trn1", v3_ms)


def bmm() -> None:
    inputs = [np.zeros((16, 64, 4096), np.float32), np.zeros((16, 64, 4096), np.float32)]
    kernels = [
        ("bmm_softmax_spill.py", "bmm_softmax_spill"),
        ("bmm_softmax_spill_nki07.py", "bmm_softmax_spill07"),
    ]
    for file, kernel in kernels:
        trace = _trace(HERE / "spill_kernels" / file, kernel, inputs)
        for hardware in ("trn1", "trn2"):
            _row(kernel, trace, hardware)
            profile = profile_trace(trace, hardware)[0]
            hw = get_hardware(hardware)
            peak = hw.dma_queue_bytes_per_s * hw.dma_engines
            floor_ms = (profile.hbm_read_bytes + profile.hbm_write_bytes) / peak * 1e3
            print(f"{hardware} {kernel:28s} all DMA traffic at the DMA peak: {floor_ms:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["mamba", "bmm"])
    args = parser.parse_args()
    if args.only in (None, "mamba"):
        mamba()
    if args.only in (None, "bmm"):
        bmm()


if __name__ == "__main__":
    main()
