"""The three choices the loop makes between iterations: which before→after pairs become
experiences, which kernels form the next beam, and how candidates are ranked."""

from __future__ import annotations

import bisect
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


class Ranking:
    """The one ranking of a search's candidates, kept up to date as they are evaluated: every
    correct candidate, one per distinct kernel (normalized source), fastest first.

    Ties are broken so that the order never depends on which evaluation returned first (with
    several in flight, locally or on a cluster, that order is not reproducible): a candidate's
    `tier` first (next_beam: parents before children), then the normalized hash of the kernel's
    source, so two equally fast kernels always rank the same way. Between candidates of the same
    kernel, the one evaluated rather than found in the cache wins (`prefer_evaluated`), then the
    earliest made. Its head travels in every CandidateEvent and is the Finished event's list, so
    the CLI, the language server and the editor all show this order."""

    def __init__(self, *, prefer_evaluated: bool = True) -> None:
        # sorted: (latency, tier, kernel key, duplicate, made, id)
        self._order: list[tuple[float, int, str, bool, int, str]] = []
        self._entry_of_kernel: dict[str, tuple[float, int, str, bool, int, str]] = {}
        self._candidates: dict[str, Candidate] = {}
        self._prefer_evaluated = prefer_evaluated

    def add(self, candidate: Candidate, *, kernel_key: str, made: int, tier: int = 0) -> None:
        """Take an evaluated candidate into account (`made`: its place in creation order;
        `kernel_key`: the normalized hash of its source)."""
        if not is_ranked(candidate):
            return
        assert candidate.latency_ms is not None
        duplicate = self._prefer_evaluated and candidate.duplicate_of is not None
        entry = (candidate.latency_ms, tier, kernel_key, duplicate, made, candidate.id)
        current = self._entry_of_kernel.get(kernel_key)
        if current is not None:
            if current <= entry:
                return
            self._order.pop(bisect.bisect_left(self._order, current))
            del self._candidates[current[5]]
        bisect.insort(self._order, entry)
        self._entry_of_kernel[kernel_key] = entry
        self._candidates[candidate.id] = candidate

    def head(self, limit: int) -> list[Candidate]:
        return [self._candidates[entry[5]] for entry in self._order[:limit]]

    def ranked(self, limit: int) -> list[RankedCandidate]:
        return [RankedCandidate(rank=i + 1, candidate=c) for i, c in enumerate(self.head(limit))]


def _ranking_of(candidates: list[Candidate], tiers: list[int] | None = None, *, prefer_evaluated: bool = True) -> Ranking:
    ranking = Ranking(prefer_evaluated=prefer_evaluated)
    for made, candidate in enumerate(candidates):
        tier = tiers[made] if tiers is not None else 0
        ranking.add(candidate, kernel_key=candidate.kernel.normalized_hash(), made=made, tier=tier)
    return ranking


def next_beam(parents: list[Candidate], children: list[Candidate], width: int) -> list[Candidate]:
    """Elitist: the `width` best-ranked kernels among parents and children; on a tie in latency
    parents come first (they keep their place), then the kernel's normalized hash decides. Of
    two candidates with the same kernel the first in the lists is kept, whichever of them was
    evaluated first (which one hit the cache depends on that order)."""
    tiers = [0] * len(parents) + [1] * len(children)
    return _ranking_of([*parents, *children], tiers, prefer_evaluated=False).head(width)


def rank(candidates: list[Candidate], limit: int) -> list[RankedCandidate]:
    """The ranking of a finished list of candidates (in creation order)."""
    return _ranking_of(candidates).ranked(limit)
