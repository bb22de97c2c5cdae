"""What a kernel can reach from the objects the emulator hands it.

On hardware a kernel cannot see input values while it is traced, nor anything of the compiler's
state. Under emulation, every object a kernel holds (tensors, views, tiles, index grids, loop
indices, the nl/nisa/nki modules) must expose only the NKI surface through public attributes:
the sandbox refuses every attribute starting with `_`, so nothing public may lead to a tensor's
values, to the trace or to the run's context.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from accelopt.nki import runtime
from accelopt.nki.context import KernelContext
from accelopt.nki.trace import Trace, TraceRecord

PROBE_KERNEL = """
def probe_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        rows = nl.arange(128)[:, None]
        cols = nl.arange(64)[None, :]
        view = x[i * 128 + rows, cols]
        tile = nl.load(view)
        doubled = nl.multiply(tile, 2.0)
        nl.store(out[i * 128 + rows, cols], value=doubled)
        PROBE.extend([x, out, view, tile, doubled, tile[0:64, :], rows, cols, i, rows >= 3])
    PROBE.extend([nl, nisa, nki, nl.sbuf, nl.affine_range(4), nl.mgrid[0:128, 0:64], nl.par_dim(128)])
    return out
"""


def _public_values(obj: Any) -> list[Any]:
    values = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            values.append(getattr(obj, name))
        except Exception:  # a property that needs a run; it cannot leak anything either
            continue
    return values


def _reachable(roots: list[Any], depth: int) -> list[Any]:
    """Objects reachable from `roots` through public attributes (not descending into numpy or
    other third-party modules, which kernels may import anyway, nor into plain values)."""
    seen: dict[int, Any] = {}
    frontier = list(roots)
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            if id(obj) in seen:
                continue
            seen[id(obj)] = obj
            if isinstance(obj, (int, float, str, bytes, bool, type(None), np.generic, np.dtype)):
                continue
            if isinstance(obj, types.ModuleType) and not obj.__name__.startswith("accelopt"):
                continue
            if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
                continue
            nxt.extend(_public_values(obj))
        frontier = nxt
    return list(seen.values()) + frontier


def test_kernel_visible_objects_expose_no_values_trace_or_context(kernel):
    k = kernel(PROBE_KERNEL)
    fn = k.load("probe_kernel")
    probe: list[Any] = []
    fn.__globals__["PROBE"] = probe
    x = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    result = runtime.run_kernel(fn, [x], numerics=True)
    np.testing.assert_array_equal(result.outputs[0], 2 * x)  # the probe did not disturb the run
    assert len(probe) == 2 * 10 + 7

    for obj in _reachable(probe, depth=4):
        assert not isinstance(obj, (KernelContext, Trace, TraceRecord)), obj
        if isinstance(obj, np.ndarray):
            assert not np.shares_memory(obj, x), "input values reachable from a kernel object"
            assert not np.shares_memory(obj, result.outputs[0]), "tile values reachable"
        if callable(obj) and getattr(obj, "__name__", "") in {"current", "active_context", "read_values"}:
            raise AssertionError(f"{obj} is reachable from a kernel object")
