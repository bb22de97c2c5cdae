"""DMA transposes are charged their own efficiencies (hardware/specs.py `dma_transpose_efficiency`,
`dma_hw_transpose_efficiency`, [ISA-DMAT]): the emulator records `nl.load_transpose2d` as a
`dma_load` and `nisa.dma_transpose` as a `dma_copy`, each with `is_transpose`, and the lowering
must recognise them by that flag rather than by opcode."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accelopt.hardware.specs import TRN1, TRN2, HardwareSpec
from accelopt.nki.runtime import load_kernel, run_kernel
from accelopt.profiling.metrics import profile_trace

LEGACY = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def plain(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, 0:128], value=nl.load(a[0:128, 0:128]))
    return out


@nki.jit
def transposed(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, 0:128], value=nl.load_transpose2d(a[0:128, 0:128]))
    return out
"""

CURRENT = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def plain(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:128])
    nisa.dma_copy(dst=out[0:128, 0:128], src=t)
    return out


@nki.jit
def transposed(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=a[0:128, 0:128])
    nisa.dma_copy(dst=out[0:128, 0:128], src=t)
    return out


@nki.jit
def sbuf_copy(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    u = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:128])
    nisa.dma_copy(dst=u, src=t)
    nisa.dma_copy(dst=out[0:128, 0:128], src=u)
    return out


@nki.jit
def sbuf_transposed(a):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    u = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:128])
    nisa.dma_transpose(dst=u, src=t)
    nisa.dma_copy(dst=out[0:128, 0:128], src=u)
    return out
"""


def _first_load_busy(source: str, kernel: str, a: np.ndarray, hw: HardwareSpec) -> float:
    """DMA-engine seconds of the kernel's first transfer (the load, plain or transposed)."""
    fn = load_kernel(source, kernel, f"{kernel}.py")
    run = run_kernel(fn, [a], numerics=False, kernel_name=kernel)
    _, timeline = profile_trace(run.trace, hw.name, source_text=source)
    load = next(op for op in timeline.ops if op.engine == "dma")
    return load.busy


@pytest.mark.parametrize("hw", [TRN1, TRN2], ids=["trn1", "trn2"])
def test_load_transpose2d_streams_at_the_element_granular_rate(hw: HardwareSpec) -> None:
    a = np.zeros((128, 128), np.float32)
    plain = _first_load_busy(LEGACY, "plain", a, hw)
    transposed = _first_load_busy(LEGACY, "transposed", a, hw)
    assert transposed / plain == pytest.approx(1 / hw.dma_transpose_efficiency, rel=1e-6)


def test_dma_transpose_of_two_byte_elements_uses_the_dma_engines_transpose_on_trn2() -> None:
    a = np.zeros((128, 128), ml_dtypes.bfloat16)
    plain = _first_load_busy(CURRENT, "plain", a, TRN2)
    transposed = _first_load_busy(CURRENT, "transposed", a, TRN2)
    assert transposed / plain == pytest.approx(1 / TRN2.dma_hw_transpose_efficiency, rel=1e-6)


def test_dma_transpose_of_four_byte_elements_is_element_granular() -> None:
    """[ISA-DMAT]: the DMA engines' transpose takes 2-byte elements only."""
    a = np.zeros((128, 128), np.float32)
    plain = _first_load_busy(CURRENT, "plain", a, TRN2)
    transposed = _first_load_busy(CURRENT, "transposed", a, TRN2)
    assert transposed / plain == pytest.approx(1 / TRN2.dma_transpose_efficiency, rel=1e-6)


def _nth_dma_busy(source: str, kernel: str, a: np.ndarray, hw: HardwareSpec, n: int) -> float:
    fn = load_kernel(source, kernel, f"{kernel}.py")
    run = run_kernel(fn, [a], numerics=False, kernel_name=kernel)
    _, timeline = profile_trace(run.trace, hw.name, source_text=source)
    return [op for op in timeline.ops if op.engine == "dma"][n].busy


def test_sbuf_to_sbuf_dma_transpose_streams_at_half_a_copys_rate_on_trn2() -> None:
    """[TRN2-ARCH]: an SBUF2SBUF DMA transpose reaches up to 50% of the DMA throughput, an
    HBM2SBUF one up to 90%: the second transfer (SBUF -> SBUF) is charged 2x a plain copy."""
    a = np.zeros((128, 128), ml_dtypes.bfloat16)
    plain = _nth_dma_busy(CURRENT, "sbuf_copy", a, TRN2, 1)
    transposed = _nth_dma_busy(CURRENT, "sbuf_transposed", a, TRN2, 1)
    assert TRN2.dma_sbuf_transpose_efficiency == pytest.approx(0.5)
    assert transposed / plain == pytest.approx(1 / TRN2.dma_sbuf_transpose_efficiency, rel=1e-6)
    from_hbm = _first_load_busy(CURRENT, "transposed", a, TRN2)
    assert transposed > from_hbm  # the SBUF2SBUF transpose is the slower of the two
