"""`tile == number` and `tile != number` are elementwise, as the other comparison operators."""

from __future__ import annotations

import numpy as np


def test_equality_with_a_number_compares_each_element(kernel):
    k = kernel(
        """
        def k(x):
            eq = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            ne = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(eq, value=(t == 3).astype(nl.float32))
            nl.store(ne, value=(t != np.int32(3)).astype(nl.float32))
            return eq, ne
        """
    )
    x = np.arange(8 * 6, dtype=np.int32).reshape(8, 6) % 5
    eq, ne = k.run("k", x).outputs
    np.testing.assert_array_equal(eq, (x == 3).astype(np.float32))
    np.testing.assert_array_equal(ne, (x != 3).astype(np.float32))
