"""The Scalar Engine's `activation` instruction and the free-axis reduction an instruction can
fold in: what `nisa.activation`/`activation_reduce` (isa.py) and `nisa.activate2` (mx.py) share,
so the two kernel-facing forms differ only in how they read their arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accelopt.nki import ops as _ops
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.instructions import check_on_chip as _check_on_chip
from accelopt.nki.instructions import elementwise as _elementwise
from accelopt.nki.instructions import to_view as _to_view
from accelopt.nki.tensor import Tensor as _Tensor
from accelopt.nki.trace import Engine as _Engine


def scalar_activation(
    ctx: _KernelContext,
    line: int,
    api: str,
    operands: list[Any],
    compute: Callable[..., np.ndarray],
    *,
    dtype: Any,
    ops_per_element: int,
    extra: dict[str, Any],
    mask: Any = None,
    reduce_op: Any = None,
    reduce_res: Any = None,
) -> _Tensor:
    """One `activation` instruction on the Scalar Engine: `compute` over `operands` (the data
    tile, then tiles or scalars), and with `reduce_res` the `reduce_op` (default add) reduction
    of the result along its free axes written there too."""
    out = _elementwise(
        ctx,
        line,
        api=api,
        opcode="activation",
        operands=operands,
        compute=compute,
        engine=_Engine.SCALAR,
        legal=(_Engine.SCALAR,),
        dtype=dtype,
        mask=mask,
        ops_per_element=ops_per_element,
        extra=extra,
    )
    if reduce_res is not None:
        attach_reduce(ctx, line, out, reduce_op or np.add, reduce_res, api)
    return out


def attach_reduce(
    ctx: _KernelContext,
    line: int,
    out: _Tensor,
    reduce_op: Any,
    reduce_res: Any,
    api: str,
    negate: bool = False,
    opcode: str | None = "activation_reduce",
) -> None:
    """Fold a free-axis reduction of `out` into the instruction that produced it (`opcode`:
    the instruction's new opcode, None to keep it)."""
    rspec = _ops.resolve(reduce_op)
    if rspec.reduce is None:
        raise ctx.error("err_unsupported_op", f"{api}: {rspec.name} cannot reduce", line)
    dst = _to_view(ctx, reduce_res, line)
    _check_on_chip(ctx, dst, api, line)
    record = out._producer
    assert record is not None
    region = dst._region()
    if opcode is not None:
        record.opcode = opcode
    if negate:
        record.extra["reduce_negate"] = True
    record.writes = (*record.writes, region)
    record.vector_ops += out.shape[0] * (int(np.prod(out.shape[1:])) if len(out.shape) > 1 else 1)
    record.extra["has_reduce"] = True
    record.extra["reduce_op"] = rspec.name
    ctx.note_write(dst._tensor, region, line, False)
    if ctx.numerics:
        values = out._exact if out._exact is not None else out._data
        assert values is not None
        axes = tuple(range(1, values.ndim))
        reduced = rspec.reduce(np.asarray(values, dtype=np.float32), axis=axes, keepdims=True)
        if negate:
            reduced = -reduced
        dst._write(reduced.reshape(dst.shape) if reduced.size == int(np.prod(dst.shape)) else reduced)
