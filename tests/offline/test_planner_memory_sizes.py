"""Size facts in the optimization memory: a preload measured on a block that did not fit in SBUF
(it spilled and slowed the kernel) says nothing against preloading a block that fits, and still
counts against one that does not fit either. Through a real SQLite memory file; the kernels are
only analysed, never run."""

from __future__ import annotations

from pathlib import Path

from accelopt.agents.offline.catalogue import all_sites
from accelopt.agents.offline.evidence import read_lessons, weigh
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.site_pattern import patterns_of
from accelopt.agents.offline.sizes import sbuf_share, share_in_text, size_class
from accelopt.search.candidate import Experience, Plan
from accelopt.search.memory import Memory
from accelopt.search.roles import PlanRequest

from .lessons import summarized_experience
from .test_planner_memory import DMA_BOUND, PROJ, SCORES

# PROJ's x_t [k, m] and w [k, n]: at the large size a block of w over the ni and ki loops is
# 12288 / 512 x 5120 / 128 tiles of 512 fp32 per partition (about 2 MB), far beyond SBUF.
PROJ_LARGE = {"x_t": [5120, 4096], "w": [5120, 12288]}
SCORES_SMALL = {"queries": [256, 256], "keys": [256, 1024]}  # a block of keys: 8 KB per partition
SCORES_LARGE = {"queries": [5120, 4096], "keys": [5120, 12288]}


def ranking(experiences: list[Experience], shapes: dict[str, list[int]]) -> list[Plan]:
    count = len([s for s in all_sites(SCORES.text, SCORES.name) if "spill" not in s.relieves])
    result = OfflinePlanner().plan_now(
        PlanRequest(
            kernel=SCORES, profile=DMA_BOUND, experiences=experiences, count=count, input_shapes=shapes
        )
    )
    assert result.error is None
    return result.plans


def place_of_keys_preload(plans: list[Plan]) -> int:
    """Where the preload of keys comes in the proposals (after all of them when the memory
    advises against it: the planner proposes it only once every other site is tried)."""
    found = (i for i, p in enumerate(plans) if p.rewrite == "preload_operand" and "keys" in p.title)
    return next(found, len(plans))


async def remembered(tmp_path: Path, *, strip_size: bool = False) -> list[Experience]:
    """The lesson of a preload of w that slowed PROJ 2.7x at the large size, written to a real
    SQLite file by one Memory and selected for SCORES by another."""
    site = next(
        s for s in all_sites(PROJ.text, PROJ.name) if s.rewrite == "preload_operand" and "load w " in s.title
    )
    lesson = await summarized_experience(PROJ, site, {}, 0.37, id_=1, bound="hbm", input_shapes=PROJ_LARGE)
    share = share_in_text(lesson.lesson.plan)
    assert share is not None and size_class(share) == "exceeds", lesson.lesson.plan
    if strip_size:  # as a row recorded before lessons carried sizes
        plan = lesson.lesson.plan.replace(f" sbuf={lesson.lesson.plan.split('sbuf=')[1].split(':')[0]}", "")
        lesson = lesson.model_copy(update={"lesson": lesson.lesson.model_copy(update={"plan": plan})})
        assert share_in_text(plan) is None
    path = tmp_path / "memory.sqlite"
    with Memory(path) as memory:
        memory.add(lesson)
    with Memory(path) as memory:
        return memory.select_for_prompt(SCORES, DMA_BOUND)


async def test_a_preload_that_spilled_does_not_demote_preloading_a_block_that_fits(tmp_path: Path):
    experiences = await remembered(tmp_path)
    assert len(experiences) == 1
    fits = place_of_keys_preload(ranking([], SCORES_SMALL))
    assert place_of_keys_preload(ranking(experiences, SCORES_SMALL)) <= fits
    # The same lesson on a block of keys that spills too: preloading it goes back.
    spills = place_of_keys_preload(ranking([], SCORES_LARGE))
    assert place_of_keys_preload(ranking(experiences, SCORES_LARGE)) > spills


async def test_a_lesson_recorded_without_sizes_still_loads_and_counts_at_every_size(tmp_path: Path):
    experiences = await remembered(tmp_path, strip_size=True)
    assert len(experiences) == 1
    for shapes in (SCORES_SMALL, SCORES_LARGE):
        assert place_of_keys_preload(ranking(experiences, shapes)) > place_of_keys_preload(
            ranking([], shapes)
        )


# A block of keys (over the c and d loops) that fits but takes 0.36 of a partition: 2048 / 512 x
# 1024 / 128 tiles of 512 fp32; the same kernel at SCORES_SMALL keeps 8 KB of it (0.05).
SCORES_FITS_LARGE = {"queries": [1024, 256], "keys": [1024, 2048]}
PROJ_SMALL = {"x_t": [256, 256], "w": [256, 1024]}  # PROJ's block of w: 8 KB per partition


def gain_of_keys_preload(experiences: list[Experience], shapes: dict[str, list[int]]) -> float:
    """The memory's evidence for preloading keys in SCORES at the given timed shapes."""
    sites = all_sites(SCORES.text, SCORES.name)
    shares = {
        s.id: share
        for s in sites
        if (share := sbuf_share(SCORES.text, SCORES.name, s, shapes, "trn1")) is not None
    }
    site = next(s for s in sites if s.rewrite == "preload_operand" and "keys" in s.title)
    assert size_class(shares[site.id]) == ("large" if shapes is SCORES_FITS_LARGE else "small")
    lessons = read_lessons(SCORES.name, SCORES.text, "hbm", experiences)
    return weigh(lessons, sites, patterns_of(SCORES.text, SCORES.name), SCORES.text, shares).gain(site)


async def preload_of_w(speedup: float) -> Experience:
    """PROJ's preload of w, measured at a size where its block is small (8 KB per partition)."""
    site = next(
        s for s in all_sites(PROJ.text, PROJ.name) if s.rewrite == "preload_operand" and "load w " in s.title
    )
    lesson = await summarized_experience(PROJ, site, {}, speedup, id_=1, bound="hbm", input_shapes=PROJ_SMALL)
    share = share_in_text(lesson.lesson.plan)
    assert share is not None and size_class(share) == "small", lesson.lesson.plan
    return lesson


async def test_a_preload_that_paid_on_a_small_block_speaks_fully_for_a_larger_block_that_still_fits():
    paid = [await preload_of_w(1.8)]
    small, large = gain_of_keys_preload(paid, SCORES_SMALL), gain_of_keys_preload(paid, SCORES_FITS_LARGE)
    assert small > 0
    assert large == small  # the reloads it removes pay whatever share of SBUF the block takes


async def test_a_preload_that_did_not_pay_on_a_small_block_counts_half_against_one_that_crowds_sbuf():
    lost = [await preload_of_w(0.8)]
    small, large = gain_of_keys_preload(lost, SCORES_SMALL), gain_of_keys_preload(lost, SCORES_FITS_LARGE)
    assert small < large < 0


def test_a_block_of_a_16_bit_input_takes_half_the_share_of_the_same_block_in_fp32():
    """The size facts read each input's element type from the evaluation (`x.dtype` is not in the
    source); with none given, 4 bytes per element are assumed."""
    site = next(
        s for s in all_sites(SCORES.text, SCORES.name) if s.rewrite == "preload_operand" and "keys" in s.title
    )
    assumed = sbuf_share(SCORES.text, SCORES.name, site, SCORES_FITS_LARGE, "trn1")
    fp32 = sbuf_share(SCORES.text, SCORES.name, site, SCORES_FITS_LARGE, "trn1", {"keys": "float32"})
    bf16 = sbuf_share(SCORES.text, SCORES.name, site, SCORES_FITS_LARGE, "trn1", {"keys": "bfloat16"})
    assert assumed is not None and fp32 == assumed and bf16 == assumed / 2
