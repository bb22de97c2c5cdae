"""``nki.compiler`` / ``neuronxcc.nki.compiler`` (``ncc``): direct allocation and the kernel
decorators that steer the compiler.

- ``ncc.sbuf.mod_alloc(base_addr=, base_partition=, num_par_tiles=, num_free_tiles=)`` and
  ``ncc.psum.mod_alloc(base_bank=, base_addr=, base_partition=, num_bank_tiles=, ...)`` place
  every logical tile (block) of a tensor at a physical address, modulo a number of physical
  tiles per dimension; ``ncc.sbuf.alloc(func)`` / ``ncc.psum.alloc(func)`` take the placement
  function itself: ``func(block_index, partitions, bytes_per_partition)`` answers
  ``(start_partition, byte_addr)`` in SBUF, ``(bank, start_partition, byte_addr)`` in PSUM;
  ``auto_alloc()`` leaves placement to the compiler (it is ``nl.sbuf`` / ``nl.psum``).
- ``skip_middle_end_transformations``, ``enable_stack_allocator``, ``force_auto_alloc``: kernel
  decorators (with or without a call, above or below ``@nki.jit``); ``no_reorder()``: a block whose
  instructions run in program order.

What it means for the timing: the emulator records the placement of each allocation site in the
trace (`Trace.placements`) and the decorators in `Trace.compiler_flags`. The compiler model then
maps a directly allocated tile to the physical location the kernel gave instead of its own buffer
pools (tiles sharing an address share a buffer, so reuse is exactly what the kernel wrote), never
spills it, and a kernel with ``skip_middle_end_transformations`` gets no loop hoisting.

Source: Neuron SDK docs, NKI API reference ``nki.compiler`` (sbuf/psum ``alloc``, ``mod_alloc``,
``auto_alloc``, the kernel decorators), ``nki.language.no_reorder`` and the NKI direct allocation
guide (v2.26-v2.33).
"""

from __future__ import annotations

import itertools as _itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager as _contextmanager
from typing import TYPE_CHECKING, Any

# Imported names are bound to underscore names: kernels see this module as `ncc` (see language.py).
from accelopt.nki.context import KernelContext as _KernelContext
from accelopt.nki.context import current as _current
from accelopt.nki.instructions import PSUM as _PSUM
from accelopt.nki.instructions import SBUF as _SBUF
from accelopt.nki.tensor import Buffer as _Buffer
from accelopt.nki.trace import Memory as _Memory

if TYPE_CHECKING:
    from accelopt.nki.tensor import Tensor

_MAX_PLACED_BLOCKS = 4096  # a tensor with more logical blocks is placed by its first ones only

_Placer = Callable[[tuple[int, ...], int, int], tuple[int, ...]]


class Allocation(_Buffer):
    """A directly allocated SBUF or PSUM buffer: where each logical tile of a tensor lives."""

    __slots__ = ("api", "placer")

    def __init__(self, memory: _Memory, placer: _Placer, api: str) -> None:
        super().__init__("sbuf" if memory is _Memory.SBUF else "psum", memory)
        self.placer = placer
        self.api = api

    def __repr__(self) -> str:
        return self.api


def _linear(shape: tuple[int, ...], index: tuple[int, ...]) -> int:
    total = 0
    for size, i in zip(shape, index):
        total = total * size + i
    return total


def _modulo(base: int, tiles: tuple[int, ...], scale: int) -> Callable[[tuple[int, ...]], int]:
    """`base + scale * (row-major position of index modulo the tile counts)`, as the mod_alloc
    reference pages define it (no counts: every block on the same tile)."""

    def place(index: tuple[int, ...]) -> int:
        counts = tiles if tiles else (1,) * len(index)
        wrapped = tuple(i % c for i, c in zip(index, counts))
        return base + scale * _linear(counts, wrapped)

    return place


def _tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),)


class sbuf:
    """``ncc.sbuf``: SBUF allocation control."""

    @staticmethod
    def mod_alloc(
        *, base_addr: int, base_partition: int = 0, num_par_tiles: Any = (), num_free_tiles: Any = ()
    ) -> Allocation:
        par_tiles, free_tiles = _tuple(num_par_tiles), _tuple(num_free_tiles)

        def placer(index: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, ...]:
            return (
                _modulo(int(base_partition), par_tiles, partitions)(index),
                _modulo(int(base_addr), free_tiles, bytes_per_partition)(index),
            )

        return Allocation(_Memory.SBUF, placer, f"ncc.sbuf.mod_alloc(base_addr={base_addr})")

    @staticmethod
    def alloc(func: Callable[..., Any]) -> Allocation:
        def placer(index: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, ...]:
            return _tuple(func(index, partitions, bytes_per_partition))

        return Allocation(_Memory.SBUF, placer, "ncc.sbuf.alloc(...)")

    @staticmethod
    def auto_alloc() -> _Buffer:
        return _SBUF


class psum:
    """``ncc.psum``: PSUM allocation control."""

    @staticmethod
    def mod_alloc(
        *,
        base_bank: int,
        base_addr: int = 0,
        base_partition: int = 0,
        num_bank_tiles: Any = (),
        num_par_tiles: Any = (),
        num_free_tiles: Any = (),
    ) -> Allocation:
        banks, par_tiles, free_tiles = _tuple(num_bank_tiles), _tuple(num_par_tiles), _tuple(num_free_tiles)

        def placer(index: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, ...]:
            return (
                _modulo(int(base_bank), banks, 1)(index),
                _modulo(int(base_partition), par_tiles, partitions)(index),
                _modulo(int(base_addr), free_tiles, bytes_per_partition)(index),
            )

        return Allocation(_Memory.PSUM, placer, f"ncc.psum.mod_alloc(base_bank={base_bank})")

    @staticmethod
    def alloc(func: Callable[..., Any]) -> Allocation:
        def placer(index: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, ...]:
            return _tuple(func(index, partitions, bytes_per_partition))

        return Allocation(_Memory.PSUM, placer, "ncc.psum.alloc(...)")

    @staticmethod
    def auto_alloc() -> _Buffer:
        return _PSUM


def at_address(buffer: _Buffer, address: Any) -> Allocation | None:
    """``nl.ndarray(..., address=(partition_offset, free_offset))`` (NKI 0.7): the whole tensor at
    one manual address (the ``nki.language.alloc_tiles`` page: "the same contract as
    nki.language.ndarray()"); *our reading*: the free offset is in bytes, and in PSUM byte
    `free_offset` lies in bank free_offset // 2 KiB. None for HBM (placement is on-chip only)."""
    if buffer.memory is _Memory.HBM:
        return None
    partition, free = (*_tuple(address), 0, 0)[:2]
    if buffer.memory is _Memory.SBUF:
        return Allocation(_Memory.SBUF, lambda index, p, f: (partition, free), f"address={address!r}")
    bank_bytes = 2048  # PSUM bank per partition (NKI_NOTES §3)
    return Allocation(
        _Memory.PSUM,
        lambda index, p, f: (free // bank_bytes, partition, free % bank_bytes),
        f"address={address!r}",
    )


def _place(ctx: _KernelContext, tensor: Tensor, name: str, line: int) -> None:
    """Record where a directly allocated tensor's logical tiles live (once per allocation site)."""
    allocation = tensor.buffer
    assert isinstance(allocation, Allocation)
    key = (line, name, tuple(tensor.shape))
    if key in ctx.placed_sites:
        return
    ctx.placed_sites.add(key)
    bd = tensor.block_dims
    blocks = tensor.shape[:bd]
    inner = tensor.shape[bd:]
    partitions = inner[0] if inner else 1
    per_partition = tensor.dtype.itemsize
    for extent in inner[1:]:
        per_partition *= extent
    entries = []
    for index in _itertools.islice(_itertools.product(*(range(b) for b in blocks)), _MAX_PLACED_BLOCKS):
        try:
            where = allocation.placer(tuple(index), partitions, per_partition)
        except Exception as exc:  # the kernel's own placement function failed
            raise ctx.error(
                "err_invalid_allocation",
                f"{allocation.api} could not place block {tuple(index)}: {type(exc).__name__}: {exc}",
                line,
            ) from None
        entries.append([*index, *where])
    ctx.trace.placements.append([line, name, list(tensor.shape), allocation.memory.value, entries])


# --- kernel decorators ------------------------------------------------------------------------


def _flag(flag: str, func: Any) -> Any:
    from accelopt.nki.runtime import mark_kernel  # local: runtime builds on the language modules

    def decorate(target: Any) -> Any:
        mark_kernel(target, flag)
        return target

    return decorate if func is None else decorate(func)


def skip_middle_end_transformations(func: Any = None) -> Any:
    """Skip the compiler's middle-end transformations (the timing model then hoists nothing)."""
    return _flag("skip_middle_end_transformations", func)


def enable_stack_allocator(func: Any = None, **_: Any) -> Any:
    """Let the compiler allocate SBUF/PSUM tensors with a stack allocator."""
    return _flag("enable_stack_allocator", func)


def force_auto_alloc(func: Any = None) -> Any:
    """Turn automatic allocation on for the kernel."""
    return _flag("force_auto_alloc", func)


@_contextmanager
def no_reorder() -> Iterator[None]:
    """``with ncc.no_reorder():`` (also ``nl.no_reorder``): the block's instructions run in program
    order; the timing model starts each after the previous one in the block has finished."""
    ctx = _current()
    first = len(ctx.trace.records)
    block = ctx.no_reorder_blocks
    ctx.no_reorder_blocks = block + 1
    try:
        yield
    finally:
        for record in ctx.trace.records[first:]:
            record.extra.setdefault("no_reorder", block)
