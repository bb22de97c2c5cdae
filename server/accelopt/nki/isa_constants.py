"""``neuronxcc.nki.isa.constants`` (also ``nki.isa.constants``): the instruction-option enums
under the module name the SDK's own examples import them from (``from
neuronxcc.nki.isa.constants import dge_mode`` in its dma_transpose test). The same classes as
``nisa.dge_mode`` & co., so either spelling passes the same value."""

from __future__ import annotations

from accelopt.nki.isa import dge_mode, dma_engine, engine, matmul_perf_mode, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "oob_mode", "reduce_cmd"]
