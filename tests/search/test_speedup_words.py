"""Speedups in words: no "1.00x slower" for a change too small to show."""

from __future__ import annotations

import pytest

from accelopt.search.speedup_words import speedup_words


@pytest.mark.parametrize(
    ("speedup", "words"),
    [
        (1.3, "1.30x faster"),
        (0.8, "1.25x slower"),
        (0.998, "no change"),
        (1.004, "no change"),
        (1.0, "no change"),
        (0.994, "1.01x slower"),
    ],
)
def test_speedup_words(speedup: float, words: str) -> None:
    assert speedup_words(speedup) == words


def test_the_sign_is_the_callers():
    assert speedup_words(2.0, "×") == "2.00× faster"
