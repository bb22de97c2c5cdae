"""Does the timing run do the work its size asks for? A floor on how the work scales.

A split evaluation (`real_size`) checks a kernel's outputs at a small size and times a
trace-only run at the full one. A kernel can tell those sizes apart by their shapes, so it could
compute honestly where it is checked and skip part of its work (fewer accumulation steps, fewer
rows) past a size threshold that only the timed size crosses. Its outputs at the full size are
never computed, so only the amount of work can give it away.

The task says how much work each size takes (`Work`, source "task": the reference module's
`work()`), and the verified run at the check size says how much of it this kernel does there.
An honest kernel's matmul and vector FLOPs grow with the task's: tiling, loop order and fusion
change *where* the work happens, not how much of it there is. So a timing run that does much
less than the check run's work scaled by the task's own ratio did not do the work the outputs
need, and its profile would be a fake speedup.

`FLOOR` leaves room for honest variation: work that does not grow with the size (a constant
tile set up once, a fixed epilogue) and padding of the small shape up to whole tiles both make an
honest kernel's work grow less than the task's. Padding alone can halve it in one dimension (129
rows computed as 256 at the check size, none padded at the full one): NKIBench adamw's 200 rows
computed as 256 give 0.786 of the task's growth, the lowest of the suite's baselines
(`benchmarks/work_scaling.py` prints them all). So a kernel may still skip up to 70% of one
part's work unseen; only a numeric run at the full size (`--check-size full`) sees the rest.
Tasks without declared work (a user's baseline-only task) have no ratio to hold a trace to, and
sizes closer than `MIN_RATIO` tell too little, so neither is judged here (SECURITY.md).
"""

from __future__ import annotations

from accelopt.hardware.roofline import compute_flops
from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace

# The least share of its scaled check-size work a timing run may do.
FLOOR = 0.3
# The declared work must grow at least this much from the check size to the timed size.
MIN_RATIO = 4.0


def _parts(work: Work) -> dict[str, float]:
    return {"matmul": work.matmul_flops, "vector": work.vector_flops}


def _done(trace: Trace) -> dict[str, float]:
    matmul, _, vector = compute_flops(trace)
    return {"matmul": matmul, "vector": vector}


def work_shortfall(
    checked_work: Work | None, timed_work: Work | None, checked_trace: Trace, timed_trace: Trace
) -> str | None:
    """None when the timing run's work keeps up with the task's; else what fell short, in words."""
    if (
        checked_work is None
        or timed_work is None
        or checked_work.source != "task"
        or timed_work.source != "task"
    ):
        return None
    declared_small, declared_full = _parts(checked_work), _parts(timed_work)
    done_small, done_full = _done(checked_trace), _done(timed_trace)
    for part in ("matmul", "vector"):
        if declared_small[part] <= 0 or done_small[part] <= 0:
            continue
        expected = declared_full[part] / declared_small[part]
        if expected < MIN_RATIO:
            continue
        grown = done_full[part] / done_small[part]
        if grown < FLOOR * expected:
            return (
                f"its {part} FLOPs grow {grown:.3g}x from the size it is checked at to the size it is "
                f"timed at, where the task's grow {expected:.3g}x: the timing run does "
                f"{100 * grown / expected:.0f}% of the work its verified run scales to"
            )
    return None
