"""Entry points: module aliases, loading kernel text, jit/baremetal/simulate, outputs."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from accelopt.nki import runtime
from accelopt.nki.trace import LoopKind


def test_aliases_import_every_spelling():
    runtime.install_aliases()
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt
    import nki.language as new_nl
    from neuronxcc.nki import trace
    from neuronxcc.nki.language import par_dim

    import nki as new_nki

    assert nl is new_nl and nki is new_nki
    assert callable(trace) and callable(nki.jit) and callable(nki.baremetal)
    assert callable(nki.simulate_kernel) and callable(nki.benchmark)
    assert nisa.unknown_engine is nki.isa.unknown_engine
    assert par_dim(128).size == 128
    assert repr(nt.tensor[[128, 512], nl.float32]).startswith("nt.tensor")
    assert sys.modules["neuronxcc.nki.language"] is nl


def test_load_kernel_errors(tmp_path):
    with pytest.raises(SyntaxError):
        runtime.load_kernel("def k(:\n", "k", str(tmp_path / "bad.py"))
    with pytest.raises(ValueError, match="'missing' is not defined"):
        runtime.load_kernel("def k(x):\n    return x\n", "missing", str(tmp_path / "a.py"))
    with pytest.raises(ValueError, match="not a kernel function"):
        runtime.load_kernel("k = 3\n", "k", str(tmp_path / "b.py"))


def test_load_kernel_unwraps_jit_and_kernels_run_unchanged(kernel, rng):
    k = kernel(
        """
        from neuronxcc.nki import trace

        @nki.jit
        def double(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(x), 2))
            return out

        @trace
        def pair(x):
            a = double(x)
            b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(b, value=nl.load(a))
            return a, b
        """
    )
    x = rng.standard_normal((4, 8)).astype(np.float32)
    fn = k.load("double")
    assert not isinstance(fn, runtime.Kernel)
    run = runtime.run_kernel(k.load("pair"), [x])
    assert not run.single and len(run.outputs) == 2
    np.testing.assert_array_equal(run.outputs[0], 2 * x)
    np.testing.assert_array_equal(run.outputs[1], 2 * x)


def test_jit_baremetal_and_simulate_return_numpy(rng):
    runtime.install_aliases()
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    def body(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out

    x = rng.standard_normal((4, 8)).astype(np.float32)
    expected = np.exp(x)
    for fn in (
        nki.jit(body),
        nki.baremetal(body),
        nki.baremetal(save_neff_name="k.neff")(body),
        nki.benchmark(body),
    ):
        np.testing.assert_allclose(fn(x), expected, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate_kernel(nki.jit(body), x), expected, rtol=1e-6)
    np.testing.assert_allclose(runtime.simulate(body)(x), expected, rtol=1e-6)
    np.testing.assert_allclose(nki.jit(body)[1](x), expected, rtol=1e-6)
    assert x.flags.writeable and np.array_equal(np.exp(x), expected)  # inputs untouched


def test_plain_range_is_a_sequential_loop_and_outputs_by_argument(kernel):
    k = kernel(
        """
        def k(x, out):
            for i in range(2):
                nl.store(out[i], value=nl.load(x[i]))
        """
    )
    x = np.arange(16, dtype=np.float32).reshape(2, 2, 4)
    run = k.run("k", x, np.zeros_like(x))
    np.testing.assert_array_equal(run.outputs[0], x)
    assert [lp.kind for lp in run.trace.loops.values()] == [LoopKind.SEQUENTIAL]


def test_string_statements_imports_and_static_range(kernel):
    k = kernel(
        """
        def k(x):
            import numpy as np
            ' a bare string statement '
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.static_range(2):
                nl.store(out[i], value=nl.load(x[i]))
            ' end loop i '
            return out
        """
    )
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    run = k.run("k", x)
    np.testing.assert_array_equal(run.outputs[0], x)
    assert [lp.kind for lp in run.trace.loops.values()] == [LoopKind.STATIC]


def test_lines_point_into_the_kernel_file(kernel):
    k = kernel(
        """
        def k(x):
            t = nl.load(x)  # LOAD
            u = nl.exp(t)  # EXP
            return x
        """
    )
    run = k.run("k", np.zeros((4, 4), np.float32))
    assert [r.line for r in run.trace.records] == [k.line_of("# LOAD"), k.line_of("# EXP")]
    assert run.trace.source_path == str(k.path)


def test_kernels_writing_their_inputs_leave_the_callers_arrays_alone(kernel):
    k = kernel(
        """
        def k(x):
            nl.store(x, value=nl.add(nl.load(x), 1.0))
            return x
        """
    )
    x = np.zeros((4, 4), np.float32)
    run = k.run("k", x)
    np.testing.assert_array_equal(run.outputs[0], 1)
    np.testing.assert_array_equal(x, 0)
