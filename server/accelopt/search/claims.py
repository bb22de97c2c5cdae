"""Which plan of an iteration gets to evaluate a kernel that two plans wrote.

Two beam kernels (or two plans of one) can write the same new kernel in one iteration: A then B
and B then A, or a variant one plan's executor wrote as its second sample and another plan names.
The later copy would not be evaluated (the cache knows the kernel), so its evaluation slot would
go unspent. The plan that keeps the kernel is the first in the iteration's fixed order (beam
kernel, then proposal), not the first whose agents answered: the plan branches run concurrently
and finish in whatever order their threads, the network or a Ray cluster allow, and the search
must grow the same children whatever that order. So each branch waits for its turn, after every
earlier branch has claimed its kernels, then claims its own; a kernel already claimed is replaced
by the next plan of the same beam kernel (the search asks for it: `next_proposal`).

A branch holds nothing while it waits (no agent call, no evaluation slot), and it only waits for
earlier branches to have *written* their kernels, not for their evaluations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

Key = tuple[str, ...]


class IterationClaims:
    def __init__(self, taken: Iterable[Key], branches: int, first_proposal: int) -> None:
        self._taken: set[Key] = set(taken)
        self._turns = [asyncio.Event() for _ in range(branches)]
        self._first_proposal = first_proposal
        self._proposals: dict[int, int] = {}
        self._exhausted: set[int] = set()

    async def wait_turn(self, slot: int) -> None:
        """Until every branch before `slot` in the iteration's order has claimed its kernels
        (or ended)."""
        for earlier in self._turns[:slot]:
            await earlier.wait()

    def done(self, slot: int) -> None:
        """Branch `slot` has claimed all it will; called however the branch ends (idempotent)."""
        self._turns[slot].set()

    def claim(self, key: Key) -> bool:
        """True when no earlier kernel (judged before this iteration, or claimed by an earlier
        branch) is `key`, which is now this branch's."""
        if key in self._taken:
            return False
        self._taken.add(key)
        return True

    def next_proposal(self, beam_index: int) -> int | None:
        """The next proposal number to ask the planner of beam kernel `beam_index` for (past the
        N every iteration asks for), or None once its planner has nothing new."""
        if beam_index in self._exhausted:
            return None
        proposal = self._proposals.get(beam_index, self._first_proposal)
        self._proposals[beam_index] = proposal + 1
        return proposal

    def exhausted(self, beam_index: int) -> None:
        """The planner of beam kernel `beam_index` has no further plan this iteration."""
        self._exhausted.add(beam_index)
