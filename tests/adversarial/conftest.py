"""Fixtures for the adversarial suite: a backend and a sandbox whose job directories live in a
per-test folder, so "nothing persisted" can be checked without racing other test runs."""

from __future__ import annotations

import asyncio

import pytest

from accelopt.profiling.sandbox import Sandbox
from accelopt.profiling.simulator import SimulatorBackend
from accelopt.profiling.worker_protocol import ResourceLimits


@pytest.fixture
def jobs_dir(tmp_path):
    path = tmp_path / "jobs"
    path.mkdir()
    yield path
    assert list(path.iterdir()) == [], "a job directory outlived its run"


@pytest.fixture
def sandbox(jobs_dir) -> Sandbox:
    return Sandbox(ResourceLimits(memory_bytes=1 << 30, cpu_seconds=30), work_root=jobs_dir)


@pytest.fixture(scope="module")
def shared_backend(tmp_path_factory):
    """One backend per module: the baseline oracle runs once for all the module's candidates."""
    backend = SimulatorBackend(max_workers=2, work_root=str(tmp_path_factory.mktemp("jobs")))
    yield backend
    asyncio.run(backend.aclose())
    assert not backend.sandbox.live_pids
