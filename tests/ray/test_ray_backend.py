"""Evaluations as Ray tasks, against a real local Ray cluster (loopback only) started here: a
search on the cluster equals the same search run locally, a worker killed mid-evaluation is
retried once and then recorded, cancelling kills the remote task and leaves nothing running."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from search_fixtures import collect, finished_of, small_config
from silu_variants import BASELINE, silu

from accelopt.agents.factory import make_agents
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.backends import get_backend
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.ray_backend import RayBackend, RaySettings, RayUnavailable
from accelopt.profiling.task import task_for_kernel
from accelopt.search.beam import run_search

pytestmark = pytest.mark.asyncio(loop_scope="module")

OPTIONS = EvaluationOptions(seeds=2, timeout_s=120)


def processes(match: Callable[[str], bool]) -> list[int]:
    """Live processes descended from this one whose command line matches (a Ray worker's is its
    task's name). Only descendants: the cluster the fixture starts is this process's children
    (its raylet, whose children are its workers), and another Ray run on the machine is not ours
    to look at, let alone kill."""
    commands: dict[int, str] = {}
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            commands[int(entry.name)] = cmdline
            parents[int(entry.name)] = int(fields[1])
    ours = os.getpid()

    def descends(pid: int) -> bool:
        seen: set[int] = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == ours:
                return True
        return False

    return [pid for pid, cmd in commands.items() if match(cmd) and descends(pid)]


def running_evaluations() -> list[int]:
    """This module's cluster's workers running an evaluation (`processes`: ours only)."""
    return processes(lambda cmd: cmd.startswith("ray::evaluate_on_worker"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RayBackend]:
    work_root = tmp_path_factory.mktemp("ray-jobs")
    backend = RayBackend(
        "simulator", settings=RaySettings(num_cpus=2), max_workers=2, work_root=str(work_root)
    )
    yield backend
    await backend.aclose()


def sandbox_workers(backend: RayBackend) -> list[int]:
    """Sandbox workers started for this module's evaluations (their job folders are ours)."""
    root = str(backend.backend_options["work_root"])
    return processes(lambda cmd: "accelopt.profiling.worker" in cmd and root in cmd)


def silu_task() -> tuple[KernelSource, object]:
    kernel = KernelSource(text=BASELINE, name="silu_kernel", path="silu_test.py")
    return kernel, task_for_kernel(kernel)


# The same SiLU in 128 x 1 tiles: 1024 tiles make an evaluation last seconds, so the killer below
# finds the retried worker while it still runs (with the 8-tile baseline a loaded machine could
# let the retry finish first and the kill land on a worker that had already answered).
SLOW = KernelSource(text=silu(1, directive=True), name="silu_kernel", path="silu_slow.py")


async def test_a_search_on_the_cluster_equals_the_local_search(cluster: RayBackend):
    kernel, task = silu_task()
    # A narrow beam: of two equally fast kernels, the ranking keeps the one with the smaller
    # source hash, whichever evaluation came back first (locally or on the cluster), so both
    # runs grow the same children.
    config = small_config(iterations=2, beam_width=2, plans_per_kernel=2, samples_per_plan=1)
    local_backend = get_backend("simulator", max_workers=2)
    try:
        local = await collect(
            run_search(kernel, task, make_agents(kind="offline", seed=3), local_backend, config)
        )
    finally:
        await local_backend.aclose()
    remote = await collect(run_search(kernel, task, make_agents(kind="offline", seed=3), cluster, config))

    def outcome(events: list) -> list[tuple[object, ...]]:
        # What was found, how fast, and in which order (ties broken by the source's hash).
        return [
            (r.candidate.kernel.normalized_hash(), r.candidate.status, r.candidate.latency_ms)
            for r in finished_of(events).ranked
        ]

    assert finished_of(remote).reason == finished_of(local).reason == "completed"
    assert len(outcome(remote)) > 1  # the search found candidates, not only the baseline
    assert outcome(remote) == outcome(local)
    assert finished_of(remote).evaluations == finished_of(local).evaluations


async def kill_workers(times: int, stop: asyncio.Event) -> list[int]:
    """SIGKILL the Ray worker running an evaluation as soon as it appears, `times` times (a
    worker of the fixture's cluster: `running_evaluations` sees no other)."""
    killed: list[int] = []
    while len(killed) < times and not stop.is_set():
        for pid in running_evaluations():
            if pid not in killed and len(killed) < times:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        await asyncio.sleep(0.02)
    return killed


async def test_a_worker_lost_mid_evaluation_is_retried_once(cluster: RayBackend):
    stop = asyncio.Event()
    killer = asyncio.create_task(kill_workers(1, stop))
    before = cluster.lost_workers
    evaluation = await cluster.evaluate(SLOW, task_for_kernel(SLOW), OPTIONS)  # type: ignore[arg-type]
    stop.set()
    assert len(await killer) == 1
    assert evaluation.status == "ok", evaluation.message
    assert "Ray worker was lost" in evaluation.message and "retried" in evaluation.message
    assert cluster.lost_workers == before + 1


async def test_a_worker_lost_twice_is_recorded_on_the_candidate(cluster: RayBackend):
    stop = asyncio.Event()
    killer = asyncio.create_task(kill_workers(2, stop))
    evaluation = await cluster.evaluate(SLOW, task_for_kernel(SLOW), OPTIONS)  # type: ignore[arg-type]
    stop.set()
    assert len(await killer) == 2
    assert evaluation.status == "runtime_error"
    assert "lost 2 times" in evaluation.message


async def test_cancelling_an_evaluation_kills_its_task_and_leaves_nothing_running(cluster: RayBackend):
    # the slow kernel, so that the cancel lands mid-evaluation
    pending = asyncio.create_task(cluster.evaluate(SLOW, task_for_kernel(SLOW), OPTIONS))  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while not running_evaluations() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert running_evaluations(), "the evaluation never started on the cluster"
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    deadline = time.monotonic() + 20
    while (running_evaluations() or sandbox_workers(cluster)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert running_evaluations() == [] and sandbox_workers(cluster) == []


@pytest.mark.contract
async def test_hardware_evaluations_need_a_node_with_neuron_cores(cluster: RayBackend):
    """Contract test of the scheduling rule (no Trainium here): the neuron backend's tasks ask
    for the `neuron_cores` resource, and a cluster without it is refused with the way out."""
    kernel, task = silu_task()
    neuron = RayBackend("neuron", settings=RaySettings())
    evaluation = await neuron.evaluate(kernel, task, OPTIONS)  # type: ignore[arg-type]
    assert evaluation.status == "runtime_error"
    assert "neuron_cores" in evaluation.message and "ray start --resources" in evaluation.message
    with pytest.raises(RayUnavailable):
        neuron._start()
