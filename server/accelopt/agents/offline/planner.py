"""The offline planner: chooses (rewrite, site, parameters) plans for a kernel.

Each legal site of the catalogue gets a score from three sources:
- the profile: sites whose rewrite relieves the resource that bounds the kernel (HBM, Tensor
  Engine, Vector/Scalar engines) and sites on the costliest source lines score higher;
- the memory: rewrites that sped up similar kernels before score higher, ones that slowed them
  down score lower (an experience names its rewrite in the lesson, see summarizer.py);
- a small seeded jitter, so different seeds explore different plans deterministically.
Plans are then taken round-robin over rewrites (best site of each rewrite first) for diversity.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
from collections import defaultdict

from accelopt.agents.base import PlanRequest, PlanResult
from accelopt.agents.offline.catalogue import all_sites, get_rewrite, title_for
from accelopt.agents.offline.rewrites.base import Params, Site
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience, Plan
from accelopt.search.memory import kernel_family

# Which engine fractions of a profile a relieved resource corresponds to.
_ENGINE_FIELDS = {
    "vector": "vector_engine_active_time_percent",
    "scalar": "scalar_engine_active_time_percent",
    "tensor": "tensor_engine_active_time_percent",
    "hbm": "dma_active_time_percent",
}
_REWRITE_TAG = re.compile(r"rewrite=([a-z_]+)")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rewrite_of(experience: Experience) -> str | None:
    """The rewrite an experience's lesson applied (the summarizer tags it `rewrite=<name>`)."""
    match = _REWRITE_TAG.search(experience.lesson.plan) or _REWRITE_TAG.search(experience.lesson.title)
    return match.group(1) if match else None


def _similarity(a: str, b: str) -> float:
    ta, tb = set(_TOKEN.findall(a)), set(_TOKEN.findall(b))
    return len(ta & tb) / max(1, len(ta | tb))


def memory_scores(
    kernel_name: str, kernel_text: str, experiences: list[Experience]
) -> dict[str, tuple[float, list[int]]]:
    """rewrite -> (score, experience ids): the log-speedups of its past uses, weighted by how much
    the experience's kernel resembles this one (same kernel family: full weight; otherwise the
    cube of the token overlap, so lessons from unrelated kernels barely count), and damped when
    the evidence is thin."""
    family = kernel_family(kernel_name)
    weighted: dict[str, list[tuple[float, float]]] = defaultdict(list)
    ids: dict[str, list[int]] = defaultdict(list)
    for exp in experiences:
        name = rewrite_of(exp)
        if name is None or exp.speedup <= 0:
            continue
        weight = 1.0 if exp.kernel_family == family else _similarity(kernel_text, exp.slow_kernel) ** 3
        weighted[name].append((weight, math.log(exp.speedup)))
        if exp.id is not None:
            ids[name].append(exp.id)
    scores: dict[str, tuple[float, list[int]]] = {}
    for name, items in weighted.items():
        total = sum(w for w, _ in items)
        scores[name] = (sum(w * v for w, v in items) / (total + 0.5), ids[name])
    return scores


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
    """The first variant, except that an engine choice goes to the least busy engine."""
    variants = site.variants or [{}]
    if profile is not None and all("engine" in v for v in variants):

        def busy(v: Params) -> float:
            field = {
                "vector": "vector_engine_active_time_percent",
                "scalar": "scalar_engine_active_time_percent",
                "gpsimd": "gpsimd_engine_active_time_percent",
            }.get(str(v["engine"]))
            return getattr(profile, field) if field else 1.0

        return dict(min(variants, key=busy))
    return dict(variants[0])


class OfflinePlanner:
    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    async def plan(self, request: PlanRequest) -> PlanResult:
        # Source analysis is CPU work: keep it off the event loop so evaluations go on meanwhile.
        return await asyncio.to_thread(self.plan_now, request)

    def plan_now(self, request: PlanRequest) -> PlanResult:
        text = request.kernel.text
        sites = all_sites(text, request.kernel.name)
        if not sites:
            return PlanResult(error="no rewrite in the offline catalogue applies to this kernel")
        # The ranking depends on the kernel and this planner's seed, not on the request's seed: the
        # search asks N times for one plan each (`proposal` 0..N-1) and the N answers must differ.
        digest = hashlib.sha256(f"{self.seed}:{text}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        memory = memory_scores(request.kernel.name, text, request.experiences)
        scored: list[tuple[float, Site]] = []
        for site in sites:
            score = 1.0 + get_rewrite(site.rewrite).prior + profile_score(site, request.profile)
            learned = memory.get(site.rewrite)
            if learned is not None:
                score += 12.0 * learned[0]  # a 1.2x lesson of the same family: about +1.5
            score += rng.random() * 0.6
            scored.append((score, site))
        scored.sort(key=lambda item: -item[0])

        # Round-robin over rewrites, each rewrite's sites best first, rewrites ordered by their best.
        by_rewrite: dict[str, list[tuple[float, Site]]] = defaultdict(list)
        for score, site in scored:
            by_rewrite[site.rewrite].append((score, site))
        order = sorted(by_rewrite, key=lambda name: -by_rewrite[name][0][0])
        ranking: list[Site] = []
        depth = 0
        while len(ranking) < len(sites):
            for name in order:
                queue = by_rewrite[name]
                if depth < len(queue):
                    ranking.append(queue[depth][1])
            depth += 1

        plans = []
        for k in range(request.proposal, request.proposal + request.count):
            site = ranking[k % len(ranking)]
            params = choose_params(site, request.profile)
            lap = k // len(ranking)  # past the end of the ranking: the sites' other parameter variants
            if lap and len(site.variants) > 1:
                params = dict(site.variants[lap % len(site.variants)])
            learned = memory.get(site.rewrite)
            plans.append(
                Plan(
                    title=title_for(site, params),
                    description=site.description,
                    rewrite=site.rewrite,
                    site=site.id,
                    params=params,
                    lesson_ids=list(learned[1]) if learned and learned[0] > 0 else [],
                )
            )
        return PlanResult(plans=plans)
