"""A tensor kept block by block (blockstore.py) reads and writes like the whole array, and
refuses loudly what it cannot do (the re-run then rejects the evaluation)."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.blockstore import BlockStore


def test_blocks_read_and_write_like_the_whole_array_and_start_as_nan():
    whole = np.full((2, 3, 4, 5), np.nan, np.float32)
    store = BlockStore(whole.shape, np.dtype(np.float32), None, 2, tid=7)
    values = np.arange(20, dtype=np.float32).reshape(4, 5)
    for target in (whole, store):
        target[(1, 2, slice(0, 4, 1), slice(0, 5, 1))] = values  # a whole block
        target[(0, 1, slice(1, 3, 1), slice(0, 5, 2))] = -1.0  # part of another
    np.testing.assert_array_equal(store[(0, 1, slice(0, 4, 1), slice(0, 5, 1))], whole[0, 1])
    np.testing.assert_array_equal(store[(1, 2, slice(0, 4, 1), slice(0, 5, 1))], whole[1, 2])
    grids = tuple(
        np.broadcast_to(g, (4, 5)) for g in (np.array([[1]]), np.array([[2]]), np.arange(4)[:, None], np.arange(5)[None, :])
    )
    np.testing.assert_array_equal(store[grids], whole[grids])  # fancy (masked) indices
    assert store.held == 2  # the blocks never touched take no memory


def test_an_access_spanning_blocks_or_a_released_block_is_refused():
    store = BlockStore((2, 3, 4), np.dtype(np.float32), 0.0, 1, tid=3)
    with pytest.raises(TypeError, match="spans several of its blocks"):
        store[(np.array([[[0]], [[1]]]), np.arange(3)[None, :, None], np.arange(4)[None, None, :])]
    store[(1, slice(0, 3, 1), slice(0, 4, 1))] = 1.0
    store.release((1,))
    with pytest.raises(RuntimeError, match="used after its last use"):
        store[(1, slice(0, 3, 1), slice(0, 4, 1))]
    with pytest.raises(RuntimeError, match="used after its last use"):
        store[(1, slice(0, 3, 1), slice(0, 4, 1))] = 2.0
