"""Search quality of the offline agents on NKIBench, on the simulated Trainium1.

Runs the AccelOpt beam search with the offline (rewrite-catalogue) agents on every NKIBench task
and prints, per task and as a geometric mean: baseline and best latency, speedup, percent of
roofline peak before and after, and the evaluations used. The same evaluation budget is spent
three ways, side by side:

  beam+memory        beam search; one optimization memory shared by the tasks in suite order
                     (lessons from earlier tasks and earlier iterations steer the planner --
                     which sites to propose, which to leave out -- and the executor -- which
                     parameter variants to write, which failed or gave nothing on similar code)
  beam               the same beam search with the memory disabled (no experiences shown to
                     either agent)
  sampling           plain repeated sampling: one round of one-step plans from the baseline

and, per task, how many evaluations each way needed to first reach the speedup both beam runs
reached (so the memory's saving is measured on a common target), and the same count with a
speedup within 1% of that target counted as reached (a last 1.003x step otherwise decides it).

What the memory is learned from (`--protocol`, printed with the tables and kept in the JSON):

  sequential         one memory, empty at the first task, shared by the tasks in suite order
  leave-one-out      the beam run (no memory shown to the agents) runs first and records its
                     lessons; beam+memory on each task starts from the lessons recorded on the
                     *other* tasks, so no saving comes from re-seeing the same task. With
                     `--warmup-memory FILE` the lessons come from an earlier run's
                     `--save-memory FILE` instead (e.g. the full-size beam run of another process)

How evaluations are counted, and why. An evaluation is a distinct kernel the backend judged
(agent failures and repeats of a kernel already judged are not counted), numbered in the order
the search *wrote* the candidates (candidate ids), not the order their simulations happened to
finish: with two evaluation workers the latter depends on how long each simulation took. Agent
calls run one at a time (`--agent-calls 1`, both modes alike), so candidates are written in the
planners' order of preference: the beam's kernels best first, each kernel's proposals 0..N-1.
With concurrent agent calls that order is set by thread timing instead: the same task's count
moved by up to 5 evaluations between two runs of one mode, and the planner's ranking -- what the
memory changes -- barely reached the count. The offline agents are CPU-bound Python, so running
them one at a time costs little wall time. The search itself looks every beam kernel's
experiences up in beam order before expanding any of them, so both modes expand best-first.
`--trace` prints every evaluated plan with the speedup it gave
over its parent, to see which plans each mode tried and which paid off.

Budget (default; fits a shared 2-core machine in about an hour with 2 evaluation workers):
`small` task sizes (NKIBench "small" shapes: every loop still has 2+ tiles), correctness on 2
seeds per candidate, at most 24 backend evaluations per task and mode; beam width 3, 4 plans
per kernel, 2 samples per plan, 4 iterations. The sampling mode spends the same 24 evaluations
on 12 plans x 2 samples from the baseline.

Real sizes (`--size full`): every candidate is timed at the published NKIBench shapes by a
trace-only run and checked for correctness (and its trace verified) at the "small" shapes
(`accelopt/profiling/real_size.py`); `--check-size full` checks at the full shapes instead
(numerically: minutes per evaluation). One full-size evaluation costs about 5-60 s here (the
full-size trace and its inputs), so the whole suite at the default budget takes hours on a
shared 2-core machine; a smaller budget that still lets the beam grow:

    .venv/bin/python benchmarks/search_quality.py --size full --evaluations 8 --beam 2 --plans 2 \
        --samples 1 --iterations 4 --json full.json

    .venv/bin/python benchmarks/search_quality.py                  # all 14 tasks, 3 modes
    .venv/bin/python benchmarks/search_quality.py --tasks silu,bmm --evaluations 16
    .venv/bin/python benchmarks/search_quality.py --modes beam+memory --json out.json
    .venv/bin/python benchmarks/search_quality.py --modes beam --save-memory beam.sqlite --json beam.json
    .venv/bin/python benchmarks/search_quality.py --modes beam+memory --protocol leave-one-out \
        --warmup-memory beam.sqlite --json loo.json

`--evaluation-store FILE` keeps every evaluation in a SQLite file and answers a kernel judged in
an earlier run from it (evaluation_store.py): re-running beam+memory against a saved beam run
then simulates only the kernels the beam run did not write. Evaluations are still counted as
distinct kernels written, so the figures do not change; only the wall time does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from accelopt.agents.offline import offline_agents
from accelopt.profiling.backend import Backend
from accelopt.profiling.nkibench import bench_task, load_index
from accelopt.profiling.ray_backend import backend_for
from accelopt.search.beam import run_search
from accelopt.search.candidate import Candidate
from accelopt.search.config import Budget, SearchConfig
from accelopt.search.events import CandidateEvent, Finished, IterationEvent, Started
from accelopt.search.memory import Memory
from evaluation_store import StoredEvaluations  # a script beside this one: its folder is on sys.path

MODES = ("beam+memory", "beam", "sampling")
# A speedup within this fraction of the common target, for the second (lenient) reach figure.
NEAR = 0.01


@dataclass
class TaskResult:
    task: str
    mode: str
    baseline_ms: float | None = None
    best_ms: float | None = None
    speedup: float = 1.0
    peak_before: float | None = None
    peak_after: float | None = None
    evaluations: int = 0
    reason: str = ""
    best_plan: list[str] = field(default_factory=list)
    # (evaluations so far, best speedup so far) after every evaluated candidate
    curve: list[tuple[int, float]] = field(default_factory=list)
    # every distinct evaluated kernel, in the order counted: what was tried and what it gave
    trials: list[dict[str, object]] = field(default_factory=list)
    wall_s: float = 0.0
    checked_size: str | None = None  # where the baseline's outputs were checked
    timed_size: str | None = None  # and where its latency was timed
    memory_protocol: str = ""  # beam+memory: what its memory was learned from (protocol_words)

    def evaluations_to_reach(self, target: float) -> int | None:
        for count, best in self.curve:
            if best >= target - 1e-9:
                return count
        return None


def config_for(mode: str, args: argparse.Namespace) -> SearchConfig:
    budget = Budget(max_evaluations=args.evaluations)
    common = dict(
        seeds=args.seeds,
        budget=budget,
        hardware="trn1",
        evaluation_timeout_s=args.timeout,
        max_concurrent_evaluations=args.workers,
        max_concurrent_agent_calls=args.agent_calls,
        seed=args.seed,
    )
    if mode == "sampling":
        plans = max(1, args.evaluations // args.samples)
        return SearchConfig(
            beam_width=1,
            plans_per_kernel=plans,
            samples_per_plan=args.samples,
            iterations=1,
            memory_in_prompt=0,
            **common,
        )
    return SearchConfig(
        beam_width=args.beam,
        plans_per_kernel=args.plans,
        samples_per_plan=args.samples,
        iterations=args.iterations,
        memory_in_prompt=args.memory_in_prompt if mode == "beam+memory" else 0,
        **common,
    )


def creation_order(candidate: Candidate) -> int:
    return int(candidate.id.lstrip("c"))


def trial(candidate: Candidate, parent: Candidate | None, beam_rank: dict[str, int]) -> dict[str, object]:
    """What one evaluated kernel was and what it gave, for --trace and the JSON file."""
    assert candidate.plan is not None
    step = None
    if parent is not None and parent.latency_ms and candidate.latency_ms:
        step = parent.latency_ms / candidate.latency_ms
    return {
        "id": candidate.id,
        "iteration": candidate.iteration,
        "parent": candidate.parent_id,
        "parent_rank": beam_rank.get(candidate.parent_id or "", -1),
        "rewrite": candidate.plan.rewrite,
        "site": candidate.plan.site,
        "title": candidate.plan.title,
        "lessons": len(candidate.plan.lesson_ids),
        "status": str(candidate.status),
        "speedup": candidate.speedup,
        "step": step,
    }


async def run_task(
    name: str, mode: str, args: argparse.Namespace, backend: Backend, memory: Memory | None
) -> TaskResult:
    kernel, task = bench_task(name, args.size)
    if args.check_size is not None:
        task = task.model_copy(update={"check_size": args.check_size})
    result = TaskResult(task=name, mode=mode)
    started = time.monotonic()
    by_id: dict[str, Candidate] = {}
    evaluated: dict[str, Candidate] = {}
    # iteration -> {candidate id: place in the beam that iteration expanded}
    beams: dict[int, dict[str, int]] = {}
    async for event in run_search(
        kernel, task, offline_agents(seed=args.seed), backend, config_for(mode, args), memory=memory
    ):
        if isinstance(event, Started):
            base = event.baseline
            result.baseline_ms = base.latency_ms
            result.checked_size, result.timed_size = base.checked_size, base.timed_size
            result.peak_before = base.percent_of_peak
            by_id[base.id] = base
            beams[1] = {base.id: 0}
        elif isinstance(event, CandidateEvent):
            candidate = event.candidate
            by_id[candidate.id] = candidate
            # Backend evaluations only: not agent failures (they hold their parent's kernel).
            if candidate.status in ("pending", "agent_error") or candidate.plan is None:
                continue
            evaluated[candidate.id] = candidate
        elif isinstance(event, IterationEvent):
            beams[event.iteration + 1] = {cid: i for i, cid in enumerate(event.beam)}
        elif isinstance(event, Finished):
            result.reason = event.reason
            result.evaluations = event.evaluations
            if event.ranked:
                top = event.ranked[0].candidate
                result.best_ms = top.latency_ms
                result.peak_after = top.percent_of_peak
                result.speedup = top.speedup or 1.0
                result.best_plan = [p.title for p in top.rationale]
    # The curve counts distinct kernels in the order the search wrote them (candidate ids), not
    # the order their evaluations happened to finish in: with two evaluation workers the latter
    # depends on how long each simulation took, which is noise for this comparison.
    kernels = {kernel.normalized_hash()}
    best = 1.0
    for candidate in sorted(evaluated.values(), key=creation_order):
        digest = candidate.kernel.normalized_hash()
        if digest in kernels:
            continue
        kernels.add(digest)
        if candidate.status == "ok" and candidate.speedup is not None:
            best = max(best, candidate.speedup)
        result.curve.append((len(kernels) - 1, best))
        beam = beams.get(candidate.iteration, {})
        result.trials.append(trial(candidate, by_id.get(candidate.parent_id or ""), beam))
    result.wall_s = time.monotonic() - started
    return result


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def percent(value: float | None) -> str:
    return "   -  " if value is None else f"{100 * value:5.1f}%"


def print_mode_table(mode: str, rows: list[TaskResult]) -> None:
    sizes = sorted({f"checked at {r.checked_size}, timed at {r.timed_size}" for r in rows if r.timed_size})
    print(f"\n== {mode} (simulated trn1; {'; '.join(sizes) or 'sizes not recorded'}) ==")
    print(
        f"{'task':24} {'baseline ms':>12} {'best ms':>10} {'speedup':>8} {'peak before':>11} {'after':>7} {'evals':>6}"
    )
    for r in rows:
        base = f"{r.baseline_ms:12.4f}" if r.baseline_ms is not None else f"{'-':>12}"
        best = f"{r.best_ms:10.4f}" if r.best_ms is not None else f"{'-':>10}"
        print(
            f"{r.task:24} {base} {best} {r.speedup:7.3f}x {percent(r.peak_before):>11} {percent(r.peak_after):>7} {r.evaluations:6d}"
        )
    peaks_before = [r.peak_before for r in rows if r.peak_before]
    peaks_after = [r.peak_after for r in rows if r.peak_after]
    print(
        f"{'geomean':24} {'':12} {'':10} {geomean([r.speedup for r in rows]):7.3f}x "
        f"{percent(sum(peaks_before) / len(peaks_before) if peaks_before else None):>11} "
        f"{percent(sum(peaks_after) / len(peaks_after) if peaks_after else None):>7} "
        f"{sum(r.evaluations for r in rows):6d}   (peak: arithmetic mean)"
    )


def print_reach_table(results: dict[str, dict[str, TaskResult]]) -> None:
    """Evaluations each mode needed to first reach the speedup both beam runs reached."""
    if "beam+memory" not in results or "beam" not in results:
        return
    print("\n== evaluations to reach the common final speedup (min of the two beam runs) ==")
    protocols = sorted({r.memory_protocol for r in results["beam+memory"].values()})
    print(
        f"memory protocol: {'; '.join(p for p in protocols if p) or 'sequential (not recorded in this file)'}"
    )
    header = "".join(f"{m:>14}" for m in MODES if m in results)
    print(f"{'task':24} {'target':>8}{header}")
    totals = {m: 0 for m in results}
    reached = {m: 0 for m in results}
    counted = 0
    for name, with_memory in results["beam+memory"].items():
        without = results["beam"].get(name)
        if without is None:
            continue
        target = min(with_memory.speedup, without.speedup)
        if target <= 1.0 + 1e-9:
            continue
        cells = []
        reached_all = True
        for mode in MODES:
            if mode not in results or name not in results[mode]:
                continue
            needed = results[mode][name].evaluations_to_reach(target)
            cells.append(f"{needed if needed is not None else 'never':>14}")
            reached[mode] += needed is not None
            if mode in ("beam+memory", "beam"):
                reached_all &= needed is not None
                totals[mode] += needed or 0
            elif needed is not None:
                totals[mode] += needed
        counted += 1
        print(f"{name:24} {target:7.3f}x" + "".join(cells))
    if counted and totals["beam"]:
        saving = 1 - totals["beam+memory"] / totals["beam"]
        print(
            f"{'total (reached)':24} {'':8}"
            + "".join(f"{f'{totals[m]} ({reached[m]}/{counted})':>14}" for m in MODES if m in totals)
            + f"\nmemory saves {100 * saving:.1f}% of the evaluations needed (beam+memory vs beam)"
        )
        # The strict target counts a last 1.003x step as a different speedup; the same comparison
        # with speedups within NEAR of the target counted as reached says how much that matters.
        near = {m: 0 for m in ("beam+memory", "beam")}
        for name, with_memory in results["beam+memory"].items():
            without = results["beam"].get(name)
            target = min(with_memory.speedup, without.speedup) if without else 1.0
            if without is None or target <= 1.0 + 1e-9:
                continue
            for mode, row in (("beam+memory", with_memory), ("beam", without)):
                near[mode] += row.evaluations_to_reach(max(1.0 + 1e-9, target / (1 + NEAR))) or 0
        if near["beam"]:
            print(
                f"within {100 * NEAR:g}% of the target: {near['beam+memory']} vs {near['beam']} evaluations, "
                f"memory saves {100 * (1 - near['beam+memory'] / near['beam']):.1f}%"
            )


def load_results(paths: list[str]) -> dict[str, dict[str, TaskResult]]:
    """Results saved with --json (several runs can be merged, later files win per mode)."""
    results: dict[str, dict[str, TaskResult]] = {}
    for path in paths:
        for mode, rows in json.loads(Path(path).read_text()).items():
            results[mode] = {
                name: TaskResult(**{**row, "curve": [tuple(p) for p in row["curve"]]})
                for name, row in rows.items()
            }
    return results


def print_trace(results: dict[str, dict[str, TaskResult]]) -> None:
    """Every evaluated plan per task and mode, in the order counted: which paid off (step = the
    speedup over its parent), which were neutral, which failed."""
    for mode, rows in results.items():
        for row in rows.values():
            print(f"\n-- {row.task} [{mode}]: {row.speedup:.3f}x")
            for number, item in enumerate(row.trials, 1):
                step = item["step"]
                gain = f"{step:6.3f}x" if isinstance(step, float) else f"{item['status']:>7}"
                used = f" ({item['lessons']} lessons)" if item["lessons"] else ""
                print(
                    f"  {number:3d} it{item['iteration']} parent#{item['parent_rank']} {gain} "
                    f"{item['rewrite']}: {item['title']}{used}"
                )


def print_tables(results: dict[str, dict[str, TaskResult]], *, trace: bool = False) -> None:
    if trace:
        print_trace(results)
    for mode in MODES:
        if mode in results:
            print_mode_table(mode, list(results[mode].values()))
    print_reach_table(results)


def protocol_words(args: argparse.Namespace) -> str:
    if args.protocol == "sequential":
        return (
            "sequential -- beam+memory starts with an empty memory and learns from the earlier tasks "
            "in suite order and from its own earlier iterations"
        )
    source = f"the memory file {args.warmup_memory}" if args.warmup_memory else "the beam run above"
    return (
        f"leave-one-out -- beam+memory on each task starts from the lessons {source} recorded on the "
        "other tasks (never this one), then adds its own earlier iterations"
    )


def memory_without(source: Path, task: str, path: Path) -> Memory:
    """A fresh memory holding every experience of `source` except those learned on `task`."""
    memory = Memory(path)
    with Memory(source) as warm:
        for experience in warm.list(newest_first=False):
            if experience.task != task:
                memory.add(experience)
    return memory


async def main(args: argparse.Namespace) -> int:
    if args.from_json:
        results = load_results(args.from_json)
        # Partial runs (stopped, or one process per mode): compare the tasks every mode finished.
        common = set.intersection(*(set(rows) for rows in results.values())) if results else set()
        left_out = sorted(set().union(*(set(rows) for rows in results.values())) - common)
        if left_out:
            print(f"tasks not finished in every mode, left out of the tables: {', '.join(left_out)}")
        results = {m: {t: r for t, r in rows.items() if t in common} for m, rows in results.items()}
        print_tables(results, trace=args.trace)
        return 0
    tasks = [t.name for t in load_index()]
    if args.tasks:
        wanted = args.tasks.split(",")
        unknown = sorted(set(wanted) - set(tasks))
        if unknown:
            print(f"unknown tasks: {', '.join(unknown)}", file=sys.stderr)
            return 2
        tasks = [t for t in tasks if t in wanted]
    modes = args.modes.split(",") if args.modes else list(MODES)
    print(
        f"offline agents on {len(tasks)} NKIBench tasks, size={args.size}, budget={args.evaluations} evaluations "
        f"per task and mode, seeds={args.seeds}; beam {args.beam}x{args.plans} plans x{args.samples} samples, "
        f"{args.iterations} iterations"
    )
    results: dict[str, dict[str, TaskResult]] = {}
    backend: Backend = backend_for("simulator", max_workers=args.workers, ray=args.ray)
    if args.evaluation_store:
        backend = StoredEvaluations(backend, args.evaluation_store)

    def save() -> None:  # after every task: a long run that is stopped keeps what it measured
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {m: {t: asdict(r) for t, r in rows.items()} for m, rows in results.items()}, indent=1
                )
            )

    if args.protocol == "leave-one-out" and "beam+memory" in modes:
        if args.warmup_memory is None and "beam" not in modes:
            print(
                "--protocol leave-one-out learns from the beam run: add the beam mode or --warmup-memory",
                file=sys.stderr,
            )
            return 2
        # The beam run (no memory in the prompt) is the warm-up: it runs first and records lessons.
        modes = [m for m in modes if m != "beam+memory"]
        modes.insert(modes.index("beam") + 1 if "beam" in modes else 0, "beam+memory")
    if args.save_memory and Path(args.save_memory).exists():
        print(f"{args.save_memory} exists: --save-memory writes a new file", file=sys.stderr)
        return 2
    print(f"memory protocol: {protocol_words(args)}")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            recorded = Path(args.save_memory) if args.save_memory else Path(scratch) / "warmup.sqlite"
            warmup = Path(args.warmup_memory) if args.warmup_memory else recorded
            for mode in modes:
                shared: Memory | None = None
                if mode == "beam+memory" and args.protocol == "sequential":
                    shared = Memory(Path(scratch) / "memory.sqlite")
                elif mode == "beam" and (
                    args.save_memory or (args.protocol == "leave-one-out" and not args.warmup_memory)
                ):
                    # Lessons recorded, never shown (memory_in_prompt=0): the search is the same.
                    shared = Memory(recorded)
                results[mode] = {}
                for name in tasks:
                    memory = shared
                    if mode == "beam+memory" and args.protocol == "leave-one-out":
                        memory = memory_without(warmup, name, Path(scratch) / f"loo-{name}.sqlite")
                    row = await run_task(name, mode, args, backend, memory)
                    if mode == "beam+memory":
                        row.memory_protocol = protocol_words(args)
                    if memory is not None and memory is not shared:
                        memory.close()
                    results[mode][name] = row
                    print(
                        f"[{mode}] {name}: {row.speedup:.3f}x in {row.evaluations} evaluations "
                        f"({row.reason}, {row.wall_s:.0f}s) via {' -> '.join(row.best_plan) or 'baseline'}",
                        flush=True,
                    )
                    save()
                if shared is not None:
                    shared.close()
    finally:
        await backend.aclose()
    print_tables(results, trace=args.trace)
    save()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", choices=("small", "full"), default="small", help="the size kernels are timed at"
    )
    parser.add_argument(
        "--check-size", choices=("small", "full"), help="the size outputs are checked at (default: small)"
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="evaluate as Ray tasks: on a private local cluster, or on the cluster at ADDRESS",
    )
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    parser.add_argument("--modes", help=f"comma-separated subset of {', '.join(MODES)}")
    parser.add_argument("--evaluations", type=int, default=24, help="backend evaluations per task and mode")
    parser.add_argument("--beam", type=int, default=3)
    parser.add_argument("--plans", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=2, help="random inputs per correctness check")
    parser.add_argument("--workers", type=int, default=2, help="concurrent evaluations")
    parser.add_argument(
        "--agent-calls",
        type=int,
        default=1,
        help="concurrent agent calls (1: candidates are written, and so evaluated, in the planners' "
        "order of preference; more only shuffles that order, the offline agents are CPU-bound)",
    )
    parser.add_argument(
        "--memory-in-prompt",
        type=int,
        default=SearchConfig.model_fields["memory_in_prompt"].default,
        help="lessons shown to the agents in beam+memory (default: the search's own default)",
    )
    parser.add_argument("--trace", action="store_true", help="print every evaluated plan per task")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--protocol",
        choices=("sequential", "leave-one-out"),
        default="sequential",
        help="what beam+memory learns from: the earlier tasks in suite order (sequential), or the "
        "lessons the beam run recorded on the other tasks (leave-one-out; runs beam first)",
    )
    parser.add_argument(
        "--save-memory", metavar="FILE", help="keep the lessons the beam run records in this file"
    )
    parser.add_argument(
        "--warmup-memory",
        metavar="FILE",
        help="leave-one-out from this file (one written by --save-memory) instead of this run's beam mode",
    )
    parser.add_argument("--json", help="also write every result (with curves) to this file")
    parser.add_argument(
        "--evaluation-store",
        metavar="FILE",
        help="answer kernels already judged in an earlier run from this SQLite file (the figures are "
        "the same, counted as distinct kernels; only the wall time changes: evaluation_store.py)",
    )
    parser.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="print the tables of saved --json results instead of running",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
