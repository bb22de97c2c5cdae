"""nisa.local_gather: each 16-partition GpSimd group reads its index rows partition-first and
every partition of the group takes `num_elem_per_idx` contiguous elements at each offset."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError


def _expected(src: np.ndarray, index: np.ndarray, per_index: int, valid: int) -> np.ndarray:
    p = src.shape[0]
    flat = src.reshape(p, -1)
    out = np.empty((p, valid, per_index), np.float32)
    for g in range(0, p, 16):
        offsets = index[g : g + 16].T.reshape(-1)[:valid]  # partition-first
        for j, o in enumerate(offsets):
            out[g : g + 16, j] = flat[g : g + 16, o : o + per_index]
    return out


def test_legacy_form_returns_the_gathered_tile_per_group(kernel, rng):
    k = kernel(
        """
        def k(src, index):
            out = nl.ndarray((32, 2, 16, 2), dtype=src.dtype, buffer=nl.shared_hbm)
            s = nl.load(src)
            i = nl.load(index)
            g = nisa.local_gather(s, i, 2)
            nl.store(out, g)
            return out
        """
    )
    src = rng.standard_normal((32, 40)).astype(np.float32)
    # different offsets in the two groups, so a gather across groups would show
    index = rng.integers(0, 39, size=(32, 2)).astype(np.uint16)
    (out,) = k.run("k", src, index).outputs
    np.testing.assert_array_equal(out.reshape(32, 32, 2), _expected(src, index, 2, 32))


def test_nki_form_writes_dst_with_fewer_valid_indices(nki_kernel, rng):
    k = nki_kernel(
        """
        @nki.jit
        def k(src, index):
            out = nl.ndarray((16, 5), dtype=src.dtype, buffer=nl.shared_hbm)
            s = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=src)
            i = nl.ndarray(index.shape, dtype=index.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=i, src=index)
            g = nl.ndarray((16, 5), dtype=src.dtype, buffer=nl.sbuf)
            nisa.local_gather(g, s, i, num_valid_indices=5)
            nisa.dma_copy(dst=out, src=g)
            return out
        """
    )
    src = rng.standard_normal((16, 12)).astype(np.float32)
    index = rng.integers(0, 12, size=(16, 1)).astype(np.uint16)
    (out,) = k.run("k", src, index).outputs
    np.testing.assert_array_equal(out, _expected(src, index, 1, 5).reshape(16, 5))


def test_an_offset_past_the_partition_is_refused_at_its_line(kernel):
    k = kernel(
        """
        def k(src, index):
            out = nl.ndarray((16, 1, 16, 4), dtype=src.dtype, buffer=nl.shared_hbm)
            g = nisa.local_gather(nl.load(src), nl.load(index), 4)  # gather here
            nl.store(out, g)
            return out
        """
    )
    index = np.zeros((16, 1), np.uint16)
    index[3] = 6  # 6 + 4 elements > 8
    with pytest.raises(NkiError, match="offset 6") as error:
        k.run("k", np.ones((16, 8), np.float32), index)
    assert error.value.code == "err_tensor_access_out_of_bound" and error.value.line == k.line_of(
        "gather here"
    )
