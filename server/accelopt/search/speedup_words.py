"""A speedup in words, the same everywhere a person reads one: "1.84x faster", "1.15x slower",
or "no change" when the two latencies agree to the two decimals shown (never "1.00x slower")."""

from __future__ import annotations


def speedup_words(speedup: float, times: str = "x") -> str:
    """`speedup` is old latency / new latency; `times` the multiplication sign to print."""
    if speedup <= 0:
        return "not timed"
    if round(speedup, 2) == 1.0 and round(1 / speedup, 2) == 1.0:
        return "no change"
    if speedup > 1.0:
        return f"{speedup:.2f}{times} faster"
    return f"{1 / speedup:.2f}{times} slower"
