"""The state of one emulated kernel run: the trace being built, the loop nest, and the checks
that need history (affine-loop output dependencies, tile scopes).

API calls find the run through `current()`. Runs are not re-entrant across threads; the
emulator runs one kernel at a time per process.
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from accelopt.nki.apiversion import LEGACY, KernelApi
from accelopt.nki.dtypes import dname
from accelopt.nki.errors import _EMULATOR_DIR, NkiError
from accelopt.nki.trace import (
    Engine,
    LoopFrame,
    LoopInfo,
    LoopKind,
    Memory,
    Region,
    TensorInfo,
    Trace,
    TraceRecord,
)

if TYPE_CHECKING:
    from accelopt.nki.calllog import CallLog
    from accelopt.nki.fast.replay import Recorder
    from accelopt.nki.tensor import Tensor

_ASSIGNED_NAME = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\[.*\])?\s*(?:[-+*/]|//|\*\*)?=(?!=)")


class LoopScope:
    """One entry into a loop (a loop *instance*): its current iteration and its write history."""

    __slots__ = ("active", "depth", "first_writes", "iteration", "kind", "loop_id", "nki_scope")

    def __init__(self, loop_id: int, kind: LoopKind, depth: int, nki_scope: bool) -> None:
        self.loop_id = loop_id
        self.kind = kind
        self.depth = depth  # position in the context's scope stack
        self.iteration = 0
        self.active = True
        # NKI loops (affine/sequential) are variable scopes; Python range/static_range unroll.
        self.nki_scope = nki_scope
        # (tensor id, line, inner loop ids and iterations) -> region written in iteration 0 (affine loops)
        self.first_writes: dict[tuple[Any, ...], Region] = {}


class KernelContext:
    def __init__(
        self,
        kernel_name: str,
        kernel_path: str,
        numerics: bool = True,
        fast_paths: bool = True,
        api: KernelApi = LEGACY,
    ) -> None:
        self.trace = Trace(kernel_name=kernel_name, source_path=kernel_path, numerics=numerics)
        self.numerics = numerics
        self.kernel_path = kernel_path
        # the NKI generation whose rules apply (apiversion.py): block dimensions, loop scopes
        self.api = api
        self.frames: tuple[LoopFrame, ...] = ()
        # `frames` as plain ints (loop id, iteration, loop id, ...): write-history keys hash
        # these in C (LoopFrame's dataclass __hash__/__eq__ run in Python)
        self.frame_ints: tuple[int, ...] = ()
        self.scopes: list[LoopScope] = []
        self.scope_tuple: tuple[LoopScope, ...] = ()  # `scopes` as a tuple, rebuilt on loop entry/exit
        self.affine_scopes: list[LoopScope] = []
        self._next_tensor_id = 0
        self._loop_ids: dict[tuple[Any, ...], int] = {}
        self._names: dict[int, str] = {}
        # (id of a kernel code object, offset) -> line; the kernel's code lives as long as the run
        self._line_of: dict[tuple[int, int], int] = {}
        # tensor id -> (tensor, name, line, is_input, alloc loop frames), until finish()/info()
        self._pending: dict[int, tuple[Any, ...]] = {}
        self.loop_reduce_state: dict[tuple[Any, ...], Any] = {}
        self.program_ids: tuple[int, ...] = ()
        # SPMD (accelopt.nki.spmd): the launch grid's sizes, and the shared_hbm tensors the first
        # program instance allocated, handed in allocation order to the later instances
        self.grid_sizes: tuple[int, ...] = ()
        self.shared_outputs: list[Tensor] | None = None
        self.shared_cursor = 0
        self.program_index = 0  # launch order of the running instance
        # direct allocation (accelopt.nki.compiler): allocation sites already placed, and the
        # number of no_reorder blocks entered so far
        self.placed_sites: set[tuple[Any, ...]] = set()
        self.no_reorder_blocks = 0
        # the NeuronCore generation the kernel runs for: trn1, trn2 or trn3 (nisa.get_nc_version)
        self.target = "trn1"
        # --- the fast paths' seam (accelopt.nki.fast) ------------------------------------------
        # The one switch: replays, loop fast-forward, the per-site index forms and the traced-
        # assignment shortcut run only while it is on. Off, every kernel statement runs through
        # the semantic core; what the run records is the same either way.
        self.fast_paths = fast_paths
        # trace-only replay of repeated API calls (fast/replay.py): the recorder of the call
        # being logged, and the API nesting depth (nested calls are not replayed alone)
        self.recorder: Recorder | None = None
        self.api_depth = 0
        # while a loop learns its iterations (fastforward.py): every write noted, as
        # (tensor id, its allocation scopes, region, line, accumulate, frame ints)
        self.write_log: list[tuple[Any, ...]] | None = None
        # and, if its body makes masks that move with it, every mask condition made: (expr, op)
        self.condition_log: list[tuple[Any, str]] | None = None
        # Verified evaluations (calllog.py): the numeric run that is to be verified logs every
        # kernel-level API call here; the trusted re-run of such a log fixes each call's kernel
        # line and call site (there is no kernel frame to find them in) and finds tensors by id.
        self._call_log: CallLog | None = None
        self._line_override: int | None = None
        self._site_override: Any = None
        self._by_id: dict[int, Tensor] | None = None
        self._alloc_budget: int | None = None  # bytes of tensor storage a re-run may still allocate
        # a re-run's storage for a tensor with block dimensions (tensor id, shape, dtype, fill,
        # block dimensions) -> a BlockStore, or None for a whole array (blockstore.py)
        self._block_storage: Callable[[int, tuple[int, ...], Any, Any, int], Any] | None = None
        self._alloc_live = 0  # bytes of tensor storage a re-run holds (charged to the budget)
        self._alloc_peak = 0  # the most it held at once
        self._rerun_entry: tuple[int, str, Any] | None = None  # the log entry being re-run

    def refund(self, nbytes: int) -> None:
        """Storage charged to a re-run's budget was freed."""
        if self._alloc_budget is not None:
            self._alloc_budget += nbytes
            self._alloc_live -= nbytes

    # --- locations -----------------------------------------------------------------------

    def line(self) -> int:
        """The kernel source line of the innermost kernel frame calling into the emulator."""
        if self._line_override is not None:
            return self._line_override
        frame: FrameType | None = sys._getframe(1)
        path = self.kernel_path
        fallback = 0
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename == path:
                # f_lineno decodes the code's line table from its start on every access; an
                # instruction offset maps to one line, so remember it.
                key = (id(frame.f_code), frame.f_lasti)  # code objects hash slowly
                line = self._line_of.get(key)
                if line is None:
                    line = self._line_of[key] = frame.f_lineno
                return line
            if not fallback and not filename.startswith(_EMULATOR_DIR):
                fallback = frame.f_lineno
            frame = frame.f_back
        return fallback

    def call_site(self) -> Any:
        """Where the kernel statement calling into the emulator is: (code id, instruction
        offset) of the innermost frame outside the emulator (a re-run: the recorded site)."""
        if self._site_override is not None:
            return self._site_override
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename.startswith(_EMULATOR_DIR):
            frame = frame.f_back
        return (id(frame.f_code), frame.f_lasti)  # code objects hash slowly

    def error(self, code: str, message: str, line: int | None = None) -> NkiError:
        return NkiError(code, message, self.kernel_path, self.line() if line is None else line)

    def name_at(self, line: int, default: str) -> str:
        """Best-effort variable name assigned on a kernel line (for tensor names in the trace)."""
        name = self._names.get(line)
        if name is None:
            match = _ASSIGNED_NAME.match(linecache.getline(self.kernel_path, line))
            name = match.group(1) if match else ""
            self._names[line] = name
        return name or default

    # --- tensors ---------------------------------------------------------------------------

    def register_tensor(
        self,
        tensor: Tensor,
        name: str,
        line: int,
        is_input: bool = False,
        alloc_loops: tuple[LoopFrame, ...] | None = None,
    ) -> None:
        """Give a tensor its id. Its TensorInfo is built when the run finishes (or when asked
        for): most tiles are op results that end up retargeted and forgotten.
        (Compiled replays inline this for their new tiles: replaycode._effects.)"""
        tid = self._next_tensor_id
        self._next_tensor_id = tid + 1
        tensor._tid = tid
        tensor._alloc_scopes = self.scope_tuple
        if self._by_id is not None:
            self._by_id[tid] = tensor
        self._pending[tid] = (
            tensor,
            name,
            line,
            is_input,
            self.frames if alloc_loops is None else alloc_loops,
        )
        if self.recorder is not None:
            self.recorder.registered(tensor, name, line, is_input, alloc_loops is not None)

    def forget_tensor(self, tensor: Tensor) -> None:
        if self.recorder is not None:
            self.recorder.refuse()
        if self._pending.pop(tensor._tid, None) is None:
            self.trace.tensors.pop(tensor._tid, None)

    def info(self, tid: int) -> TensorInfo | None:
        """The TensorInfo of a registered tensor (None if it was forgotten)."""
        pending = self._pending.pop(tid, None)
        if pending is not None:
            self.trace.tensors[tid] = _tensor_info(tid, *pending)
        return self.trace.tensors.get(tid)

    def tensor_name(self, tensor: Tensor) -> str:
        return self.tensor_name_of(tensor._tid)

    def tensor_name_of(self, tid: int) -> str:
        info = self.info(tid)
        return info.name if info is not None else str(tid)

    def finish(self) -> Trace:
        """Complete the trace: every registered tensor's info, in id order."""
        made = self.trace.tensors  # infos already asked for (a few): merged in by id
        ids = sorted(made)
        ids.append(sys.maxsize)  # sentinel
        k = 0
        after = ids[0]
        tensors: dict[int, TensorInfo] = {}
        for tid, pending in self._pending.items():  # by id
            while after < tid:
                tensors[after] = made[after]
                k += 1
                after = ids[k]
            tensors[tid] = _tensor_info(tid, *pending)
        for tid in ids[k:-1]:
            tensors[tid] = made[tid]
        self._pending.clear()
        self.trace.tensors = tensors
        return self.trace

    def check_in_scope(self, tensor: Tensor, line: int) -> None:
        for scope in tensor._alloc_scopes:
            if not scope.active and scope.nki_scope:
                raise NkiError(
                    "err_local_variable_used_out_of_scope",
                    f"tile '{self.tensor_name(tensor)}' "
                    "was allocated inside a loop and is used after the loop ended; "
                    "declare it before the loop",
                    self.kernel_path,
                    line,
                )

    # --- records ---------------------------------------------------------------------------

    def emit(
        self,
        engine: Engine,
        opcode: str,
        partitions: int,
        free_size: int,
        dtype: str,
        out_dtype: str,
        reads: tuple[Region, ...],
        writes: tuple[Region, ...],
        src_memory: Memory | None,
        dst_memory: Memory | None,
        line: int,
        bytes: int = 0,
        flops: int = 0,
        vector_ops: int = 0,
        is_transpose: bool = False,
        accumulate: bool = False,
        matmul_kmn: tuple[int, int, int] | None = None,
        dma_chunk_bytes: int = 0,
        dma_chunks: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> TraceRecord:
        records = self.trace.records
        record = TraceRecord(
            len(records),
            engine,
            opcode,
            partitions,
            free_size,
            dtype,
            out_dtype,
            reads,
            writes,
            src_memory,
            dst_memory,
            line,
            self.frames,
            bytes,
            flops,
            vector_ops,
            is_transpose,
            accumulate,
            matmul_kmn,
            dma_chunk_bytes,
            dma_chunks,
            {} if extra is None else extra,
        )
        records.append(record)
        if self.recorder is not None:
            self.recorder.emitted(record)
        return record

    def note_write(self, tensor: Tensor, region: Region, line: int, accumulate: bool) -> None:
        """Remember a write; two iterations of one affine loop writing the same place is an error."""
        tensor._written = True
        if tensor._root is not None:
            tensor._root._written = True
        if self.recorder is not None:
            self.recorder.wrote(tensor, region, line, accumulate)
        if self.write_log is not None:
            self.write_log.append(
                (tensor._tid, tensor._alloc_scopes, region, line, accumulate, self.frame_ints)
            )
        if accumulate or not self.affine_scopes:
            return
        self.check_affine_write(tensor._tid, tensor._alloc_scopes, region, line, self.frame_ints)

    def check_affine_write(
        self, tid: int, alloc: tuple[LoopScope, ...], region: Region, line: int, ints: tuple[int, ...]
    ) -> None:
        """Two iterations of one affine loop writing the same place is an error (`ints`: the
        write's loop frames as in `frame_ints`)."""
        for scope in self.affine_scopes:
            if scope in alloc:
                continue  # allocated inside this loop: a fresh buffer every iteration
            key = (tid, line, ints[2 * scope.depth + 2 :])
            if scope.iteration == 0:
                scope.first_writes.setdefault(key, region)
                continue
            first = scope.first_writes.get(key)
            if first is None:
                continue
            # Region.overlaps, inlined: this runs for every write in every affine loop
            for (a0, a1), (b0, b1) in zip(first.box, region.box):
                if a0 >= b1 or b0 >= a1:
                    break
            else:
                raise NkiError(
                    "err_unexpected_output_dependencies",
                    f"iterations 0 and {scope.iteration} of an affine_range loop (line "
                    f"{self.trace.loops[scope.loop_id].line}) write the same elements of "
                    f"'{self.tensor_name_of(tid)}'; "
                    "index the write by the loop variable, accumulate with +=, or use nl.sequential_range",
                    self.kernel_path,
                    line,
                )

    # --- loops -----------------------------------------------------------------------------

    def enter_loop(self, kind: LoopKind, trip_count: int, line: int, site: Any, nki_scope: bool) -> LoopScope:
        parent_id = self.scopes[-1].loop_id if self.scopes else None
        key = (site, parent_id)
        loop_id = self._loop_ids.get(key)
        if loop_id is None:
            loop_id = len(self._loop_ids)
            self._loop_ids[key] = loop_id
            self.trace.loops[loop_id] = LoopInfo(loop_id, kind, trip_count, line, parent_id)
        else:
            info = self.trace.loops[loop_id]
            info.trip_count = max(info.trip_count, trip_count)
        # only legacy NKI kills a tile made inside a loop when the loop ends
        scope = LoopScope(loop_id, kind, len(self.scopes), nki_scope and self.api.loop_scoped_tiles)
        self.scopes.append(scope)
        self.scope_tuple = tuple(self.scopes)
        if kind is LoopKind.AFFINE and self.api.affine_iterations_independent:
            self.affine_scopes.append(scope)
        self.frames = (*self.frames, loop_frame(loop_id, 0))
        self.frame_ints = (*self.frame_ints, loop_id, 0)
        return scope

    def set_iteration(self, scope: LoopScope, iteration: int) -> None:
        scope.iteration = iteration
        frames = self.frames
        depth = scope.depth
        self.frames = (*frames[:depth], loop_frame(scope.loop_id, iteration), *frames[depth + 1 :])
        ints = self.frame_ints
        self.frame_ints = (*ints[: 2 * depth + 1], iteration, *ints[2 * depth + 2 :])

    def exit_loop(self, scope: LoopScope) -> None:
        scope.active = False
        scope.first_writes = {}
        if self.scopes and self.scopes[-1] is scope:
            self.scopes.pop()
            self.frames = self.frames[: scope.depth]
            self.frame_ints = self.frame_ints[: 2 * scope.depth]
        else:  # a loop abandoned out of order (e.g. an exception unwinding); drop it and inner ones
            if scope in self.scopes:
                del self.scopes[scope.depth :]
                self.frames = self.frames[: scope.depth]
                self.frame_ints = self.frame_ints[: 2 * scope.depth]
        self.scope_tuple = tuple(self.scopes)
        if scope in self.affine_scopes:
            self.affine_scopes.remove(scope)


_new_object = object.__new__
_set_frame_loop = LoopFrame.__dict__["loop_id"].__set__
_set_frame_iteration = LoopFrame.__dict__["iteration"].__set__

# loop id -> its LoopFrames by iteration. Frames are immutable values, so every record (of
# every run) at the same loop iteration can share one; a frozen dataclass's __init__ is slow.
_FRAMES: dict[int, list[LoopFrame]] = {}
_MAX_SHARED_ITERATION = 4096  # iterations past this get their own frame


def loop_frame(loop_id: int, iteration: int) -> LoopFrame:
    frames = _FRAMES.get(loop_id)
    if frames is None:
        frames = _FRAMES[loop_id] = []
    if iteration < len(frames):
        return frames[iteration]
    if iteration >= _MAX_SHARED_ITERATION:
        return LoopFrame(loop_id, iteration)
    while len(frames) <= iteration:
        frame = _new_object(LoopFrame)
        _set_frame_loop(frame, loop_id)
        _set_frame_iteration(frame, len(frames))
        frames.append(frame)
    return frames[iteration]


# _tensor_info (and finish) fill every field of a TensorInfo: a field they do not know must fail here
if TensorInfo.__slots__ != (
    "tensor_id",
    "name",
    "shape",
    "dtype",
    "memory",
    "line",
    "block_dims",
    "is_input",
    "is_output",
    "alloc_loops",
):
    raise TypeError("TensorInfo gained or lost a field: update context._tensor_info")


def _tensor_info(
    tid: int, tensor: Tensor, name: str, line: int, is_input: bool, alloc_loops: tuple[LoopFrame, ...]
) -> TensorInfo:
    # fields stored directly (no dataclass __init__ call): this runs for every tile a kernel keeps
    info = _new_object(TensorInfo)
    info.tensor_id = tid
    info.name = name
    info.shape = tensor.shape
    info.dtype = dname(tensor.dtype)
    info.memory = tensor.memory
    info.line = line
    info.block_dims = tensor.block_dims
    info.is_input = is_input
    info.is_output = False
    info.alloc_loops = alloc_loops
    return info


_ACTIVE: KernelContext | None = None


def active_context() -> KernelContext | None:
    return _ACTIVE


_INTERACTIVE: KernelContext | None = None


def current() -> KernelContext:
    """The running kernel's context. API calls outside any run (e.g. at a kernel module's import)
    share an ad-hoc numeric context that never counts as a run."""
    global _INTERACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    if _INTERACTIVE is None:
        _INTERACTIVE = KernelContext("<interactive>", "<interactive>", numerics=True)
    return _INTERACTIVE


@contextmanager
def activate(ctx: KernelContext) -> Iterator[KernelContext]:
    global _ACTIVE
    previous = _ACTIVE
    _ACTIVE = ctx
    try:
        yield ctx
    finally:
        _ACTIVE = previous
