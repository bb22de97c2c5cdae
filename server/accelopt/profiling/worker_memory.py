"""How much memory a sandboxed worker may use, sized from the task and from the machine.

A fixed address-space limit either refuses full-size tasks (an fp32 matmul 4096x5120 @
5120x12288 has 512 MiB of inputs and outputs per seed; a batched softmax 16x4096x4096 has a
1 GiB output) or lets a small task's runaway kernel take the machine. So the limit follows the
task: its *footprint* (bytes of one seed's kernel inputs plus reference outputs, measured on the
first reference run) decides how many seeds share a reference worker and how large a kernel
worker's limit is, capped by what the machine has free (`MemAvailable`). Workers hold one seed's
arrays at a time (they stream results to disk). When even one seed cannot fit, the
evaluation says so with the numbers and the ways out instead of dying in a `MemoryError`.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20
# Seeds share a reference worker while their data stays under this; above it each seed gets
# its own. A task whose one seed passes it is "big": its kernel worker gets its share of the
# free memory.
BATCH_BYTES = 256 * MiB
# What the worker needs before any task data: the interpreter, numpy, the emulator, BLAS
# buffers, measured as address space (RLIMIT_AS counts reservations, not only resident pages).
WORKER_BASE_BYTES = 4 * GiB
# The emulator holds a seed's inputs (read-only views), its outputs, the tiles in flight, the
# instruction trace and the archive writer's buffers. A full-size fp32 matmul (512 MiB per
# seed) ran out of a 4 GiB address space (benchmarks/full_size.py), so: four footprints on top
# of the base. It is a limit, not a reservation: only what the worker touches is used.
KERNEL_FOOTPRINT_FACTOR = 4
# Kept free for the trusted process (it holds one seed's arrays while it compares them).
PARENT_RESERVE_BYTES = 2 * GiB


def available_bytes() -> int | None:
    """`MemAvailable` from /proc/meminfo (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def seeds_per_worker(footprint: int | None, seeds: int, batch_bytes: int = BATCH_BYTES) -> int:
    """How many seeds one worker runs: all of them for small tasks, one at a time for big ones."""
    if footprint is None or footprint <= 0:
        return seeds
    return max(1, min(seeds, batch_bytes // footprint))


@dataclass(frozen=True)
class MemoryPlan:
    """The address-space limit of one worker run and the figures behind it (for messages)."""

    limit_bytes: int
    needed_bytes: int
    available_bytes: int | None
    footprint_bytes: int | None

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.limit_bytes


def _cap(available: int | None) -> int | None:
    return None if available is None else max(available - PARENT_RESERVE_BYTES, 256 * MiB)


def reference_plan(configured: int, available: int | None = None) -> MemoryPlan:
    """A reference module's worker: its needs are unknown before it runs (a float64 forward
    may take several times its outputs), so it may use what the machine has free, and never
    less than the configured limit."""
    available = available_bytes() if available is None else available
    cap = _cap(available)
    limit = configured if cap is None else max(configured, cap)
    return MemoryPlan(limit, 0, available, None)


def kernel_plan(
    configured: int,
    footprint: int | None,
    seeds: int,
    available: int | None = None,
    *,
    workers: int = 1,
    big_bytes: int = BATCH_BYTES,
) -> MemoryPlan:
    """A kernel's worker running `seeds` seeds of a task whose one seed takes `footprint` bytes,
    one of `workers` that may run at once.

    A big task's worker may use its share of the free memory, whatever the estimate says: the
    limit counts address space, and kernels declare SBUF buffers as large as the whole problem
    (the compiler folds them; the emulator maps them and touches only what is used: the
    full-size matmul baseline maps 10 GiB and touches 2.4 GiB)."""
    available = available_bytes() if available is None else available
    data = (footprint or 0) * seeds
    needed = WORKER_BASE_BYTES + KERNEL_FOOTPRINT_FACTOR * data
    cap = _cap(available)
    wanted = max(configured, needed)
    if cap is not None and data >= big_bytes:
        wanted = max(wanted, cap // max(workers, 1))
    # Never below the configured limit (what the sandbox always allowed), never above what is free.
    limit = wanted if cap is None else max(configured, min(wanted, cap))
    return MemoryPlan(limit, needed, available, footprint)


def widened(plan: MemoryPlan, *, workers: int = 1) -> MemoryPlan | None:
    """The second try for a kernel that ran out of its estimated limit: its share of the free
    memory (None when that is no more than it had). A kernel's intermediates can dwarf its
    inputs and outputs (attention's score tiles, SBUF buffers declared as large as the whole
    problem), which no footprint shows in advance; a first try within the estimate keeps a
    runaway candidate from taking the machine's memory on every evaluation."""
    cap = _cap(plan.available_bytes)
    if cap is None:
        return None
    share = cap // max(workers, 1)
    if share <= plan.limit_bytes:
        return None
    return MemoryPlan(share, plan.needed_bytes, plan.available_bytes, plan.footprint_bytes)


def size_text(value: int | float | None) -> str:
    if value is None:
        return "unknown"
    if value >= GiB:
        return f"{value / GiB:.1f} GiB"
    return f"{value / MiB:.0f} MiB"


def out_of_memory_advice(
    plan: MemoryPlan, *, seeds: int, size_adjustable: bool, who: str = "the sandboxed worker"
) -> str:
    """What to say when a run cannot fit: the numbers, then the ways out."""
    facts = [f"{who} is limited to {size_text(plan.limit_bytes)} of address space"]
    if plan.footprint_bytes:
        facts.append(f"one seed's inputs and outputs take {size_text(plan.footprint_bytes)}")
    if plan.needed_bytes:
        facts.append(f"a run needs about {size_text(plan.needed_bytes)}")
    facts.append(f"the machine has {size_text(plan.available_bytes)} available")
    ways = []
    if size_adjustable:
        ways.append("`--size small` (the task's small shapes)")
    if seeds > 1:
        ways.append("fewer seeds (`--seeds 1`: less time and less cached reference data)")
    ways.append("`--no-check` (trace-only: no numerics, no reference outputs)")
    ways.append("a machine with more free memory")
    return "; ".join(facts) + ". Ways out: " + ", ".join(ways) + "."
