"""Choosing a profiling backend by name."""

from __future__ import annotations

from typing import Any

from accelopt.profiling.backend import Backend

BACKENDS = ("simulator", "neuron")


def get_backend(name: str = "simulator", **options: Any) -> Backend:
    """A backend instance: `simulator` (always available) or `neuron` (a Trainium host with the
    Neuron SDK; imported only when asked for, so its absence costs nothing here)."""
    if name == "simulator":
        from accelopt.profiling.simulator import SimulatorBackend

        return SimulatorBackend(**options)
    if name == "neuron":
        from accelopt.profiling.neuron import NeuronBackend

        return NeuronBackend(**options)
    raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
