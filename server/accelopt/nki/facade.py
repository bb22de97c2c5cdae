"""The top-level ``neuronxcc.nki`` / ``nki`` module as kernels see it under emulation: the
decorators (``jit``, ``baremetal``, ``trace``, ``benchmark``), ``simulate_kernel`` and the
``language`` / ``isa`` / ``typing`` submodules."""

from __future__ import annotations

from accelopt.nki import compiler, isa, language
from accelopt.nki import typing as typing
from accelopt.nki.runtime import Kernel, baremetal, benchmark, jit, profile, simulate, simulate_kernel
from accelopt.nki.typing import dtype, tensor
from accelopt.nki.unsupported import module_getattr as _module_getattr

__path__: list[str] = []  # lets `import neuronxcc.nki.language` resolve through sys.modules

trace = jit  # legacy spelling: `from neuronxcc.nki import trace`

# a listed NKI name this module does not define is refused NKI-style (unsupported.py)
__getattr__ = _module_getattr("nki")

__all__ = [
    "Kernel",
    "baremetal",
    "benchmark",
    "compiler",
    "dtype",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "tensor",
    "trace",
    "typing",
]
