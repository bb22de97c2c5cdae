"""The top-level ``neuronxcc.nki`` / ``nki`` module as kernels see it under emulation: the
decorators (``jit``, ``baremetal``, ``trace``, ``benchmark``), ``simulate_kernel`` and the
``language`` / ``isa`` / ``typing`` submodules."""

from __future__ import annotations

from accelopt.nki import compiler, isa, language
from accelopt.nki import typing as typing
from accelopt.nki.runtime import Kernel, baremetal, benchmark, jit, profile, simulate, simulate_kernel

__path__: list[str] = []  # lets `import neuronxcc.nki.language` resolve through sys.modules

trace = jit  # legacy spelling: `from neuronxcc.nki import trace`

__all__ = [
    "Kernel",
    "baremetal",
    "benchmark",
    "compiler",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "trace",
    "typing",
]
