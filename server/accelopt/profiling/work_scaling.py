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
(`benchmarks/work_scaling.py` prints them all). By this rule alone a kernel could skip up to
70% of one part's work unseen.

That ratio alone is loose because padding inflates the *check* size's work. A second rule
reads the same figures as shares of the declared work at each size. An honest kernel does some
fixed share `c` of the declared work per unit (1 for a matmul; silu declares 3 vector flops per
element, the kernel does 2: 2/3), times its padding `p`: its share is `c * p_small` at the check
size and `c` at the full one (whole tiles). Padding and set-up work that does not grow only
push the check size's share up. So the timing run's share must be at least `KEPT_FLOOR` of the
check run's share capped at 1: a kernel whose check share is 1 or more must do `KEPT_FLOOR` of
the declared work when timed, one whose share is below 1 must keep `KEPT_FLOOR` of it. Skipping
a quarter of one part's work is then caught, not only seven tenths. An honest kernel fails it only
when `c < KEPT_FLOOR` *and* its check size is padded by more than `1 / KEPT_FLOOR` (4/3) in
that part; the shipped baselines keep 0.997 or more (`benchmarks/work_scaling.py`, "kept").
An attacker may still skip up to `1 - KEPT_FLOOR` of a part unseen.

Tasks without declared work (a user's baseline-only task) have no ratio to hold a trace to, and
sizes closer than `MIN_RATIO` tell too little, so neither is judged here (SECURITY.md).
"""

from __future__ import annotations

from accelopt.hardware.roofline import compute_flops
from accelopt.hardware.work import Work
from accelopt.nki.trace import Trace

# The least share of its scaled check-size work a timing run may do.
FLOOR = 0.3
# The least share of the declared work a timing run may do, against the check run's share
# (capped at 1). 1 / KEPT_FLOOR (4/3) is above the suite's largest padding of a small size
# (adamw's 200 rows as 256: 1.28), so no kernel for a shipped task can fail it by padding alone
# whatever its share; measured margins: `benchmarks/work_scaling.py`, column "kept".
KEPT_FLOOR = 0.75
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
        share_small = done_small[part] / declared_small[part]
        share_full = done_full[part] / declared_full[part]
        kept = share_full / min(share_small, 1.0)
        if kept < KEPT_FLOOR:
            return (
                f"it does {100 * share_full:.0f}% of the task's declared {part} FLOPs, where its verified "
                f"run does {100 * share_small:.0f}% at the size it is checked at: it keeps {100 * kept:.0f}% of that share (at least {100 * KEPT_FLOOR:.0f}% is "
                "needed, padding aside)"
            )
    return None
