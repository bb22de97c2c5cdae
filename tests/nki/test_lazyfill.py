"""A declared tensor with block dimensions is NaN-filled block by block when first touched
(lazyfill.py): whatever a kernel reads of it is what it read when the whole tensor was filled at
allocation, so memory it never wrote still reads as NaN."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki import lazyfill, tensor

BLOCKS = """
@nki.jit
def blocks(x):
    out = nl.ndarray((4 * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = nl.ndarray((4, par_dim(128), 512), dtype=nl.float32)  # 1 MiB: filled lazily
    i_p, i_f, i_h = nl.arange(128)[:, None], nl.arange(512)[None, :], nl.arange(256)[None, :]
    tiles[0, i_p, i_f] = nl.load(x)  # a whole block
    tiles[1, i_p, i_h] = nl.load(x[i_p, i_h])  # half of one
    tiles[3, i_p, i_f] += nl.load(x)  # accumulated into memory never written
    for b in nl.static_range(4):  # block 2 is never written
        nl.store(out[b * 128 + i_p, i_f], value=tiles[b, i_p, i_f])
    return out
"""

RESHAPED = """
@nki.jit
def reshaped(x):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = nl.ndarray((4, par_dim(128), 512), dtype=nl.float32)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(512)[None, :]
    tiles[0, i_p, i_f] = nl.load(x)
    flat = tiles.reshape((2, par_dim(128), 1024))  # the same memory: block 1 of it never written
    nl.store(out, value=flat[0, i_p, 512 + i_f])
    return out
"""


def _runs(kernel, source: str, name: str, x: np.ndarray, monkeypatch) -> tuple[np.ndarray, np.ndarray, int]:
    made: list[lazyfill.PendingFill] = []

    class Counted(lazyfill.PendingFill):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(tensor, "PendingFill", Counted)
    lazy = kernel(source).run(name, x).outputs[0]
    with monkeypatch.context() as eager:
        eager.setattr(tensor, "LAZY_MIN_BYTES", 1 << 62)  # every tensor filled at allocation
        filled = kernel(source).run(name, x).outputs[0]
    return lazy, filled, len(made)


def test_blocks_never_written_read_as_nan_as_with_the_whole_fill(kernel, monkeypatch):
    x = np.random.default_rng(1).standard_normal((128, 512), dtype=np.float32)
    lazy, filled, made = _runs(kernel, BLOCKS, "blocks", x, monkeypatch)
    assert made == 1  # the tiles were filled block by block
    np.testing.assert_array_equal(lazy, filled)  # NaN where NaN, values where values
    np.testing.assert_array_equal(lazy[:128], x)
    np.testing.assert_array_equal(lazy[128:256, :256], x[:, :256])
    assert np.isnan(lazy[128:256, 256:]).all()  # the unwritten half of a block written in part
    assert np.isnan(lazy[256:]).all()  # a block never written, and one accumulated into


def test_a_reshape_of_a_tensor_filled_lazily_sees_nan_where_nothing_was_written(kernel, monkeypatch):
    x = np.random.default_rng(2).standard_normal((128, 512), dtype=np.float32)
    lazy, filled, made = _runs(kernel, RESHAPED, "reshaped", x, monkeypatch)
    assert made == 1
    np.testing.assert_array_equal(lazy, filled)
    assert np.isnan(lazy).any() and not np.isnan(lazy).all()  # block 0's values, and NaN


@pytest.mark.parametrize(
    "index",
    [
        (1, slice(0, 2, 1), slice(0, 3, 1)),  # a whole block: stored without a fill
        (slice(0, 3, 2), slice(0, 2, 1), slice(1, 3, 1)),  # every other block, in part
        (np.array([[2], [0]]), np.array([[0], [1]]), np.array([[1, 2]])),  # fancy
        (slice(None, None, -1), slice(0, 1, 1), slice(0, 1, 1)),  # reversed
    ],
)
def test_a_store_then_a_read_see_what_a_filled_array_sees(index):
    filled = np.full((3, 2, 3), np.nan, np.float32)
    data = np.empty((3, 2, 3), np.float32)
    pending = lazyfill.PendingFill(data, 1, np.nan)
    whole = pending.before_store(index, plain=True)
    data[index] = filled[index] = 7.0
    if whole is not None:
        pending.stored(whole)
    assert (whole is not None) == (index[0].__class__ is int)
    pending.before_read((slice(0, 3, 1), slice(0, 2, 1), slice(0, 3, 1)))
    assert pending.left == 0
    np.testing.assert_array_equal(data, filled)
