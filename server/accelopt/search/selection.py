"""The three choices the loop makes between iterations: which before→after pairs become
experiences, which kernels form the next beam, and how the final list is ranked."""

from __future__ import annotations

from dataclasses import dataclass

from accelopt.search.candidate import Candidate, RankedCandidate


@dataclass(frozen=True)
class Pair:
    """A plan applied to `before` produced `after`; speedup = before latency / after latency."""

    before: Candidate
    after: Candidate

    @property
    def speedup(self) -> float:
        assert self.before.latency_ms and self.after.latency_ms
        return self.before.latency_ms / self.after.latency_ms


def is_ranked(candidate: Candidate) -> bool:
    return candidate.status == "ok" and candidate.latency_ms is not None and candidate.latency_ms > 0


def select_experiences(
    pairs: list[Pair], *, limit: int, positive_threshold: float, negative_threshold: float
) -> list[Pair]:
    """The published rule: at most `limit` pairs, at most half of them positive (speedup above
    `positive_threshold`), the rest negative (speedup below `negative_threshold`); the clearest
    cases first. One pair per distinct `after` kernel."""
    seen: set[str] = set()
    unique: list[Pair] = []
    for pair in pairs:
        key = pair.after.kernel.normalized_hash()
        if key not in seen and is_ranked(pair.before) and is_ranked(pair.after):
            seen.add(key)
            unique.append(pair)
    positives = sorted((p for p in unique if p.speedup > positive_threshold), key=lambda p: -p.speedup)
    negatives = sorted((p for p in unique if p.speedup < negative_threshold), key=lambda p: p.speedup)
    chosen = positives[: limit // 2]
    return chosen + negatives[: limit - len(chosen)]


def next_beam(parents: list[Candidate], children: list[Candidate], width: int) -> list[Candidate]:
    """Elitist: the `width` fastest correct kernels among parents and children, one per
    normalized source (the earliest candidate wins a tie, so parents keep their place)."""
    pool = [c for c in [*parents, *children] if is_ranked(c)]
    return _fastest_unique(pool)[:width]


def rank(candidates: list[Candidate], limit: int) -> list[RankedCandidate]:
    ranked = _fastest_unique([c for c in candidates if is_ranked(c)])[:limit]
    return [RankedCandidate(rank=i + 1, candidate=c) for i, c in enumerate(ranked)]


def _fastest_unique(pool: list[Candidate]) -> list[Candidate]:
    # Ties (the same kernel twice) go to the candidate that was evaluated, then to the earliest.
    order = sorted(
        enumerate(pool), key=lambda item: (item[1].latency_ms, item[1].duplicate_of is not None, item[0])
    )
    seen: set[str] = set()
    result: list[Candidate] = []
    for _, candidate in order:
        key = candidate.kernel.normalized_hash()
        if key not in seen:
            seen.add(key)
            result.append(candidate)
    return result
