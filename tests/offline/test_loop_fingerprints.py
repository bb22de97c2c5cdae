"""The fingerprint of a move on a loop says which loop it acts on: blocking a matmul's outer output
loop and blocking its inner one are different bets (the outer block shares the inner loop's
operand loads, the inner one the outer's), so a lesson about one speaks more for the same move on
another kernel than for the other move. The site of a blocking is anchored at the operand load
it widens, which sits at the same depth whichever output loop is blocked: its depth must be the
loop's. The kernels are only analysed, never run."""

from __future__ import annotations

from accelopt.agents.offline.catalogue import all_sites
from accelopt.agents.offline.evidence import read_lessons, weigh
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.rewrites.base import Site
from accelopt.agents.offline.site_pattern import pattern_in_text, patterns_of
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Experience
from accelopt.search.roles import PlanRequest

from .lessons import summarized_experience
from .test_planner_memory import DMA_BOUND, PROJ, SCORES


def blocking(kernel: KernelSource, loop_var: str) -> Site:
    return next(
        s
        for s in all_sites(kernel.text, kernel.name)
        if s.rewrite == "block_accumulators" and s.title.startswith(f"block the {loop_var} loop ")
    )


def test_blocking_the_outer_and_the_inner_output_loop_have_different_fingerprints():
    patterns = patterns_of(PROJ.text, PROJ.name)
    outer, inner = patterns[blocking(PROJ, "mi").id], patterns[blocking(PROJ, "ni").id]
    assert (outer.depth, inner.depth) == (0, 1)
    assert outer.key != inner.key


async def test_a_lesson_about_blocking_an_outer_loop_speaks_most_for_blocking_the_outer_loop_elsewhere():
    lesson = await summarized_experience(PROJ, blocking(PROJ, "mi"), {"factor": 2}, 1.25, id_=1, bound="hbm")
    pattern = pattern_in_text(lesson.lesson.plan)
    assert pattern is not None and pattern.depth == 0
    sites = all_sites(SCORES.text, SCORES.name)
    evidence = weigh(
        read_lessons(SCORES.name, SCORES.text, "hbm", [lesson]),
        sites,
        patterns_of(SCORES.text, SCORES.name),
        SCORES.text,
    )
    outer, inner = evidence.gain(blocking(SCORES, "r")), evidence.gain(blocking(SCORES, "c"))
    assert outer > inner > 0


async def test_when_similar_kernels_paid_for_blocking_both_loops_both_blockings_are_proposed_first():
    """The round-robin over rewrites (diversity) yields to clear evidence: with lessons that
    blocking each output loop of PROJ paid, SCORES' two blockings are its first two plans, not
    one blocking and a rewrite nobody has evidence for."""
    lessons = [
        await summarized_experience(PROJ, blocking(PROJ, loop), {"factor": 2}, 1.3, id_=i, bound="hbm")
        for i, loop in enumerate(("mi", "ni"), start=1)
    ]
    count = len(all_sites(SCORES.text, SCORES.name))

    def first_two(experiences: list[Experience]) -> list[str]:
        result = OfflinePlanner().plan_now(
            PlanRequest(kernel=SCORES, profile=DMA_BOUND, experiences=experiences, count=count)
        )
        assert result.error is None
        return [p.rewrite or "" for p in result.plans[:2]]

    assert first_two([]).count("block_accumulators") < 2  # without memory: one idea each
    assert first_two(lessons) == ["block_accumulators", "block_accumulators"]
