"""A mask that couples axes (a padded pooling window: ``stride*i + k - pad >= 0``) excuses the
out-of-range indices it deselects, element by element; an index it selects is still refused."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError

POOL = """
def pool(x):
    c, h, w = x.shape
    k, s, pad = 3, 2, 1
    ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    out = nl.ndarray((c, ho, wo), dtype=x.dtype, buffer=nl.shared_hbm)
    i0 = nl.arange(c)[:, None, None, None, None]
    i1 = nl.arange(ho)[None, :, None, None, None]
    i2 = nl.arange(wo)[None, None, :, None, None]
    i3 = nl.arange(k)[None, None, None, :, None]
    i4 = nl.arange(k)[None, None, None, None, :]
    t = nl.load(x)
    rows = s * i1 - pad + i3
    cols = s * i2 - pad + i4
    inside = (rows >= 0) & (cols >= 0) & (rows < h) & (cols < LIMIT)
    best = nl.max(t[i0, rows, cols], axis=[3, 4], mask=inside)  # pool here
    nl.store(out, value=best)
    return out
"""


def reference(x: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    c, h, w = x.shape
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    out = np.empty((c, ho, wo), dtype=x.dtype)
    for i in range(ho):
        for j in range(wo):
            out[:, i, j] = padded[:, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max(axis=(1, 2))
    return out


def test_a_padded_window_reads_only_the_elements_its_mask_selects(kernel, rng):
    k = kernel(POOL.replace("LIMIT", "w"))
    x = rng.standard_normal((8, 9, 10)).astype(np.float32)
    (out,) = k.run("pool", x).outputs
    np.testing.assert_array_equal(out, reference(x))


def test_a_selected_element_outside_the_tensor_is_still_refused_at_its_line(kernel, rng):
    k = kernel(POOL.replace("LIMIT", "w").replace("(cols >= 0)", "(cols >= -1)"))  # selects column -1
    with pytest.raises(NkiError, match="in elements the mask selects") as error:
        k.run("pool", rng.standard_normal((8, 9, 10)).astype(np.float32))
    assert error.value.code == "err_tensor_access_out_of_bound" and error.value.line == k.line_of("pool here")
