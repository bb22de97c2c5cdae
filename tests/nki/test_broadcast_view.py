"""NkiTensor.broadcast(dim, size): a size-1 dimension read `size` times without a copy, as an
HBM source of a DMA or an on-chip free dimension; the partition dimension of an on-chip tile
and a dimension that is not size 1 are refused at the kernel line. Also the nki.* tile-size
names kernels size their tiles with."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError


def test_an_hbm_row_broadcast_over_partitions_and_a_free_axis_broadcast_on_chip(nki_kernel, rng):
    k = nki_kernel(
        """
        @nki.jit
        def k(w, col):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            out2 = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            rows = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=rows, src=w.broadcast(0, 64))
            nisa.dma_copy(dst=out, src=rows)
            c = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=c, src=col)
            wide = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=wide, src=c.broadcast(1, 8))
            nisa.dma_copy(dst=out2, src=wide)
            return out, out2
        """
    )
    w = rng.standard_normal((1, 32)).astype(np.float32)
    col = rng.standard_normal((64, 1)).astype(np.float32)
    out, out2 = k.run("k", w, col).outputs
    np.testing.assert_array_equal(out, np.broadcast_to(w, (64, 32)))
    np.testing.assert_array_equal(out2, np.broadcast_to(col, (64, 8)))


@pytest.mark.parametrize(
    ("call", "reason"),
    [("w.broadcast(1, 4)", "has size 32"), ("t.broadcast(0, 64)", "partition dimension")],
)
def test_broadcasts_the_hardware_cannot_do_are_refused_at_their_line(nki_kernel, call, reason):
    k = nki_kernel(
        f"""
        @nki.jit
        def k(w):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=w)
            v = {call}  # here
            nisa.dma_copy(dst=out, src=v)
            return out
        """
    )
    with pytest.raises(NkiError, match=reason) as error:
        k.run("k", np.ones((1, 32), np.float32))
    assert error.value.line == k.line_of("# here")


def test_tile_size_has_the_nki_07_names(nki_kernel):
    k = nki_kernel(
        """
        @nki.jit
        def k(x):
            sizes = (nl.tile_size.psum_bank_fmax, nl.tile_size.psum_num_banks, nl.tile_size.sbuf_fmax_bytes)
            assert sizes == (512, 8, nl.tile_size.total_available_sbuf_size)
            assert nl.tile_size.sbuf_fmax * 4 == nl.tile_size.sbuf_fmax_bytes
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=out, src=t)
            return out
        """
    )
    (out,) = k.run("k", np.ones((4, 4), np.float32)).outputs
    assert out.shape == (4, 4)
