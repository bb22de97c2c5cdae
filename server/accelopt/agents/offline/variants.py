"""What the memory says about a plan's parameter variants, for the offline executor.

A site of a rewrite often has several variants (block by 2 or by 4, widen by 2, 4 or 8, run on
this engine or that one); the executor writes K of them. Which ones is a question the memory can
answer: lessons name the variant they measured (`variant=factor:4`, see summarizer.py) and say
whether it paid, gave nothing or failed. On a kernel like the lesson's, at a site like the
lesson's (kinship and pattern match, evidence.py), a variant with a clear record of failing or
of giving nothing is left out when another variant can take its place, and variants that paid
come first.

One generalisation, because of what the factors mean: a larger factor needs a larger multiple of
the trip count and more PSUM/SBUF, so a failure at factor F also speaks against every larger
factor (a block of 4 that broke the shapes says the block of 8 would too). Nothing else is
inferred: a variant the memory has not seen keeps its place.

With no experiences every verdict is 0 and the variants keep their order: the executor then
behaves exactly as it does with the memory disabled.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelopt.agents.offline.evidence import DAMPING, pattern_match, read_lessons, rewrite_of
from accelopt.agents.offline.lesson_tags import speaks_about
from accelopt.agents.offline.rewrites.base import Params
from accelopt.agents.offline.site_pattern import SitePattern
from accelopt.search.candidate import Experience

# A variant whose evidence is below this (a damped mean log-speedup) is left out when another
# variant can be written instead: one fully relevant no-gain lesson (about -0.026), or a failure
# on any kernel of some kinship, is enough; a single loosely related no-gain lesson is not.
DROP_BELOW = -0.02


@dataclass(frozen=True)
class VariantLesson:
    variant: dict[str, str]
    failed: bool
    log_speedup: float
    relevance: float
    experience_id: int | None


def variant_lessons(
    experiences: list[Experience],
    *,
    rewrite: str,
    kernel_name: str,
    kernel_text: str,
    bound: str | None,
    pattern: SitePattern | None,
) -> list[VariantLesson]:
    """The lessons that name a variant of `rewrite`, with their relevance to this site (the
    planner's reading of them, evidence.py: kinship times site-pattern match)."""
    about_rewrite = [exp for exp in experiences if rewrite_of(exp) == rewrite]
    found = []
    for lesson in read_lessons(kernel_name, kernel_text, bound, about_rewrite):
        if lesson.variant is None:
            continue
        relevance = lesson.kinship * pattern_match(lesson.pattern, pattern)
        if relevance > 0:
            found.append(
                VariantLesson(lesson.variant, lesson.failed, lesson.log_speedup, relevance, lesson.id)
            )
    return found


def verdict(lessons: list[VariantLesson], params: Params) -> float:
    """The damped, relevance-weighted mean log-speedup of the lessons about `params` (0: none)."""
    total = weighted = 0.0
    for lesson in lessons:
        if speaks_about(lesson.variant, lesson.failed, params):
            total += lesson.relevance
            weighted += lesson.relevance * lesson.log_speedup
    return weighted / (total + DAMPING) if total > 0 else 0.0


def order_variants(variants: list[Params], lessons: list[VariantLesson]) -> list[Params]:
    """The variants to write, best first: those the memory says paid, then the unknown ones in
    their own order; variants with a clear record of failing or giving nothing are left out,
    unless every variant has such a record (then the least bad one alone is written: the plan
    was chosen, and one kernel tells whether it holds here)."""
    if not lessons:
        return list(variants)
    scored = [(verdict(lessons, v), i, v) for i, v in enumerate(variants)]
    kept = [item for item in scored if item[0] >= DROP_BELOW]
    if not kept:
        return [max(scored, key=lambda item: (item[0], -item[1]))[2]]
    kept.sort(key=lambda item: (-max(item[0], 0.0), item[1]))
    return [v for _, _, v in kept]
