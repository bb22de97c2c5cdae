"""The reads a preload saves, in the optimization memory: a lesson that preloading an operand paid
is evidence for preloading another in proportion to the share of its kernel's HBM reads each move
removes. Preloading the operand that makes up most of the traffic and preloading a small one are
the same rewrite with the same site pattern; only the first can repeat a large gain. The kernels
are only analysed, never run."""

from __future__ import annotations

import pytest

from accelopt.agents.offline.catalogue import all_sites, get_rewrite
from accelopt.agents.offline.evidence import read_lessons, weigh
from accelopt.agents.offline.rewrites.base import Site
from accelopt.agents.offline.site_pattern import patterns_of
from accelopt.agents.offline.sizes import reads_in_text, reads_share
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience, Plan
from accelopt.search.kernel_text import kernel_family
from accelopt.search.roles import SummarizeRequest

from .test_planner_memory import PROJ, SCORES

TILE = 128 * 128 * 4  # an fp32 128 x 128 tile
WIDE = 128 * 512 * 4  # an fp32 128 x 512 tile


def reads_of(k: int, m: int, n: int) -> int:
    """PROJ's (and SCORES') HBM reads: one x tile and one w tile per (mi, ni, ki) iteration."""
    iterations = (m // 128) * (n // 512) * (k // 128)
    return iterations * (TILE + WIDE)


def preload(kernel: KernelSource, operand: str) -> Site:
    return next(
        s
        for s in all_sites(kernel.text, kernel.name)
        if s.rewrite == "preload_operand" and s.title.startswith(f"load {operand} once")
    )


def test_the_reads_a_preload_removes_are_its_block_times_the_trips_it_no_longer_repeats():
    # k = m = 256, n = 4096: mi, ni and ki run 2, 8 and 2 trips; w is 4/5 of the reads.
    shapes = {"x_t": [256, 256], "w": [256, 4096]}
    total = reads_of(256, 256, 4096)
    w_site, x_site = preload(PROJ, "w"), preload(PROJ, "x_t")
    assert "mi loop" in w_site.title and "ni loop" in x_site.title
    # w's block (8 x 2 wide tiles) was read once per mi trip: one of the two reads goes.
    w_share = reads_share(PROJ.text, PROJ.name, w_site, shapes, "trn1", total)
    assert w_share == pytest.approx(16 * WIDE / total)
    # x_t's block (2 tiles) was read in each of the 8 ni trips of each of the 2 mi trips: 7 of 8 go.
    x_share = reads_share(PROJ.text, PROJ.name, x_site, shapes, "trn1", total)
    assert x_share == pytest.approx(2 * 7 * 2 * TILE / total)
    assert reads_share(PROJ.text, PROJ.name, w_site, {}, "trn1", total) is None  # sizes not known


async def paid_lesson(speedup: float, shapes: dict[str, list[int]]) -> Experience:
    """PROJ's preload of w, summarized with the slow kernel's measured reads at `shapes`."""
    site = preload(PROJ, "w")
    plan = Plan(title=site.title, rewrite=site.rewrite, site=site.id, params={})
    fast = get_rewrite(site.rewrite).apply(PROJ.text, PROJ.name, site.id, {})
    k, m = shapes["x_t"]
    profile = Profile(
        backend="simulator",
        hardware="trn1",
        latency_ms=1.0,
        bound="hbm",
        hbm_read_bytes=reads_of(k, m, shapes["w"][1]),
    )
    result = await OfflineSummarizer().summarize(
        SummarizeRequest(
            slow=PROJ,
            fast=PROJ.model_copy(update={"text": fast}),
            plan=plan,
            speedup=speedup,
            slow_profile=profile,
            input_shapes=shapes,
        )
    )
    assert result.lesson is not None
    return Experience(
        id=1,
        slow_kernel=PROJ.text,
        fast_kernel=fast,
        speedup=speedup,
        lesson=result.lesson.model_copy(update={"positive": True}),
        kernel_family=kernel_family(PROJ.name),
        bound="hbm",
    )


async def test_a_paid_preload_speaks_less_for_a_preload_that_removes_a_smaller_share_of_the_reads():
    lesson = await paid_lesson(1.8, {"x_t": [256, 256], "w": [256, 4096]})
    measured = reads_in_text(lesson.lesson.plan)
    assert measured == pytest.approx(0.4, abs=0.01), lesson.lesson.plan
    # SCORES at a size where keys make up most of the reads and a block of queries little.
    shapes = {"queries": [256, 256], "keys": [256, 4096]}
    total = reads_of(256, 256, 4096)
    sites = all_sites(SCORES.text, SCORES.name)
    keys, queries = preload(SCORES, "keys"), preload(SCORES, "queries")
    reads = {
        s.id: share
        for s in (keys, queries)
        if (share := reads_share(SCORES.text, SCORES.name, s, shapes, "trn1", total)) is not None
    }
    assert reads[queries.id] < reads[keys.id]
    lessons = read_lessons(SCORES.name, SCORES.text, "hbm", [lesson])
    patterns = patterns_of(SCORES.text, SCORES.name)
    evidence = weigh(lessons, sites, patterns, SCORES.text, {}, reads)
    assert 0 < evidence.gain(queries) < evidence.gain(keys)
    # The same lesson with no reads facts on the site's side speaks for both alike, as before.
    plain = weigh(lessons, sites, patterns, SCORES.text, {}, {})
    assert plain.gain(queries) == plain.gain(keys) == evidence.gain(keys)
