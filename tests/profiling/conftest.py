"""Fixtures for the profiling tests."""

from __future__ import annotations

import pytest

from accelopt.profiling.sandbox import Sandbox
from accelopt.profiling.worker_protocol import ResourceLimits


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(ResourceLimits(memory_bytes=1 << 30, cpu_seconds=30))
