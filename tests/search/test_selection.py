"""The loop's three choices on real candidate models: which pairs become experiences (the
published rule), which kernels form the next beam (elitist, deduplicated), the final ranking."""

from __future__ import annotations

from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Candidate
from accelopt.search.selection import Pair, Ranking, next_beam, rank, select_experiences


def candidate(
    cid: str, latency: float | None, *, status: str = "ok", text: str | None = None, parent: str | None = "p"
) -> Candidate:
    return Candidate(
        id=cid,
        parent_id=parent,
        iteration=1,
        kernel=KernelSource(text=text or f"value = '{cid}'\n", name="k"),
        status=status,  # type: ignore[arg-type]
        latency_ms=latency,
    )


PARENT = candidate("p", 10.0, parent=None)


def pairs_with_speedups(speedups: list[float]) -> list[Pair]:
    return [Pair(before=PARENT, after=candidate(f"c{i}", 10.0 / s)) for i, s in enumerate(speedups)]


def test_at_most_eight_and_at_most_half_positive():
    pairs = pairs_with_speedups([1.5, 1.3, 1.2, 1.1, 1.05, 1.6, 0.5, 0.6, 0.7, 0.8, 0.85, 0.4])
    chosen = select_experiences(pairs, limit=8, positive_threshold=1.04, negative_threshold=1 / 1.15)
    speedups = [round(p.speedup, 3) for p in chosen]
    assert speedups == [1.6, 1.5, 1.3, 1.2, 0.4, 0.5, 0.6, 0.7]


def test_neutral_pairs_are_not_lessons_and_negatives_may_fill_the_quota():
    pairs = pairs_with_speedups([1.03, 1.0, 0.9, 0.87, 0.5, 0.6])
    chosen = select_experiences(pairs, limit=8, positive_threshold=1.04, negative_threshold=1 / 1.15)
    assert sorted(round(p.speedup, 3) for p in chosen) == [0.5, 0.6]
    assert (
        select_experiences(
            pairs_with_speedups([2.0]), limit=1, positive_threshold=1.04, negative_threshold=0.8
        )
        == []
    )


def test_failing_and_duplicate_kernels_never_become_experiences():
    failing = Pair(before=PARENT, after=candidate("bad", None, status="incorrect"))
    first = Pair(before=PARENT, after=candidate("a", 5.0, text="same = 1\n"))
    again = Pair(before=PARENT, after=candidate("b", 5.0, text="same = 1  # a comment\n"))
    chosen = select_experiences(
        [failing, first, again], limit=8, positive_threshold=1.04, negative_threshold=0.87
    )
    assert [p.after.id for p in chosen] == ["a"]


def test_beam_is_elitist_and_deduplicated():
    slower = candidate("slow", 12.0)
    broken = candidate("broken", None, status="compile_error")
    assert [c.id for c in next_beam([PARENT], [slower, broken], width=2)] == ["p", "slow"]
    twin = candidate("twin", 10.0, text=PARENT.kernel.text)
    twin.duplicate_of = "p"
    faster = candidate("fast", 4.0)
    assert [c.id for c in next_beam([PARENT], [twin, faster, slower], width=2)] == ["fast", "p"]


def test_ranking_is_sorted_unique_and_limited():
    pool = [
        candidate("a", 3.0),
        candidate("b", 1.0),
        candidate("c", 2.0, status="incorrect"),
        candidate("d", 2.0),
    ]
    assert [(r.rank, r.candidate.id) for r in rank(pool, limit=2)] == [(1, "b"), (2, "d")]


def test_the_ranking_kept_as_candidates_arrive_is_the_ranking_of_the_whole_list():
    made = [
        candidate("a", 3.0),
        candidate("b", 1.0),
        candidate("c", 2.0, status="incorrect"),
        candidate("d", 2.0),
        candidate("e", 2.0),  # as fast as d: their sources' hashes order them
        candidate("twin", 1.0, text="value = 'b'\n"),  # b's kernel again, found in the cache
    ]
    made[-1].duplicate_of = "b"
    ranking = Ranking()
    for index in (5, 4, 0, 2, 1, 3):  # the order evaluations happen to finish in
        c = made[index]
        ranking.add(c, kernel_key=c.kernel.normalized_hash(), made=index)
    tied = sorted(["d", "e"], key=lambda cid: made["abcde".index(cid)].kernel.normalized_hash())
    assert [c.id for c in ranking.head(10)] == ["b", *tied, "a"]
    assert [(r.rank, r.candidate.id) for r in rank(made, limit=10)] == list(enumerate(["b", *tied, "a"], start=1))
    assert [c.id for c in ranking.head(2)] == ["b", tied[0]]


def test_equally_fast_kernels_make_the_same_beam_whatever_order_their_evaluations_returned_in():
    # Six children, four of them equally fast; "t2" is t1's kernel again. Which of two equal
    # kernels was found in the cache, and the order children were made and collected in, follow
    # the order evaluations returned: two such orders must give the same beam.
    def children(order: list[str], cached: str) -> list[Candidate]:
        texts = {"t1": "tile = 128\n", "t2": "tile = 128  # same kernel\n", "t3": "tile = 256\n",
                 "t4": "tile = 512\n", "slow": "tile = 64\n", "fast": "tile = 1024\n"}
        latency = {"slow": 12.0, "fast": 4.0}
        made = [candidate(cid, latency.get(cid, 8.0), text=texts[cid]) for cid in order]
        for c in made:
            if c.id == cached:
                c.duplicate_of = "t1" if cached == "t2" else "t2"
        return made

    first = children(["t1", "t2", "t3", "t4", "slow", "fast"], cached="t2")
    second = children(["fast", "t4", "slow", "t3", "t2", "t1"], cached="t1")
    beams = [[c.kernel.normalized_hash() for c in next_beam([PARENT], kids, width=3)] for kids in (first, second)]
    assert beams[0] == beams[1]
    assert len(set(beams[0])) == 3 and beams[0][0] == first[-1].kernel.normalized_hash()  # "fast" leads
    # The same holds for the running ranking, fed in the two arrival orders.
    heads = []
    for kids in (first, second):
        ranking = Ranking()
        for made, c in enumerate(kids):
            ranking.add(c, kernel_key=c.kernel.normalized_hash(), made=made)
        heads.append([c.kernel.normalized_hash() for c in ranking.head(4)])
    assert heads[0] == heads[1]


def test_a_parent_keeps_its_place_against_an_equally_fast_child():
    child = candidate("child", 10.0, text="other = 1\n")
    assert [c.id for c in next_beam([PARENT], [child], width=1)] == ["p"]


def test_spending_against_each_budget():
    from accelopt.search.budget import Spending
    from accelopt.search.config import Budget
    from accelopt.search.roles import AgentOutput

    tokens = Spending(Budget(max_tokens=300))
    tokens.record(AgentOutput(prompt_tokens=100, completion_tokens=100))
    assert tokens.exhausted() is None
    tokens.record(AgentOutput(prompt_tokens=100, completion_tokens=0))
    assert "token budget" in (tokens.exhausted() or "")
    dollars = Spending(Budget(max_dollars=0.01))
    dollars.record(AgentOutput(dollars=0.01))
    assert "dollar budget" in (dollars.exhausted() or "")
    evaluations = Spending(Budget(max_evaluations=1))
    assert evaluations.reserve_evaluation() is None
    assert "evaluation budget" in (evaluations.reserve_evaluation() or "")
    assert evaluations.evaluations == 1
    clock = Spending(Budget(max_wall_time_s=0.001))
    clock.started -= 1
    assert "wall-time" in (clock.exhausted() or "")
