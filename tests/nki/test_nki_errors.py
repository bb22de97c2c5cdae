"""Every compiler error code the emulator reproduces, reported at the kernel's own line."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki.errors import NkiError

X = np.zeros((8, 16), np.float32)

CASES = {
    "err_num_partition_exceed_arch_limit": (
        """
        def k(x):
            t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)  # HERE
            return x
        """,
        (X,),
    ),
    "err_unsupported_mixing_basic_advanced_tensor_indexing": (
        """
        def k(x):
            t = nl.load(x[nl.arange(8)[:, None], 0:16])  # HERE
            return x
        """,
        (X,),
    ),
    "err_1d_arange_not_supported": (
        """
        def k(x):
            i = nl.arange(8)
            t = nl.load(x[i, 0])  # HERE
            return x
        """,
        (X,),
    ),
    "err_unexpected_output_dependencies": (
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(4):
                t = nl.load(x)
                nl.store(out, value=t)  # HERE
            return out
        """,
        (X,),
    ),
    "err_local_variable_used_out_of_scope": (
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.sequential_range(2):
                t = nl.load(x)
            nl.store(out, value=t)  # HERE
            return out
        """,
        (X,),
    ),
    "err_tensor_access_out_of_bound": (
        """
        def k(x):
            t = nl.load(x[0:8, 8:24])  # HERE
            return x
        """,
        (X,),
    ),
    "err_size_of_dimension_exceed_arch_limit": (
        """
        def k(x):
            acc = nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)  # HERE
            return x
        """,
        (X,),
    ),
    "err_num_partition_mismatch": (
        """
        def k(x):
            a = nl.load(x)
            b = nl.load(x[0:4, :])
            c = nisa.nc_matmul(a, b)  # HERE
            return x
        """,
        (X,),
    ),
    "err_tensor_output_not_written_to": (
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)  # HERE
            t = nl.load(x)
            return out
        """,
        (X,),
    ),
}


@pytest.mark.parametrize("numerics", [True, False])
@pytest.mark.parametrize("code", sorted(CASES))
def test_error_code_and_kernel_line(kernel, code, numerics):
    body, inputs = CASES[code]
    k = kernel(body)
    with pytest.raises(NkiError) as info:
        k.run("k", *inputs, numerics=numerics)
    err = info.value
    assert err.code == code
    assert err.path == str(k.path)
    assert err.line == k.line_of("# HERE")
    assert str(err).startswith(f"{k.path}:{err.line}: {code}: ")
    assert "\n" not in err.message


MEMORY_CASES = {
    "matmul reads PSUM": """
        def k(x):
            a = nl.load(x)
            p = nisa.nc_transpose(a)
            c = nisa.nc_matmul(p, p)  # HERE
            return x
        """,
    "matmul writes SBUF": """
        def k(x):
            a = nl.load(x)
            s = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
            s[...] = nisa.nc_matmul(a, a)  # HERE
            return x
        """,
    "gpsimd touches PSUM": """
        def k(x):
            a = nl.load(x)
            p = nisa.nc_transpose(a)
            c = nisa.tensor_copy(p, engine=nisa.gpsimd_engine)  # HERE
            return x
        """,
    "two PSUM inputs": """
        def k(x):
            a = nl.load(x)
            p = nisa.nc_transpose(a)
            q = nisa.nc_transpose(a)
            c = nisa.tensor_tensor(p, q, op=np.add)  # HERE
            return x
        """,
    "engine reads HBM": """
        def k(x):
            c = nl.exp(x)  # HERE
            return x
        """,
}


@pytest.mark.parametrize("case", sorted(MEMORY_CASES))
def test_unsupported_memory(kernel, case):
    k = kernel(MEMORY_CASES[case])
    with pytest.raises(NkiError) as info:
        k.run("k", X)
    assert info.value.code == "err_unsupported_memory"
    assert info.value.line == k.line_of("# HERE")


@pytest.mark.parametrize(
    ("stationary", "moving"),
    [("(64, 256)", "(64, 16)"), ("(64, 16)", "(64, 1024)")],
)
def test_matmul_free_size_limits(kernel, stationary, moving):
    k = kernel(
        f"""
        def k(x):
            a = nl.zeros({stationary}, dtype=nl.bfloat16)
            b = nl.zeros({moving}, dtype=nl.bfloat16)
            c = nisa.nc_matmul(a, b)  # HERE
            return x
        """
    )
    with pytest.raises(NkiError) as info:
        k.run("k", X)
    assert info.value.code == "err_size_of_dimension_exceed_arch_limit"
    assert info.value.line == k.line_of("# HERE")


def test_load_of_more_than_128_partitions(kernel):
    k = kernel(
        """
        def k(x):
            t = nl.load(x[0:256, 0:4])  # HERE
            return x
        """
    )
    with pytest.raises(NkiError) as info:
        k.run("k", np.zeros((512, 4), np.float32))
    assert (info.value.code, info.value.line) == ("err_num_partition_exceed_arch_limit", k.line_of("# HERE"))


def test_block_dimensions_are_logical(kernel):
    """A huge block-dimensioned tensor is fine: only one block must fit."""
    k = kernel(
        """
        def k(x):
            big = nl.ndarray((4096, 64, par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
            acc = nl.zeros((64, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
            return x
        """
    )
    run = k.run("k", X, numerics=False)
    assert run.trace.tensors[1].shape == (4096, 64, 128, 512)
    assert run.trace.tensors[1].block_dims == 2


def test_affine_writes_allowed_when_indexed_accumulated_or_sequential(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((8, 16), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.affine_range(4):
                t = nl.load(x[i * 8:(i + 1) * 8, :])
                acc += t
                nl.store(out[i * 8:(i + 1) * 8, :], value=t)
            last = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.sequential_range(4):
                last[...] = nl.load(x[j * 8:(j + 1) * 8, :])
            return out
        """
    )
    x = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    (out,) = k.run("k", x).outputs
    np.testing.assert_array_equal(out, x)


def test_masked_access_past_the_end_is_legal(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(3):
                rows = i * 4 + nl.arange(4)[:, None]
                cols = nl.arange(16)[None, :]
                t = nl.load(x[rows, cols], mask=(rows < 10))
                nl.store(out[rows, cols], value=nl.multiply(t, 2.0, mask=(rows < 10)), mask=(rows < 10))
            return out
        """
    )
    x = np.arange(160, dtype=np.float32).reshape(10, 16)
    run = k.run("k", x)
    np.testing.assert_array_equal(run.outputs[0], 2 * x)
    stores = [r for r in run.trace.records if r.opcode == "dma_store"]
    assert stores[-1].writes[0].box == ((8, 10), (0, 16))


def test_output_dependency_across_an_outer_affine_loop(kernel):
    """The write depends on the inner loop only: iterations of the outer loop collide."""
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(2):
                for j in nl.affine_range(2):
                    t = nl.load(x[j * 4:(j + 1) * 4, :])
                    nl.store(out[j * 4:(j + 1) * 4, :], value=t)  # HERE
            return out
        """
    )
    with pytest.raises(NkiError) as info:
        k.run("k", X, numerics=False)
    assert (info.value.code, info.value.line) == ("err_unexpected_output_dependencies", k.line_of("# HERE"))


def test_static_range_tiles_stay_usable_after_the_loop(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.static_range(2):
                t = nl.load(x)
            nl.store(out, value=t)
            return out
        """
    )
    np.testing.assert_array_equal(k.run("k", X + 1).outputs[0], X + 1)
