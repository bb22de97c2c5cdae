"""Latency of `accelopt mcp` as a coding agent sees it, from the MCP SDK's real client over stdio.

    .venv/bin/python benchmarks/mcp_latency.py [--size full|small] [--runs 3] [--kernel silu.py]

Figures (wall-clock, client side, median over the runs; a fresh server per run):
  startup             spawning `accelopt mcp` until `initialize` has answered
  profile             one profile_kernel call (trace-only, check=false)
  first progress      from calling optimize_kernel to its first progress notification
  first candidate     from calling optimize_kernel until get_search (polled every 50 ms on the
                      same session while the search runs) lists a ranked candidate: a correct
                      kernel, different from the original, that the agent can ask for
  answer              from calling optimize_kernel to its result
  cancel -> stopped   from cancelling a second, longer search (after its first candidate) until
                      get_search reports it stopped
  call during search  answer time of those get_search polls (the search shares the server's
                      interpreter: its CPU work delays other calls)

Offline agents, the simulator backend, a scratch optimization memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "kernels_examples"


def _parameters(memory: Path, size: str) -> StdioServerParameters:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "accelopt", "mcp", "--size", size, "--memory", str(memory), "--agents", "offline"],
        env=env,
        cwd=str(REPO),
    )


def _search_arguments(kernel: Path, iterations: int) -> dict[str, Any]:
    return {
        "path": str(kernel),
        "iterations": iterations,
        "beam_width": 2,
        "plans_per_kernel": 4,
        "samples_per_plan": 1,
        "seeds": 2,
    }


async def _one_run(kernel: Path, size: str, iterations: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="accelopt-mcp-bench-") as scratch:
        spawned = time.perf_counter()
        async with stdio_client(_parameters(Path(scratch) / "memory.sqlite", size)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                figures["startup_s"] = time.perf_counter() - spawned

                started = time.perf_counter()
                profiled = await session.call_tool("profile_kernel", {"path": str(kernel), "check": False})
                assert not profiled.is_error, profiled.content
                figures["profile_s"] = time.perf_counter() - started

                first_progress: list[float] = []
                first_candidate: list[float] = []
                polls: list[float] = []
                finished = anyio.Event()

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    if not first_progress:
                        first_progress.append(time.perf_counter() - started)

                async def watch() -> None:
                    while not finished.is_set():
                        asked = time.perf_counter()
                        state = await session.call_tool("get_search", {})
                        polls.append(time.perf_counter() - asked)
                        if (
                            not first_candidate
                            and not state.is_error
                            and (state.structured_content or {}).get("candidates")
                        ):
                            first_candidate.append(time.perf_counter() - started)
                        await anyio.sleep(0.05)

                async with anyio.create_task_group() as group:
                    started = time.perf_counter()

                    async def optimize() -> None:
                        result = await session.call_tool(
                            "optimize_kernel", _search_arguments(kernel, iterations), progress_callback=on_progress
                        )
                        assert not result.is_error, result.content
                        figures["answer_s"] = time.perf_counter() - started
                        finished.set()

                    group.start_soon(optimize)
                    await anyio.sleep(0.01)  # let the call register its search before polling
                    group.start_soon(watch)
                if first_progress:
                    figures["first_progress_s"] = first_progress[0]
                if first_candidate:
                    figures["first_candidate_s"] = first_candidate[0]
                if polls:
                    figures["call_during_search_p50_s"] = statistics.median(polls)
                    figures["call_during_search_p95_s"] = sorted(polls)[int(0.95 * (len(polls) - 1))]

                figures.update(await _cancel_figure(session, kernel))
    return figures


async def _cancel_figure(session: ClientSession, kernel: Path) -> dict[str, float]:
    """Cancel a long search once a candidate has been evaluated; time until it has stopped."""
    evaluating = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if value > 0.05:
            evaluating.set()

    async with anyio.create_task_group() as group:

        async def optimize() -> None:
            await session.call_tool("optimize_kernel", _search_arguments(kernel, 16), progress_callback=on_progress)

        group.start_soon(optimize)
        await evaluating.wait()
        group.cancel_scope.cancel()
    cancelled = time.perf_counter()
    while True:
        state = await session.call_tool("get_search", {})
        if not (state.structured_content or {}).get("running", True):
            return {"cancel_to_stopped_s": time.perf_counter() - cancelled}
        await anyio.sleep(0.02)


async def _main(args: argparse.Namespace) -> None:
    kernel = EXAMPLES / args.kernel
    runs = [await _one_run(kernel, args.size, args.iterations) for _ in range(args.runs)]
    keys = sorted({key for run in runs for key in run})
    medians = {key: statistics.median(run[key] for run in runs if key in run) for key in keys}
    if args.json:
        print(json.dumps({"kernel": args.kernel, "size": args.size, "runs": runs, "median": medians}, indent=2))
        return
    print(f"AccelOpt MCP latency ({args.kernel}, {args.size} inputs, offline agents, {args.runs} run(s), median)")
    labels = {
        "startup_s": "startup (spawn -> initialized)",
        "profile_s": "profile_kernel (check=false)",
        "first_progress_s": "optimize -> first progress",
        "first_candidate_s": "optimize -> first candidate",
        "answer_s": f"optimize -> answer ({args.iterations} it.)",
        "cancel_to_stopped_s": "cancel -> search stopped",
        "call_during_search_p50_s": "get_search during a search, p50",
        "call_during_search_p95_s": "get_search during a search, p95",
    }
    for key, label in labels.items():
        if key in medians:
            print(f"  {label:<34} {medians[key] * 1e3:>9.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["full", "small"], default="full", help="input shapes")
    parser.add_argument("--kernel", default="silu.py", help="a file in kernels_examples/")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2, help="iterations of the timed search")
    parser.add_argument("--json", action="store_true", help="print every run's figures as JSON")
    anyio.run(_main, parser.parse_args())


if __name__ == "__main__":
    main()
