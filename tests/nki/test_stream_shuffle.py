"""nisa.nc_stream_shuffle: within each 32-partition quadrant, output partition i copies input
partition shuffle_mask[i] (255 keeps it), in both generations' argument orders."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError


def test_legacy_in_place_rotation_of_two_quadrants(kernel, rng):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            rotate = [(i + 1) % 32 for i in range(32)]
            nisa.nc_stream_shuffle(src=a, dst=a, shuffle_mask=rotate)
            nl.store(out, value=a)
            return out
        """
    )
    x = rng.standard_normal((64, 16)).astype(np.float32)
    (out,) = k.run("k", x).outputs
    expected = np.concatenate([np.roll(x[q * 32 : (q + 1) * 32], -1, axis=0) for q in range(2)])
    np.testing.assert_array_equal(out, expected)


def test_nki_form_broadcasts_one_partition_and_255_leaves_partitions_alone(nki_kernel, rng):
    k = nki_kernel(
        """
        @nki.jit
        def k(row, base):
            out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
            r = nl.ndarray(row.shape, dtype=row.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=r, src=row)
            b = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=b, src=base)
            nisa.nc_stream_shuffle(b, r, [0] * 16 + [255] * 16)
            nisa.dma_copy(dst=out, src=b)
            return out
        """
    )
    row = rng.standard_normal((1, 8)).astype(np.float32)
    base = rng.standard_normal((32, 8)).astype(np.float32)
    (out,) = k.run("k", row, base).outputs
    np.testing.assert_array_equal(out[:16], np.repeat(row, 16, axis=0))
    np.testing.assert_array_equal(out[16:], base[16:])


def test_a_mask_reading_past_the_source_is_refused_at_its_line(nki_kernel):
    k = nki_kernel(
        """
        @nki.jit
        def k(row, base):
            out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
            r = nl.ndarray(row.shape, dtype=row.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=r, src=row)
            b = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=b, src=r, shuffle_mask=list(range(32)))  # shuffle here
            nisa.dma_copy(dst=out, src=b)
            return out
        """
    )
    with pytest.raises(NkiError, match="copies src partition 1") as error:
        k.run("k", np.ones((1, 8), np.float32), np.ones((32, 8), np.float32))
    assert error.value.code == "err_tensor_access_out_of_bound" and error.value.line == k.line_of(
        "shuffle here"
    )
