"""The offline planner: chooses (rewrite, site, parameters) plans for a kernel.

Each legal site of the catalogue gets a score from three sources:
- the profile: sites whose rewrite relieves the resource that bounds the kernel (HBM, Tensor
  Engine, Vector/Scalar engines) and sites on the costliest source lines score higher;
- the memory (evidence.py): sites like the ones where a rewrite sped up similar kernels before
  score higher, ones where it slowed them down score lower (a lesson names its rewrite and the
  structural pattern of its site, see summarizer.py);
- a small seeded jitter, so different seeds explore different plans deterministically.
Sites the memory clearly backs (BACKED_GAIN) come first, in score order; the rest are then taken
round-robin over rewrites (best site of each rewrite first) for diversity, except that rewrites
the memory defers (no share in the successes on similar kernels, or net
negative evidence) come after all the others, and sites the memory clearly advises against (they
failed, or slowed the very same code down, on this family of kernels) are not proposed while any
other site remains.

When the search says which kernels it has already judged (PlanRequest.judged), the planner
proposes only plans that write a kernel not among them: the ranked sites with their chosen
parameters, then their other variants. When those run out at this beam kernel (the catalogue has
nothing new), the tuner's settings (tuner.py: loop order, tile size, tiles per block and buffer
counts set together) come next; then compositions of up to three catalogue rewrites
(compositions.py); then the engine moves the timing model expects to slow the kernel, which the
ranking left out. Each time the source changes, the result says so in its notice (a PlannerNotice
event). When no source has a new kernel, the result has no plan, says why, and is `exhausted`:
the search stops once every beam kernel is so. Judged plans are never repeated (the search would
not evaluate them). Without `judged` (a caller that does
not say), past the end of the ranking come the other parameter variants of the ranked sites,
then the same plans again, which the search recognises as kernels it has already judged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import random
import threading
from collections import defaultdict
from collections.abc import Callable

from accelopt.agents.offline.catalogue import TUNER, all_sites, get_rewrite, title_for
from accelopt.agents.offline.compositions import MAX_STEPS as MAX_COMPOSED_STEPS
from accelopt.agents.offline.compositions import Compositions, catalogue_options
from accelopt.agents.offline.engine_choice import best_engine, worthwhile_variants
from accelopt.agents.offline.evidence import DAMPING, Evidence, read_lessons, weigh
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.agents.offline.rewrites.errors import NotApplicable
from accelopt.agents.offline.site_pattern import patterns_of
from accelopt.agents.offline.sizes import reads_share, sbuf_share
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Plan
from accelopt.search.roles import PlanRequest, PlanResult

# Which engine fractions of a profile a relieved resource corresponds to.
_ENGINE_FIELDS = {
    "vector": "vector_engine_active_time_percent",
    "scalar": "scalar_engine_active_time_percent",
    "tensor": "tensor_engine_active_time_percent",
    "hbm": "dma_active_time_percent",
}
# A fully relevant 1.2x lesson adds 12 * log(1.2) / 1.5, about +1.5, to its site's score.
MEMORY_WEIGHT = 12.0
# The memory evidence (evidence.Evidence.gain) above which a site goes before the round-robin over
# rewrites: what a single fully relevant 1.1x lesson gives (log(1.1) damped by 1 + DAMPING).
BACKED_GAIN = math.log(1.1) / (1 + DAMPING)


def profile_score(site: Site, profile: Profile | None) -> float:
    if profile is None:
        return 0.0
    score = 0.0
    bound = profile.bound
    if bound in site.relieves or (bound == "vector" and "scalar" in site.relieves):
        score += 1.0
    busy = [getattr(profile, _ENGINE_FIELDS[r]) for r in site.relieves if r in _ENGINE_FIELDS]
    if busy:
        score += max(busy)
    if profile.spill_save_bytes or profile.spill_reload_bytes:
        score += 0.5 if "hbm" in site.relieves else 0.0
    for cost in profile.lines:
        if cost.line == site.line:
            score += 2.0 * cost.fraction
    return score


def choose_params(site: Site, profile: Profile | None) -> Params:
    """The first variant, except that an engine choice goes to the engine expected to finish
    the moved work soonest (engine_choice.py), or, for a site that does not say what it moves,
    to the least busy engine."""
    variants = site.variants or [{}]
    if profile is not None and all("engine" in v for v in variants):
        expected = best_engine(site, profile)
        if expected is not None:
            return expected

        def busy(v: Params) -> float:
            field = {
                "vector": "vector_engine_active_time_percent",
                "scalar": "scalar_engine_active_time_percent",
                "gpsimd": "gpsimd_engine_active_time_percent",
            }.get(str(v["engine"]))
            return getattr(profile, field) if field else 1.0

        least_busy = min(variants, key=busy)
        return dict(least_busy)
    return dict(variants[0])


class OfflinePlanner:
    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        # What a (kernel text, site, parameters) plan writes: the new kernel's normalized hash,
        # None when the rewrite refuses. Shared by the N planner calls for one beam kernel (and by
        # later iterations), which run in worker threads: one computes, the others wait for it.
        self._writes: dict[tuple[str, str, str, str], str | None] = {}
        self._locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_lock = threading.Lock()
        self._compositions = Compositions()

    async def plan(self, request: PlanRequest) -> PlanResult:
        # Source analysis is CPU work: keep it off the event loop so evaluations go on meanwhile.
        return await asyncio.to_thread(self.plan_now, request)

    def plan_now(self, request: PlanRequest) -> PlanResult:
        text = request.kernel.text
        sites = _worthwhile(all_sites(text, request.kernel.name), request.profile)
        if not sites and not request.judged:
            return PlanResult(error="no rewrite in the offline catalogue applies to this kernel")
        # The ranking depends on the kernel and this planner's seed, not on the request's seed: the
        # search asks N times for one plan each (`proposal` 0..N-1) and the N answers must differ.
        digest = hashlib.sha256(f"{self.seed}:{text}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        bound = request.profile.bound if request.profile is not None else None
        lessons = read_lessons(request.kernel.name, text, bound, request.experiences)
        shares = _shares(request, sites) if lessons else {}
        reads = _reads(request, sites) if lessons else {}
        evidence = weigh(
            lessons, sites, patterns_of(text, request.kernel.name) if lessons else {}, text, shares, reads
        )
        scored: list[tuple[float, Site]] = []
        for site in sites:
            score = 1.0 + get_rewrite(site.rewrite).prior + profile_score(site, request.profile)
            score += MEMORY_WEIGHT * evidence.gain(site)
            score += rng.random() * 0.6
            scored.append((score, site))
        scored.sort(key=lambda item: -item[0])
        advised = [item for item in scored if not evidence.advises_against(item[1])]
        ranking = _diverse_ranking(advised or scored, evidence)

        def plan_for(site: Site, params: Params) -> Plan:
            return Plan(
                title=title_for(site, params),
                description=site.description,
                rewrite=site.rewrite,
                site=site.id,
                params=params,
                lesson_ids=list(evidence.lesson_ids.get(site.id, [])) if evidence.gain(site) > 0 else [],
            )

        wanted = range(request.proposal, request.proposal + request.count)
        if request.judged:
            fresh = self._fresh(request.kernel, _with_variants(ranking, request.profile), request.judged)
            if request.proposal + request.count <= len(fresh):
                return PlanResult(plans=[plan_for(*fresh[k]) for k in wanted])
            # The tuner's one-knob settings are the catalogue's own plans: those are left out.
            options = self._fresh(request.kernel, fresh + self._tuner_options(request), request.judged)
            tuned = options[len(fresh) :]
            if request.proposal + request.count <= len(options):
                notice = (
                    f"the offline catalogue has {'only ' if fresh else ''}{_count(len(fresh), 'new plan')} for this kernel: the "
                    f"tuner takes over with {_count(len(tuned), 'new setting')} of loop order, tile "
                    "size, tiles per block and buffer count"
                )
                return PlanResult(plans=[plan_for(*options[k]) for k in wanted], notice=notice)
            return self._beyond_one_step(request, ranking, options, fresh, plan_for)
        return PlanResult(plans=[plan_for(*_lap(ranking, k, request.profile)) for k in wanted])

    def _beyond_one_step(
        self,
        request: PlanRequest,
        ranking: list[Site],
        options: list[tuple[Site, Params]],
        fresh: list[tuple[Site, Params]],
        plan_for: Callable[[Site, Params], Plan],
    ) -> PlanResult:
        """Plans past the catalogue's and the tuner's new kernels: compositions of catalogue
        rewrites (compositions.py); when those have nothing new either, no plan, and the notice
        says why (the search stops once no beam kernel has a new plan)."""
        known = set(request.judged)
        known.update(w for site, params in options if (w := self._written(request.kernel, site, params)))
        wanted = request.proposal + request.count - len(options)
        found = self._compositions.find(
            request.kernel,
            _with_variants(ranking, request.profile),
            catalogue_options(request.kernel.name, lambda sites: _options_in_order(sites, request.profile)),
            known,
            wanted,
        )
        everything = options + found.options
        one_step = (
            f"the offline catalogue has {_count(len(fresh), 'new plan')} for this kernel and the tuner "
            f"{_count(len(options) - len(fresh), 'new setting')}"
        )
        if request.proposal + request.count <= len(everything):
            notice = (
                f"{one_step}: plans now compose up to {MAX_COMPOSED_STEPS} catalogue rewrites, each "
                "legal for its rewrite on the kernel the earlier ones wrote"
            )
            plans = [
                plan_for(*everything[k]) for k in range(request.proposal, request.proposal + request.count)
            ]
            return PlanResult(plans=plans, notice=notice)
        # Last: the engine moves the timing model expects to slow the kernel (left out so far),
        # alone and composed: they are legal kernels still, and the budget is there to measure them.
        known.update(
            w for site, params in found.options if (w := self._written(request.kernel, site, params))
        )
        unfiltered = self._compositions.find(
            request.kernel,
            _unfiltered_options(all_sites(request.kernel.text, request.kernel.name), request.profile),
            catalogue_options(request.kernel.name, lambda sites: _unfiltered_options(sites, request.profile)),
            known,
            request.proposal + request.count - len(everything),
            first_new_depth=1,
        )
        everything += unfiltered.options
        if request.proposal + request.count <= len(everything):
            notice = (
                f"{one_step}, and compositions of catalogue rewrites {_count(len(found.options), 'new kernel')}: "
                "the planner now proposes engine moves the timing model expects to slow the kernel "
                "down, alone and composed (the only new legal kernels left)"
            )
            plans = [
                plan_for(*everything[k]) for k in range(request.proposal, request.proposal + request.count)
            ]
            return PlanResult(plans=plans, notice=notice)
        if found.complete and unfiltered.complete:
            why = (
                f"{one_step}; compositions of up to {MAX_COMPOSED_STEPS} of its rewrites (engine moves "
                f"expected to slow it included) write {_count(len(everything) - len(options), 'new kernel')}: "
                "every other kernel the offline agents can write from this one has been judged"
            )
        else:
            why = (
                f"{one_step}; compositions of catalogue rewrites write "
                f"{_count(len(everything) - len(options), 'new kernel')} among the first "
                f"{found.examined + unfiltered.examined} rewrites the planner tries per kernel (its bound)"
            )
        return PlanResult(notice=why, exhausted=True)

    def _tuner_options(self, request: PlanRequest) -> list[tuple[Site, Params]]:
        """The tuner's settings, those that relieve what bounds the kernel first."""
        sites = TUNER.sites(request.kernel.text, request.kernel.name)
        ordered = sorted(
            enumerate(sites), key=lambda item: (-profile_score(item[1], request.profile), item[0])
        )
        return [(site, {}) for _, site in ordered]

    def _fresh(
        self, kernel: KernelSource, options: list[tuple[Site, Params]], judged: list[str]
    ) -> list[tuple[Site, Params]]:
        """The options that write a kernel neither judged nor written by an earlier option."""
        seen = set(judged)
        fresh = []
        for site, params in options:
            written = self._written(kernel, site, params)
            if written is not None and written not in seen:
                seen.add(written)
                fresh.append((site, params))
        return fresh

    def _written(self, kernel: KernelSource, site: Site, params: Params) -> str | None:
        text_key = hashlib.sha256(f"{kernel.name}\n{kernel.text}".encode()).hexdigest()
        key = (text_key, site.rewrite, site.id, repr(sorted(params.items())))
        with self._locks_lock:
            lock = self._locks[text_key]
        with lock:
            if key not in self._writes:
                try:
                    text = get_rewrite(site.rewrite).apply(kernel.text, kernel.name, site.id, params)
                    self._writes[key] = kernel.model_copy(update={"text": text}).normalized_hash()
                except NotApplicable:
                    self._writes[key] = None
            return self._writes[key]


def _per_site(sites: list[Site], measure: Callable[[Site], float | None]) -> dict[str, float]:
    """site id -> `measure(site)`, for the sites it knows a figure for."""
    found: dict[str, float] = {}
    for site in sites:
        figure = measure(site)
        if figure is not None:
            found[site.id] = figure
    return found


def _shares(request: PlanRequest, sites: list[Site]) -> dict[str, float]:
    """site id -> the share of SBUF its resident block takes at the kernel's timed input shapes."""
    kernel = request.kernel
    return _per_site(
        sites,
        lambda site: sbuf_share(
            kernel.text, kernel.name, site, request.input_shapes, request.hardware, request.input_dtypes
        ),
    )


def _reads(request: PlanRequest, sites: list[Site]) -> dict[str, float]:
    """site id -> the share of the kernel's measured HBM reads the site's move removes."""
    profile = request.profile
    if profile is None or profile.hbm_read_bytes <= 0:
        return {}
    kernel = request.kernel
    return _per_site(
        sites,
        lambda site: reads_share(
            kernel.text,
            kernel.name,
            site,
            request.input_shapes,
            request.hardware,
            profile.hbm_read_bytes,
            request.input_dtypes,
        ),
    )


def _worthwhile(sites: list[Site], profile: Profile | None) -> list[Site]:
    """Engine moves the timing model expects to slow the kernel are not proposed: a site keeps
    only its worthwhile targets, and a site with none is left out. Nor are reorderings that
    remove spills, on a kernel whose profile reports none."""
    kept: list[Site] = []
    spills = profile is not None and bool(profile.spill_save_bytes or profile.spill_reload_bytes)
    for site in sites:
        if "spill" in site.relieves and not spills:
            continue  # a reordering that only removes spills slows a kernel that has none
        variants = worthwhile_variants(site, profile)
        if variants == site.variants:
            kept.append(site)
        elif variants:
            kept.append(dataclasses.replace(site, variants=variants))
    return kept


def _variants_in_order(site: Site, profile: Profile | None) -> list[Params]:
    first = choose_params(site, profile)
    return [first, *(dict(v) for v in site.variants if dict(v) != first)]


def _options_in_order(sites: list[Site], profile: Profile | None) -> list[tuple[Site, Params]]:
    """A kernel's catalogue options, the sites that relieve what bounds the kernel first (stable:
    catalogue order breaks ties), with their variants in rounds."""
    kept = _worthwhile(sites, profile)
    ranked = sorted(enumerate(kept), key=lambda item: (-profile_score(item[1], profile), item[0]))
    return _with_variants([site for _, site in ranked], profile)


def _unfiltered_options(sites: list[Site], profile: Profile | None) -> list[tuple[Site, Params]]:
    """Every variant of every site, engine moves expected to slow the kernel included."""
    ranked = sorted(enumerate(sites), key=lambda item: (-profile_score(item[1], profile), item[0]))
    return [(site, dict(v)) for _, site in ranked for v in (site.variants or [{}])]


def _with_variants(ranking: list[Site], profile: Profile | None) -> list[tuple[Site, Params]]:
    """Every ranked site with its chosen parameters, then the sites' other variants, in rounds."""
    per_site = [_variants_in_order(site, profile) for site in ranking]
    options: list[tuple[Site, Params]] = []
    for lap in range(max((len(v) for v in per_site), default=0)):
        options.extend((site, v[lap]) for site, v in zip(ranking, per_site, strict=True) if lap < len(v))
    return options


def _lap(ranking: list[Site], k: int, profile: Profile | None) -> tuple[Site, Params]:
    """Plan k of the ranking taken round and round: past its end, the sites' other variants."""
    site = ranking[k % len(ranking)]
    params = choose_params(site, profile)
    lap = k // len(ranking)
    if lap and len(site.variants) > 1:
        params = dict(site.variants[lap % len(site.variants)])
    return site, params


def _count(n: int, noun: str) -> str:
    return f"no {noun}" if n == 0 else f"{n} {noun}{'s' if n != 1 else ''}"


def _diverse_ranking(scored: list[tuple[float, Site]], evidence: Evidence) -> list[Site]:
    """Sites the memory clearly backs first (BACKED_GAIN), in score order; then round-robin over
    rewrites (each rewrite's sites best first, rewrites ordered by their best site), so the N plans
    cover different ideas; rewrites the memory defers come after all the others' sites.

    Diversity is the right bet when nothing is known about the sites; when similar kernels say
    that blocking either output loop paid, the second blocking is a better next plan than a
    rewrite nobody has evidence for (matmul's second plan was an interchange that gave 1.00x while
    blocking its other loop, backed by every matmul-like lesson, waited for the next iteration)."""
    backed = [
        site
        for _, site in scored
        if evidence.gain(site) >= BACKED_GAIN and site.rewrite not in evidence.deferred
    ]
    by_rewrite: dict[str, list[Site]] = defaultdict(list)
    for _, site in scored:
        if not any(site is b for b in backed):
            by_rewrite[site.rewrite].append(site)
    order = list(by_rewrite)  # by best score, since `scored` is sorted
    ranking: list[Site] = list(backed)
    for group in (
        [n for n in order if n not in evidence.deferred],
        [n for n in order if n in evidence.deferred],
    ):
        depth = 0
        while any(depth < len(by_rewrite[n]) for n in group):
            ranking.extend(by_rewrite[n][depth] for n in group if depth < len(by_rewrite[n]))
            depth += 1
    return ranking
