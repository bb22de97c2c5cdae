"""Kernels two and three rewrites away from a beam kernel, for when every kernel one step away
(the catalogue's plans, the tuner's settings) has been judged.

The search is breadth first over the kernels the catalogue writes: level 1 is the beam kernel's
one-step children (judged or not), level 2 their children, and so on up to `MAX_STEPS`. Each
level is visited round-robin over the kernels of the level before (one option of each in turn,
best first), so the first compositions start from different children. A kernel counts as new
when the search has not judged it and no earlier option (or composition) writes it; every
kernel reached is expanded once. Each step is legal for the rewrite that owns it, on the kernel
the earlier steps wrote, and a step that would guess again about a trip count an earlier step
already divided is refused (the tuner's rule, tuner.py).

The work is bounded (`MAX_EXAMINED` rewrites applied per beam kernel and judged set): the result
says whether the space was searched to the end (then no new kernel exists within `MAX_STEPS`
steps) or the bound was reached.
"""

from __future__ import annotations

import hashlib
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from accelopt.agents.offline.catalogue import all_sites, get_rewrite, title_for
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.agents.offline.rewrites.compose import Step, composed_site, composition_key
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.tuner import stacked_guess
from accelopt.profiling.evaluation import KernelSource

MAX_STEPS = 3
# About 10-30 s of rewriting on an NKIBench kernel at worst; the cache keeps later iterations cheap.
MAX_EXAMINED = 160
# Compositions found per call at least: a beam kernel's plans in one iteration, about. Each new
# level-1 child visited costs an analysis of its whole text (seconds on an NKIBench kernel at
# full size), and the round-robin visits one more child per composition found.
BATCH = 4

Options = Callable[[str], list[tuple[Site, Params]]]


@dataclass(frozen=True)
class Route:
    steps: tuple[Step, ...]
    sites: tuple[Site, ...]
    params: tuple[Params, ...]
    text: str


@dataclass(frozen=True)
class Found:
    options: list[tuple[Site, Params]]  # new kernels: (composition site, {}), or a one-step plan
    complete: bool  # the space within MAX_STEPS was searched to its end
    examined: int  # rewrites applied (cached ones included)


class Compositions:
    """Shared by the planner's calls (worker threads): what each step writes is cached."""

    def __init__(self) -> None:
        self._texts: dict[tuple[str, str, str, str], str | None] = {}
        self._found: dict[tuple[str, str], Found] = {}
        self._locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_lock = threading.Lock()

    def find(
        self,
        kernel: KernelSource,
        first_steps: list[tuple[Site, Params]],
        options_at: Options,
        known: set[str],
        wanted: int,
        first_new_depth: int = 2,
    ) -> Found:
        """At least `wanted` new compositions (BATCH when fewer are wanted), fewer when the space
        or the bound ends first. `known`: hashes of kernels judged or already proposed. `first_new_depth` 1: one-step kernels count as new too."""
        key = (
            _digest(f"{kernel.name}\n{kernel.text}\n{first_new_depth}"),
            _digest("\n".join(sorted(known))),
        )
        with self._locks_lock:
            lock = self._locks[key[0]]
        with lock:
            cached = self._found.get(key)
            if cached is None or (len(cached.options) < wanted and not cached.complete and cached.examined < MAX_EXAMINED):
                cached = self._search(kernel, first_steps, options_at, known, max(wanted, BATCH), first_new_depth)
                self._found[key] = cached
            return cached

    def _search(
        self,
        kernel: KernelSource,
        first_steps: list[tuple[Site, Params]],
        options_at: Options,
        known: set[str],
        wanted: int,
        first_new_depth: int,
    ) -> Found:
        seen = set(known) | {kernel.normalized_hash()}
        found: list[tuple[Site, Params]] = []
        examined = 0
        origin = Route((), (), (), kernel.text)
        level = [origin]
        for depth in range(1, MAX_STEPS + 1):
            following: list[Route] = []
            choices = [
                iter(first_steps) if route is origin else _lazy(options_at, route.text) for route in level
            ]
            for route, (site, params) in _round_robin(level, choices):
                if len(found) >= wanted:
                    return Found(found, False, examined)
                if examined >= MAX_EXAMINED:
                    return Found(found, False, examined)
                examined += 1
                text = self._apply(kernel.name, route.text, site, params)
                if text is None or (route.steps and stacked_guess(route.text, text)):
                    continue
                written = kernel.model_copy(update={"text": text}).normalized_hash()
                step = Step(site.rewrite, site.id, tuple(sorted(params.items())))
                nxt = Route((*route.steps, step), (*route.sites, site), (*route.params, params), text)
                if depth < first_new_depth:
                    seen.add(written)  # one step away: the catalogue's own plans, not compositions
                    following.append(nxt)
                    continue
                if written in seen:
                    continue
                seen.add(written)
                following.append(nxt)
                if len(nxt.steps) == 1:  # a one-step kernel left out of the catalogue's plans so far
                    found.append((site, params))
                    continue
                titles = [title_for(s, p) for s, p in zip(nxt.sites, nxt.params, strict=True)]
                found.append((composed_site(composition_key(nxt.steps), list(nxt.sites), titles), {}))
            level = following
            if not level:
                break
        return Found(found, True, examined)

    def _apply(self, kernel_name: str, text: str, site: Site, params: Params) -> str | None:
        key = (_digest(f"{kernel_name}\n{text}"), site.rewrite, site.id, repr(sorted(params.items())))
        if key not in self._texts:
            try:
                self._texts[key] = get_rewrite(site.rewrite).apply(text, kernel_name, site.id, params)
            except NotApplicable:
                self._texts[key] = None
        return self._texts[key]


def catalogue_options(kernel_name: str, order: Callable[[list[Site]], list[tuple[Site, Params]]]) -> Options:
    """The catalogue's (site, parameters) options on a kernel text, in the planner's order."""

    def options(text: str) -> list[tuple[Site, Params]]:
        return order(all_sites(text, kernel_name))

    return options


def _lazy(options_at: Options, text: str) -> Iterator[tuple[Site, Params]]:
    yield from options_at(text)


def _round_robin(
    routes: list[Route], choices: list[Iterator[tuple[Site, Params]]]
) -> Iterator[tuple[Route, tuple[Site, Params]]]:
    """One option of each route in turn, until every route's options are used up. A route's
    options are computed only when its turn first comes."""
    live = list(zip(routes, choices, strict=True))
    while live:
        still: list[tuple[Route, Iterator[tuple[Site, Params]]]] = []
        for route, options in live:
            option = next(options, None)
            if option is not None:
                still.append((route, options))
                yield route, option
        live = still


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
