"""The sandboxed worker process: environment, limits, timeouts, crashes, cleanup.

These run real worker processes with reference-module jobs (no emulator needed), calling the
sandbox directly so that each layer is tested on its own, without the static policy check.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import numpy as np

from accelopt.profiling.sandbox import Sandbox, network_isolation_available
from accelopt.profiling.worker_protocol import ResourceLimits, WorkerJob

from .helpers import REFERENCE_BASE, process_gone, reference_job, worker_pid


def test_reference_job_round_trips_arrays(sandbox):
    outcome = sandbox.run_sync(sandbox.prepare(reference_job(seeds=[3, 4])), 30)
    assert outcome.kind == "finished" and outcome.result is not None and outcome.result.failure is None
    assert len(outcome.result.runs) == 2
    (x,) = outcome.group(1, "inputs")
    (y,) = outcome.group(1, "outputs")
    assert x.dtype == np.float32 and np.array_equal(y, x * 2)


def test_worker_environment_is_built_from_nothing(sandbox, monkeypatch):
    monkeypatch.setenv("ACCELOPT_TEST_API_KEY", "sk-test-do-not-leak")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    outcome = sandbox.run_sync(
        sandbox.prepare(
            WorkerJob(mode="probe", policy="kernel", source="", source_path="<probe>"), timeout_s=4.5
        ),
        30,
    )
    assert outcome.result is not None and outcome.result.probe is not None
    probe = outcome.result.probe
    env = probe["environment"]
    assert "sk-test-do-not-leak" not in json.dumps(env)
    assert not any(k.upper().endswith(("PROXY", "KEY", "TOKEN", "SECRET", "PASSWORD")) for k in env)
    assert "PYTHONPATH" not in env and env["PYTHONHASHSEED"] == "0"
    flags = probe["interpreter_flags"]
    assert flags["no_user_site"] and flags["safe_path"] and flags["dont_write_bytecode"], flags
    assert not flags["hash_randomization"] and not probe["path_has_cwd"]
    assert env["HOME"] == probe["cwd"] and probe["cwd_entries"] == []
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    limits = probe["limits"]
    assert limits["RLIMIT_AS"] == 1 << 30 and limits["RLIMIT_CPU"] == 6  # the job's timeout, rounded up, + 1
    assert limits["RLIMIT_NPROC"] == 0 and limits["RLIMIT_CORE"] == 0 and limits["RLIMIT_NOFILE"] == 64
    if network_isolation_available():
        assert probe["network_interfaces"] == ["lo"]
    if sandbox.drop_privileges:
        assert probe["uid"] == 65534


def test_wall_clock_timeout_kills_the_process_group(sandbox):
    started = asyncio.run(_timed_out_pid(sandbox))
    assert started["kind"] == "timeout" and "timed out after 1 s" in started["message"]
    assert process_gone(started["pid"])


async def _timed_out_pid(sandbox: Sandbox) -> dict:
    files = sandbox.prepare(reference_job("while True:\n    pass\n"))
    task = asyncio.create_task(sandbox.run(files, 1.0))
    pid = await _first_pid(sandbox)
    outcome = await task
    return {"kind": outcome.kind, "message": outcome.message, "pid": pid}


async def _first_pid(sandbox: Sandbox) -> int:
    for _ in range(500):
        if sandbox.live_pids:
            return sandbox.live_pids[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the worker never started")


def test_cancelling_the_caller_kills_the_worker(sandbox):
    async def scenario() -> int:
        task = asyncio.create_task(sandbox.run(sandbox.prepare(reference_job("while True:\n    pass\n")), 60))
        pid = await _first_pid(sandbox)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return pid

    pid = asyncio.run(scenario())
    assert process_gone(pid) and not sandbox.live_pids


def test_aclose_kills_every_worker(sandbox):
    async def scenario() -> list[int]:
        tasks = [
            asyncio.create_task(sandbox.run(sandbox.prepare(reference_job("while True:\n    pass\n")), 60))
            for _ in range(2)
        ]
        for _ in range(500):
            if len(sandbox.live_pids) == 2:
                break
            await asyncio.sleep(0.01)
        pids = sandbox.live_pids
        await sandbox.aclose()
        outcomes = await asyncio.gather(*tasks)
        assert all(o.kind == "crashed" and "SIGKILL" in o.message for o in outcomes)
        return pids

    pids = asyncio.run(scenario())
    assert len(pids) == 2 and all(process_gone(p) for p in pids)


def test_segfault_is_a_crash_not_an_exception(sandbox):
    # Reading far outside an array through a forged view (possible only without the static policy).
    boom = "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2,), strides=(1 << 44,)).sum()\n"
    outcome = sandbox.run_sync(sandbox.prepare(reference_job(boom)), 30)
    assert outcome.kind == "crashed" and "segmentation fault" in outcome.message


def test_externally_killed_worker_is_reported(sandbox):
    async def scenario():
        task = asyncio.create_task(sandbox.run(sandbox.prepare(reference_job("while True:\n    pass\n")), 60))
        os.kill(worker_pid(await _first_pid(sandbox)), signal.SIGKILL)  # what the OOM killer does
        return await task

    outcome = asyncio.run(scenario())
    assert outcome.kind == "crashed" and "out of memory?" in outcome.message


def test_memory_limit_turns_a_memory_bomb_into_an_error(sandbox):
    outcome = sandbox.run_sync(sandbox.prepare(reference_job("hog = np.ones(1 << 31)\n")), 30)
    assert outcome.result is not None and outcome.result.failure is not None
    assert outcome.result.failure.kind == "runtime_error" and "MemoryError" in outcome.result.failure.message
    assert outcome.result.failure.line == len(REFERENCE_BASE.splitlines()) + 1


def test_cpu_limit_is_a_timeout():
    sandbox = Sandbox(ResourceLimits(cpu_seconds=1))
    outcome = sandbox.run_sync(sandbox.prepare(reference_job("while True:\n    pass\n")), 30)
    assert outcome.kind == "timeout" and "CPU time limit" in outcome.message


def test_malformed_results_are_rejected_by_the_parent(sandbox, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "status.json").write_text('{"runs": "not a list"}')
    assert sandbox._collect(tmp_path, 0, 0.0).kind == "crashed"
    # A pickled object array where numbers were promised is refused (allow_pickle=False).
    (tmp_path / "out" / "status.json").write_text(
        '{"runs": [{"groups": {"outputs": [{"name": "r0_ref_0", "dtype": "float32", "shape": [1]}]}}]}'
    )
    np.savez(tmp_path / "out" / "arrays.npz", r0_ref_0=np.array([object()], dtype=object))
    outcome = sandbox._collect(tmp_path, 0, 0.0)
    assert outcome.kind == "crashed" and "invalid" in outcome.message
