"""`psum += nisa.nc_matmul(a, b)` in a kernel written with `import nki` is refused at its line
with the nki.* spelling (dst first; the real tracer fails on the missing `moving`)."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError


def test_the_legacy_returning_matmul_is_refused_with_the_nki_spelling(nki_kernel):
    k = nki_kernel(
        """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a)
            bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=bt, src=b)
            acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
            acc += nisa.nc_matmul(at, bt)  # legacy call
            res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
            return out
        """
    )
    with pytest.raises(NkiError, match=r"nisa.nc_matmul\(dst=psum_tile") as error:
        k.run("k", np.ones((128, 128), np.float32), np.ones((128, 64), np.float32))
    assert error.value.code == "err_invalid_argument" and error.value.line == k.line_of("legacy call")


def test_the_nki_form_with_three_positional_tiles_still_runs(nki_kernel, rng):
    k = nki_kernel(
        """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a)
            bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=bt, src=b)
            acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(acc, at, bt)
            res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
            return out
        """
    )
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    (out,) = k.run("k", a, b).outputs
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)
