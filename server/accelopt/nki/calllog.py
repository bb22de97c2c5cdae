"""The call log: what a kernel asked the emulator to do, as data a trusted process can re-run.

A kernel's Python decides *which* instructions to issue; the emulator's API functions decide
what each one computes and which trace records it emits. To verify a run without trusting the
kernel, the numeric run being verified logs every kernel-level API call (an ``nl.*`` / ``nisa.*``
function, a tile assignment ``t[...] = v``, an augmented assignment ``t += v``, a loop entry,
iteration and exit) with its arguments fully resolved into plain values: tiles by tensor id, views
as their access pattern (offsets and per-dimension affine terms, or explicit index grids), masks
and index grids by their affine form, operators by name, dtypes, buffers and engines by name,
scalars and host constants by value. Nothing in the log refers to kernel code.

`rerun.py` re-executes such a log with the emulator's own API functions on inputs the kernel
never saw: no kernel Python runs, so deleted or forged trace records, values computed on the host,
patched API functions and cached answers cannot survive it (see SECURITY.md, "Verified
evaluations").

The contract for API functions (how a new op plugs in): every kernel-facing function of
``nl`` / ``nisa`` that issues hardware work is registered here under its qualified name, either
through `replay.make_replayable` (which registers and logs it) or through `logged`. A function that
issues no work (index grids, loop ranges, ``program_id``) is listed in `PURE`. A test walks the
kernel-facing modules and fails on any function that is in neither. Its arguments must be values
`encode` knows; anything else makes the run unverifiable, and the evaluation is rejected with the
reason (never silently accepted).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from accelopt.nki import ops
from accelopt.nki.dtypes import dname
from accelopt.nki.indexing import IndexExpr, Predicate
from accelopt.nki.loopvar import LoopVar
from accelopt.nki.tensor import Buffer, Tensor, View, par_dim

if TYPE_CHECKING:
    from accelopt.nki.context import KernelContext

# qualified name ("accelopt.nki.language.exp") -> the API function itself (never a wrapper)
API: dict[str, Callable[..., Any]] = {}

# Kernel-facing names that issue no hardware work and need no log entry (by module).
PURE: dict[str, frozenset[str]] = {
    "accelopt.nki.language": frozenset(
        {
            "affine_range",
            "sequential_range",
            "static_range",
            "arange",
            "ds",
            "mgrid",
            "program_id",
            "num_programs",
            "program_ndim",
            "device_print",
            # a scheduling hint for the compiler (accelopt.nki.compiler): it issues no work
            "no_reorder",
            # instructions.dma_copy(ctx, dst, src, line): an internal helper bound in `nl`; a
            # kernel cannot call it meaningfully, and a run that did would fail the re-run.
            "dma_copy",
            # compiled loops: they issue no work themselves; their iterations are logged as
            # loops and their bodies' calls one by one (registers.py)
            "fori_loop",
            "while_loop",
            # questions about buffers and a new view of a tile: no work
            "is_hbm",
            "is_sbuf",
            "is_psum",
            "is_on_chip",
            "expand_dims",
        }
    ),
    # registers hold loop bounds and conditions (registers.py): allocating, moving and loading
    # one issues no trace record; storing one is logged as the tile assignment it performs
    "accelopt.nki.isa": frozenset(
        {"get_nc_version", "register_alloc", "register_move", "register_load", "register_store"}
    ),
}

# Host constants (nl.shared_constant) and explicit index grids are logged by value; past this
# many elements in one log the run is too big to verify (the correctness sizes are small).
MAX_LOGGED_ELEMENTS = 1 << 24
MAX_ENTRIES = 500_000  # a numeric run with more calls would not finish in an evaluation anyway


class Unloggable(Exception):
    """An argument the log cannot express as plain data."""


def api_name(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__name__}"


def register(fn: Callable[..., Any]) -> str:
    name = api_name(fn)
    API[name] = fn
    return name


def logged(namespace: dict[str, Any], names: tuple[str, ...]) -> None:
    """Wrap API functions that `replay.make_replayable` does not cover so numeric runs log them."""
    for name in names:
        original = namespace[name]
        wrapped = logging_wrapper(original)
        ops.alias(wrapped, original)
        namespace[name] = wrapped


def logging_wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
    name = register(fn)

    @functools.wraps(fn)
    def api(*args: Any, **kwargs: Any) -> Any:
        from accelopt.nki import context as _context

        ctx = _context._ACTIVE
        if ctx is None or ctx._call_log is None or ctx.api_depth:
            return fn(*args, **kwargs)
        return ctx._call_log.call(ctx, name, fn, args, kwargs)

    return api


class CallLog:
    """The entries of one run (JSON-compatible lists), or why the run cannot be verified."""

    __slots__ = ("_elements", "_sites", "entries", "failure")

    def __init__(self) -> None:
        self.entries: list[list[Any]] = []
        self.failure: str | None = None
        self._sites: dict[Any, int] = {}
        self._elements = 0

    # --- what the emulator calls ------------------------------------------------------------

    def call(
        self,
        ctx: KernelContext,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        line = ctx.line()
        site = self._site(ctx.call_site())
        encoded = self._encode_all(name, line, args, kwargs)
        ctx.api_depth += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            ctx.api_depth -= 1
        if encoded is not None:
            self._append(["call", name, encoded[0], encoded[1], line, site, signature(result)])
        return result

    def assign(self, ctx: KernelContext, assign: Callable[..., Any], dst: View, value: Any, kw: dict[str, Any]) -> None:
        line = ctx.line()
        encoded = self._encode_all("a tile assignment", line, (dst, value), kw)
        ctx.api_depth += 1
        try:
            assign(dst, value, **kw)
        finally:
            ctx.api_depth -= 1
        if encoded is not None:
            self._append(["assign", encoded[0], encoded[1], line])

    def augmented(
        self, ctx: KernelContext, augmented: Callable[..., Any], target: Any, value: Any, opname: str
    ) -> Any:
        line = ctx.line()
        encoded = self._encode_all(f"'{opname}=' on a tile", line, (target, value), {})
        ctx.api_depth += 1
        try:
            result = augmented(target, value, opname)
        finally:
            ctx.api_depth -= 1
        if encoded is not None:
            self._append(["augment", encoded[0], opname, line, signature(result)])
        return result

    def loop_enter(self, kind: str, trip: int, line: int, site: Any, nki_scope: bool, loop_id: int) -> None:
        self._append(["loop", kind, trip, line, self._site(site), nki_scope, loop_id])

    def loop_iteration(self, iteration: int) -> None:
        self._append(["next", iteration])

    def loop_exit(self) -> None:
        self._append(["end"])

    def inputs(self, tensors: list[tuple[int, Tensor]]) -> None:
        """The kernel's array arguments: (position, tensor) in registration order."""
        self._append(["inputs", [[pos, t._tid, list(t.shape), dname(t.dtype)] for pos, t in tensors]])

    def program(self, index: int, ids: tuple[int, ...], core: int, grid: tuple[int, ...]) -> None:
        """A program instance of an SPMD grid begins (accelopt.nki.spmd): the re-run hands later
        instances the first instance's shared outputs, as the grid run did."""
        self._append(["program", index, list(ids), core, list(grid)])

    def returned(self, tensors: list[Tensor], single: bool) -> None:
        self._append(["return", [t._tid for t in tensors], single])

    # --- helpers ------------------------------------------------------------------------------

    def _site(self, site: Any) -> int:
        number = self._sites.get(site)
        if number is None:
            number = self._sites[site] = len(self._sites)
        return number

    def _append(self, entry: list[Any]) -> None:
        if self.failure is not None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.failure = f"the run made more than {MAX_ENTRIES} API calls; too many to verify"
            self.entries = []
            return
        self.entries.append(entry)

    def _encode_all(
        self, what: str, line: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]] | None:
        if self.failure is not None:
            return None
        try:
            return [self._encode(a) for a in args], {k: self._encode(v) for k, v in kwargs.items()}
        except Unloggable as exc:
            short = what.rsplit(".", 1)[-1]
            self.failure = f"line {line}: an argument of {short} cannot be verified: {exc}"
            self.entries = []
            return None

    def _encode(self, value: Any) -> Any:
        data = encode(value)
        if isinstance(value, np.ndarray) or (isinstance(value, View) and value._arrays is not None):
            self._elements += _logged_elements(data)
            if self._elements > MAX_LOGGED_ELEMENTS:
                raise Unloggable(f"host data of more than {MAX_LOGGED_ELEMENTS} elements")
        return data


def _logged_elements(data: Any) -> int:
    if isinstance(data, list):
        if data and data[0] in ("A", "g"):
            return len(data[-1])
        return sum(_logged_elements(d) for d in data)
    return 0


def signature(result: Any) -> Any:
    """What an API call returned, as far as later entries can refer to it (tensor ids)."""
    cls = result.__class__
    if cls is Tensor:
        return ["T", result._tid]
    if cls is View:
        return ["V", result._tensor._tid]
    if cls is tuple or cls is list:
        return ["l", *[signature(r) for r in result]]
    return None


# --- encoding ------------------------------------------------------------------------------------

_SCALAR_TYPES = (bool, int, float, str, type(None))


def encode(value: Any) -> Any:
    """A value as JSON-compatible data (tagged lists); raises Unloggable for anything else."""
    cls = value.__class__
    if cls is LoopVar:
        return ["L", int(value), value.loop_id]
    if cls in _SCALAR_TYPES:
        return value
    if cls is Tensor:
        return ["T", value._tid]
    if cls is View:
        return _encode_view(value)
    if isinstance(value, View) and hasattr(value, "_index_view"):  # a views.IndirectView
        # the rows come from the index tile: logged as that tile, re-read by the re-run
        base = _encode_view(value)
        base[5] = None
        index = _encode_view(value._index_view)
        kind = value._index_kind
        if kind == "rows":
            return ["I", base, index, value._index_dim, value._index_add]
        # a run-time offset or tensor indirection (views.INDEX_KINDS): also how the index
        # selects, and the extent it may reach (checked again by the re-run)
        return ["J", kind, base, index, value._index_dim, value._index_add, value._index_limit]
    if cls is tuple:
        return ["t", *[encode(v) for v in value]]
    if cls is list:
        return ["l", *[encode(v) for v in value]]
    if cls is IndexExpr:
        return _encode_expr(value)
    if cls is Predicate:
        conds = [["c", _encode_expr(expr), op] for expr, op in value.conds]
        values = None if value.values is None else _grid(value.values, np.bool_)
        return ["M", values, *conds]
    if isinstance(value, Buffer):
        # a direct allocation (nki.compiler Allocation) re-runs as its memory: where its tiles
        # live is timing data (Trace.placements), not part of the numbers or the trace records
        return ["B", value.name]
    if cls is par_dim:
        return ["P", value.size]
    if isinstance(value, np.generic):
        return ["N", dname(value.dtype), value.item()]
    if isinstance(value, np.dtype):
        return ["D", dname(value)]
    if isinstance(value, np.ndarray):
        return ["A", dname(value.dtype), list(value.shape), _flat(value)]
    if isinstance(value, type) and issubclass(value, np.generic):
        return ["D", dname(np.dtype(value))]
    if isinstance(value, enum.Enum) and type(value).__module__.startswith("accelopt.nki"):
        return ["E", type(value).__name__, value.name]
    if isinstance(value, slice):
        return ["s", encode(value.start), encode(value.stop), encode(value.step)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return ["d", {k: encode(v) for k, v in value.items()}]
    if callable(value):
        try:
            spec = ops.resolve(value)
        except Exception:
            raise Unloggable(f"{type(value).__name__} {getattr(value, '__name__', '')!s} is not an NKI operator") from None
        return ["O", spec.name]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # int subclasses (an IntEnum, a kernel's own int type): their value
    if isinstance(value, float):
        return float(value)
    raise Unloggable(f"a value of type {type(value).__name__}")


def _encode_view(view: View) -> list[Any]:
    arrays = None
    if view._arrays is not None:
        arrays = ["l", *[["l", d, _grid(np.asarray(g), np.int64)] for d, g in sorted(view._arrays.items())]]
    return [
        "V",
        view._tensor._tid,
        list(view.shape),
        list(view._offsets),
        [[list(term) for term in terms] for terms in view._terms],
        arrays,
        bool(view._oob),
    ]


def _encode_expr(expr: IndexExpr) -> list[Any]:
    values = None if expr.values is None else _grid(expr.values, np.int64)
    return ["X", list(expr.sizes), list(expr.coefs), int(expr.offset), values]


def _grid(values: np.ndarray, dtype: Any) -> list[Any]:
    array = np.asarray(values, dtype=dtype)
    return ["g", list(array.shape), array.ravel().tolist()]


def _flat(array: np.ndarray) -> list[Any]:
    if array.dtype.kind in "fV" and array.dtype != np.float64:
        return array.astype(np.float64).ravel().tolist()
    return array.ravel().tolist()

