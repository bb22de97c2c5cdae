"""The offline planner's use of the optimization memory: lessons transfer between kernels by what
they were about (the roofline bound, the instructions the kernel uses, the structural pattern of
the site), not by shared variable names; negative lessons and rewrites with no share in the
successes on similar kernels are tried later; within a search, a rewrite that paid off steers
the next site of the same shape.

The kernels are small and only analysed (never run), so these tests are fast. They pick the
rewrites they promote or demote from the planner's own ranking without memory, so they hold
whatever rewrites the catalogue registers."""

from __future__ import annotations

import pytest

from accelopt.agents.offline.catalogue import all_sites, get_rewrite
from accelopt.agents.offline.evidence import acted_on_line, written_lines
from accelopt.agents.offline.planner import OfflinePlanner
from accelopt.agents.offline.site_pattern import pattern_in_text, patterns_of
from accelopt.agents.offline.summarizer import OfflineSummarizer
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience, Plan
from accelopt.search.kernel_text import kernel_family, source_tokens
from accelopt.search.memory import Memory
from accelopt.search.roles import PlanRequest, SummarizeRequest

from .lessons import summarized_experience

PROJ = KernelSource(
    name="proj_kernel",
    text="""import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def proj_kernel(x_t, w):
    k, m = x_t.shape
    n = w.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mi in nl.affine_range(m // 128):
        for ni in nl.affine_range(n // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // 128):
                x_tile = nl.load(x_t[ki * 128 : (ki + 1) * 128, mi * 128 : (mi + 1) * 128])
                w_tile = nl.load(w[ki * 128 : (ki + 1) * 128, ni * 512 : (ni + 1) * 512])
                acc += nisa.nc_matmul(x_tile, w_tile)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(out[mi * 128 : (mi + 1) * 128, ni * 512 : (ni + 1) * 512], value=res)
    return out
""",
)

# The same shape of computation under other names, with a sigmoid where PROJ copies.
SCORES = KernelSource(
    name="gate_scores_kernel",
    text="""import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def gate_scores_kernel(queries, keys):
    depth, rows = queries.shape
    cols = keys.shape[1]
    scores = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        for c in nl.affine_range(cols // 512):
            total = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for d in nl.affine_range(depth // 128):
                q = nl.load(queries[d * 128 : (d + 1) * 128, r * 128 : (r + 1) * 128])
                kv = nl.load(keys[d * 128 : (d + 1) * 128, c * 512 : (c + 1) * 512])
                total += nisa.nc_matmul(q, kv)
            gated = nl.sigmoid(total)
            nl.store(scores[r * 128 : (r + 1) * 128, c * 512 : (c + 1) * 512], value=gated)
    return scores
""",
)

DMA_BOUND = Profile(
    backend="simulator", hardware="trn1", latency_ms=1.0, bound="hbm", dma_active_time_percent=0.9
)


def ranking(kernel: KernelSource, experiences: list[Experience] | None = None) -> list[Plan]:
    """Every site once, in the planner's order of preference."""
    # Reorderings that only remove spills are not proposed on this spill-free profile.
    count = len([s for s in all_sites(kernel.text, kernel.name) if "spill" not in s.relieves])
    result = OfflinePlanner().plan_now(
        PlanRequest(kernel=kernel, profile=DMA_BOUND, experiences=experiences or [], count=count)
    )
    assert result.error is None
    return result.plans


async def lesson_from(
    kernel: KernelSource, rewrite: str, speedup: float, id_: int, *, titled: str = ""
) -> Experience:
    """An experience as the search stores it: the real summarizer's lesson on `kernel`'s first
    site of `rewrite` (whose title contains `titled`)."""
    site = next(s for s in all_sites(kernel.text, kernel.name) if s.rewrite == rewrite and titled in s.title)
    return await summarized_experience(
        kernel, site, site.variants[0] if site.variants else {}, speedup, id_=id_, bound="hbm"
    )


def first_round(plans: list[Plan]) -> list[str]:
    """The rewrites in the order they first appear."""
    seen: list[str] = []
    for plan in plans:
        if plan.rewrite not in seen:
            seen.append(plan.rewrite or "")
    return seen


def test_the_two_kernels_share_structure_not_names():
    shared = source_tokens(PROJ.text) & source_tokens(SCORES.text)
    assert not {"x_t", "w", "x_tile", "w_tile", "acc"} & shared
    assert kernel_family(PROJ.name) != kernel_family(SCORES.name)
    patterns = {p.key for p in patterns_of(PROJ.text, PROJ.name).values()}
    assert patterns & {p.key for p in patterns_of(SCORES.text, SCORES.name).values()}


async def test_summarizer_tags_the_lesson_with_the_site_pattern():
    experience = await lesson_from(PROJ, "preload_operand", 1.3, 1)
    pattern = pattern_in_text(experience.lesson.plan)
    assert pattern is not None and pattern.rewrite == "preload_operand"
    assert "load" in pattern.calls and "matmul" in pattern.consumers
    assert experience.lesson.plan.startswith(f"rewrite=preload_operand pattern={pattern.key}:")


async def test_a_lesson_from_another_kernel_of_the_same_shape_ranks_its_rewrite_first():
    before = ranking(SCORES)
    promoted = first_round(before)[1]  # the planner's second idea without memory
    assert before[0].rewrite != promoted
    lesson = await lesson_from(PROJ, promoted, 1.3, 7)
    after = ranking(SCORES, [lesson])
    assert after[0].rewrite == promoted
    assert after[0].lesson_ids == [7]


async def test_a_negative_lesson_sends_its_rewrite_after_all_the_others():
    """A step that gave nothing (0.97x) on a kernel of the same shape: tried after the rest."""
    before = ranking(SCORES)
    demoted = before[0].rewrite
    assert demoted is not None
    lesson = await lesson_from(PROJ, demoted, 0.97, 8)
    after = ranking(SCORES, [lesson])
    positions = [i for i, p in enumerate(after) if p.rewrite == demoted]
    others = [i for i, p in enumerate(after) if p.rewrite != demoted]
    assert positions and min(positions) > max(others)
    assert all(not p.lesson_ids for p in after)


async def test_a_clear_slowdown_keeps_its_rewrite_out_of_the_proposals_while_others_remain():
    """A 0.7x slowdown on a kernel of the same shape: not proposed at all; past the end of the
    ranking the planner repeats the plans it does recommend."""
    before = ranking(SCORES)
    avoided = before[0].rewrite
    lesson = await lesson_from(PROJ, avoided, 0.7, 8)
    after = ranking(SCORES, [lesson])
    assert len(after) == len(before)
    assert avoided not in [p.rewrite for p in after]
    assert {p.site for p in after} == {p.site for p in before if p.rewrite != avoided}


async def test_rewrites_that_could_act_on_similar_kernels_but_never_paid_are_tried_later():
    """Six successes on PROJ, all from one rewrite: the other rewrites that could act on PROJ
    had their chances there and are proposed only after every site of the winner."""
    order = first_round(ranking(SCORES))
    winner = order[-1]
    lessons = [await lesson_from(PROJ, winner, 1.25, i) for i in range(1, 7)]
    after = ranking(SCORES, lessons)
    sites_of_winner = sum(p.rewrite == winner for p in after)
    assert [p.rewrite for p in after[:sites_of_winner]] == [winner] * sites_of_winner


async def test_one_success_is_not_enough_to_set_the_other_rewrites_aside():
    order = first_round(ranking(SCORES))
    lesson = await lesson_from(PROJ, order[-1], 1.25, 1)
    assert set(first_round(ranking(SCORES, [lesson]))[: len(order)]) == set(order)


async def test_a_lesson_on_an_unrelated_kernel_barely_counts():
    """Same rewrite, but learned on a Vector-bound kernel sharing few instructions."""
    promoted = first_round(ranking(SCORES))[1]
    lesson = await lesson_from(PROJ, promoted, 1.3, 5)
    unrelated = lesson.model_copy(
        update={
            "bound": "vector",
            "slow_kernel": "import neuronxcc.nki.language as nl\n# nl.exp(x) nl.tanh(y) nl.rsqrt(z)\n",
        }
    )
    near = ranking(SCORES, [lesson])
    far = ranking(SCORES, [unrelated])
    assert near[0].rewrite == promoted
    assert far[0].rewrite != promoted


@pytest.mark.parametrize("applied_first", [0, 1])
async def test_within_a_search_the_next_site_of_a_rewrite_that_paid_comes_first(applied_first: int):
    """The search's own earlier lesson (same family): preloading one matmul operand paid, so on
    the child kernel the other operand's preload is proposed first."""
    sites = [s for s in all_sites(PROJ.text, PROJ.name) if s.rewrite == "preload_operand"]
    assert len(sites) == 2
    paid = sites[applied_first]
    child_text = get_rewrite("preload_operand").apply(PROJ.text, PROJ.name, paid.id, {})
    child = PROJ.model_copy(update={"text": child_text})
    remaining = [s for s in all_sites(child_text, PROJ.name) if s.rewrite == "preload_operand"]
    assert remaining
    plan = Plan(title=paid.title, rewrite="preload_operand", site=paid.id)
    result = await OfflineSummarizer().summarize(
        SummarizeRequest(slow=PROJ, fast=child, plan=plan, speedup=1.2)
    )
    assert result.lesson is not None
    experience = Experience(
        id=3,
        slow_kernel=PROJ.text,
        fast_kernel=child_text,
        speedup=1.2,
        lesson=result.lesson,
        kernel_family=kernel_family(PROJ.name),
        bound="hbm",
    )
    first = ranking(child, [experience])[0]
    assert (first.rewrite, first.site) == ("preload_operand", remaining[0].id)


async def test_the_code_a_paid_change_just_wrote_is_not_taken_for_its_next_site():
    """Blocking a loop that paid creates a new loop; blocking that new loop again is not "the
    same rewrite at its next site", while the untouched loops are."""
    planner_sites = all_sites(PROJ.text, PROJ.name)
    for site in planner_sites:
        child_text = get_rewrite(site.rewrite).apply(PROJ.text, PROJ.name, site.id, dict(site.variants[0]))
        written = written_lines(PROJ.text, child_text)
        again = [s for s in all_sites(child_text, PROJ.name) if s.rewrite == site.rewrite]
        if any(s.line in written for s in again) and any(s.line not in written for s in again):
            break
    else:
        pytest.fail("no rewrite of the catalogue writes code it could act on again in PROJ")
    child = PROJ.model_copy(update={"text": child_text})
    plan = Plan(title=site.title, rewrite=site.rewrite, site=site.id, params=dict(site.variants[0]))
    result = await OfflineSummarizer().summarize(
        SummarizeRequest(slow=PROJ, fast=child, plan=plan, speedup=1.3)
    )
    assert result.lesson is not None
    experience = Experience(
        id=4,
        slow_kernel=PROJ.text,
        fast_kernel=child_text,
        speedup=1.3,
        lesson=result.lesson,
        kernel_family=kernel_family(PROJ.name),
        bound="hbm",
    )
    plans = {p.site: p for p in ranking(child, [experience])}
    for other in again:
        assert bool(plans[other.id].lesson_ids) is (acted_on_line(other) not in written)
    first = ranking(child, [experience])[0]
    assert (first.rewrite, first.site) in {
        (s.rewrite, s.id) for s in again if acted_on_line(s) not in written
    }


# PROJ with its lhs tiles kept in a buffer indexed by every loop (as NKIBench's matmul does): blocking
# one output loop renames its index in the lhs load, the line blocking the *other* loop is anchored at.
TILED_PROJ = KernelSource(
    name="tiled_proj_kernel",
    text="""import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def tiled_proj_kernel(x_t, w):
    k, m = x_t.shape
    n = w.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    x_tiles = nl.ndarray((m // 128, n // 512, k // 128, nl.par_dim(128), 128), dtype=nl.float32)
    for mi in nl.affine_range(m // 128):
        for ni in nl.affine_range(n // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // 128):
                x_tiles[mi, ni, ki, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
                    x_t[ki * 128 : (ki + 1) * 128, mi * 128 : (mi + 1) * 128]
                )
                w_tile = nl.load(w[ki * 128 : (ki + 1) * 128, ni * 512 : (ni + 1) * 512])
                acc += nisa.nc_matmul(x_tiles[mi, ni, ki, nl.arange(128)[:, None], nl.arange(128)[None, :]], w_tile)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(out[mi * 128 : (mi + 1) * 128, ni * 512 : (ni + 1) * 512], value=res)
    return out
""",
)


async def test_blocking_the_other_loop_is_a_next_site_though_its_anchor_line_was_renamed():
    """Blocking ni paid; on the child, blocking mi (the other output loop, untouched) is the same
    move at its next site, although the lhs load it is anchored at was rewritten (ni -> ni_blk in
    its index). Blocking ni_blk, the loop the change created, is not."""
    blocks = {
        int(s.id.split(":")[1]): s
        for s in all_sites(TILED_PROJ.text, TILED_PROJ.name)
        if s.rewrite == "block_accumulators"
    }
    outer_line, inner_line = sorted(blocks)
    paid = blocks[inner_line]
    child_text = get_rewrite("block_accumulators").apply(
        TILED_PROJ.text, TILED_PROJ.name, paid.id, dict(paid.variants[0])
    )
    child = TILED_PROJ.model_copy(update={"text": child_text})
    written = written_lines(TILED_PROJ.text, child_text)
    again = [s for s in all_sites(child_text, TILED_PROJ.name) if s.rewrite == "block_accumulators"]
    other = next(s for s in again if s.id == f"block_accumulators:{outer_line}")
    created = next(s for s in again if s is not other)
    assert other.line in written  # the anchor (the lhs load) was rewritten, the loop was not
    plan = Plan(title=paid.title, rewrite="block_accumulators", site=paid.id, params=dict(paid.variants[0]))
    result = await OfflineSummarizer().summarize(
        SummarizeRequest(slow=TILED_PROJ, fast=child, plan=plan, speedup=1.3)
    )
    assert result.lesson is not None
    experience = Experience(
        id=5,
        slow_kernel=TILED_PROJ.text,
        fast_kernel=child_text,
        speedup=1.3,
        lesson=result.lesson,
        kernel_family=kernel_family(TILED_PROJ.name),
        bound="hbm",
    )
    plans = {p.site: p for p in ranking(child, [experience])}
    assert plans[other.id].lesson_ids == [5]
    assert plans[created.id].lesson_ids == []


async def test_a_lesson_measured_on_the_very_code_of_a_site_outweighs_one_from_a_look_alike():
    """Preloading w paid on the baseline; on the kernel whose ni loop was blocked (w's load now
    wide) the same preload slowed it down. On that kernel's descendants the wide load is the
    code the slowdown was measured on: the preload of w is no longer proposed there, while the
    look-alike preload of x_t still is."""
    preload = get_rewrite("preload_operand")
    block = next(
        s
        for s in all_sites(PROJ.text, PROJ.name)
        if s.rewrite == "block_accumulators" and "ni loop" in s.title
    )
    blocked = PROJ.model_copy(
        update={
            "text": get_rewrite("block_accumulators").apply(PROJ.text, PROJ.name, block.id, {"factor": 2})
        }
    )

    def preload_w(kernel: KernelSource):
        return next(
            s
            for s in all_sites(kernel.text, kernel.name)
            if s.rewrite == "preload_operand" and "load w once" in s.title
        )

    lessons = [
        await lesson_from(PROJ, "preload_operand", 1.2, 1, titled="load w once"),
        await lesson_from(blocked, "preload_operand", 0.88, 2, titled="load w once"),
    ]
    engine = next(s for s in all_sites(blocked.text, blocked.name) if s.rewrite == "assign_engine")
    descendant = blocked.model_copy(
        update={
            "text": get_rewrite("assign_engine").apply(
                blocked.text, blocked.name, engine.id, engine.variants[-1]
            )
        }
    )
    plans = {p.site: p for p in ranking(descendant, lessons)}
    w_site = preload_w(descendant).id
    x_site = next(p.site for p in plans.values() if p.rewrite == "preload_operand" and p.site != w_site)
    assert w_site not in plans  # the slowdown at this very code: not proposed at all
    assert plans[x_site].lesson_ids == [1]


async def test_a_failure_on_a_guessed_block_steers_other_kernels_away_from_reblocking_only():
    """Blocking a loop paid on PROJ; blocking the resulting block loop again (a multiple of 4
    tiles that the shapes did not have) failed. On another kernel's blocked child the same two
    kinds of site exist: blocking its block loop again is not recommended, blocking the other,
    original loop still is, first."""
    block = get_rewrite("block_accumulators")

    def blocked(kernel: KernelSource, which: int) -> KernelSource:
        site = [s for s in all_sites(kernel.text, kernel.name) if s.rewrite == "block_accumulators"][which]
        return kernel.model_copy(
            update={"text": block.apply(kernel.text, kernel.name, site.id, {"factor": 2})}
        )

    def guessed_and_fresh(kernel: KernelSource) -> tuple[str, str]:
        patterns = patterns_of(kernel.text, kernel.name)
        sites = [sid for sid, p in patterns.items() if p.rewrite == "block_accumulators"]
        guessed = [sid for sid in sites if patterns[sid].guessed]
        fresh = [sid for sid in sites if not patterns[sid].guessed]
        assert len(guessed) == 1 and len(fresh) == 1
        return guessed[0], fresh[0]

    async def experience(
        kernel: KernelSource, site_id: str, speedup: float, id_: int, failure=None
    ) -> Experience:
        site = next(s for s in all_sites(kernel.text, kernel.name) if s.id == site_id)
        plan = Plan(title=site.title, rewrite="block_accumulators", site=site.id, params={"factor": 2})
        fast = block.apply(kernel.text, kernel.name, site.id, plan.params)
        request = SummarizeRequest(
            slow=kernel,
            fast=kernel.model_copy(update={"text": fast}),
            plan=plan,
            speedup=speedup,
            failure=failure,
        )
        result = await OfflineSummarizer().summarize(request)
        assert result.lesson is not None
        return Experience(
            id=id_,
            slow_kernel=kernel.text,
            fast_kernel=fast,
            speedup=speedup,
            lesson=result.lesson.model_copy(update={"positive": failure is None}),
            kernel_family=kernel_family(kernel.name),
            bound="hbm",
        )

    proj_child = blocked(PROJ, 0)
    proj_guessed, _ = guessed_and_fresh(proj_child)
    first_block = next(s.id for s in all_sites(PROJ.text, PROJ.name) if s.rewrite == "block_accumulators")
    lessons = [
        await experience(PROJ, first_block, 1.5, 1),
        await experience(proj_child, proj_guessed, 1 / 1.15, 2, failure="runtime_error: multiple of 2"),
    ]
    assert "~guessed" in lessons[1].lesson.plan and "~guessed" not in lessons[0].lesson.plan

    scores_child = blocked(SCORES, 0)
    guessed, fresh = guessed_and_fresh(scores_child)
    plans = ranking(scores_child, lessons)
    by_site = {p.site: p for p in plans}
    order = [p.site for p in plans]
    assert by_site[fresh].lesson_ids == [1]
    assert guessed not in by_site  # a failure at a site of its kind: not proposed at all
    assert order[0] == fresh


async def test_through_the_sqlite_memory_what_paid_on_a_similar_kernel_comes_first_and_what_slowed_it_last(
    tmp_path,
):
    """Lessons learned on PROJ go through a real SQLite memory (stored, reopened, selected for
    the other kernel as the search selects them): on SCORES, the rewrite the planner ranks second
    without memory comes first, and the one it ranks first comes after every other rewrite."""
    before = ranking(SCORES)
    demoted, promoted = first_round(before)[:2]
    path = tmp_path / "memory.sqlite"
    with Memory(path) as memory:
        for lesson in (await lesson_from(PROJ, promoted, 1.3, 1), await lesson_from(PROJ, demoted, 0.95, 2)):
            memory.add(lesson.model_copy(update={"task": "proj"}))
    with Memory(path) as memory:
        selected = memory.select_for_prompt(SCORES, DMA_BOUND, limit=16, hardware="trn1")
    assert len(selected) == 2
    after = ranking(SCORES, selected)
    assert after[0].rewrite == promoted
    positions = [i for i, p in enumerate(after) if p.rewrite == demoted]
    assert positions and min(positions) > max(i for i, p in enumerate(after) if p.rewrite != demoted)


async def test_a_look_alike_site_that_did_not_pay_does_not_hide_the_next_operand_of_the_same_kind():
    """Within a search, preloading x_t slowed the kernel a little (0.9x); preloading a matmul
    operand paid 1.1x on another kernel. On the child the preload of w -- the same kind of site,
    other code -- stays the first proposal (it is without memory): a step that did not pay at one
    operand says little about the next one, so it does not outweigh the other kernel's success."""
    preload = get_rewrite("preload_operand")
    x_site = next(
        s for s in all_sites(PROJ.text, PROJ.name) if s.rewrite == "preload_operand" and "x_t" in s.title
    )
    child = PROJ.model_copy(update={"text": preload.apply(PROJ.text, PROJ.name, x_site.id, {})})
    assert "load w once" in ranking(child)[0].title
    own = await lesson_from(PROJ, "preload_operand", 0.9, 1, titled="x_t")
    elsewhere = await lesson_from(SCORES, "preload_operand", 1.1, 2)
    assert own.kernel_family == kernel_family(child.name) != elsewhere.kernel_family
    first = ranking(child, [own, elsewhere])[0]
    assert first.rewrite == "preload_operand" and "load w once" in first.title
