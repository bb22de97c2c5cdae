"""Hand-built traces for timing-model tests: the records an emulated kernel would emit, written
directly so each test states exactly the instruction stream it times."""

from __future__ import annotations

from collections.abc import Sequence

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

Box = tuple[tuple[int, int], ...]
_ITEM = {"float32": 4, "bfloat16": 2}


def full(shape: Sequence[int]) -> Box:
    return tuple((0, n) for n in shape)


class TraceBuilder:
    def __init__(self, name: str = "kernel") -> None:
        self.trace = Trace(kernel_name=name, source_path=f"{name}.py", numerics=False)
        self.frames: tuple[LoopFrame, ...] = ()
        self.line = 1

    # --- declarations ------------------------------------------------------------------------

    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        memory: Memory = Memory.SBUF,
        dtype: str = "float32",
        *,
        block_dims: int = 0,
        is_input: bool = False,
        is_output: bool = False,
        in_loop: bool = False,
        line: int | None = None,
    ) -> int:
        tid = len(self.trace.tensors)
        self.trace.tensors[tid] = TensorInfo(
            tid,
            name,
            tuple(shape),
            dtype,
            memory,
            line if line is not None else self.line,
            block_dims=block_dims,
            is_input=is_input,
            is_output=is_output,
            alloc_loops=self.frames if in_loop else (),
        )
        return tid

    def loop(self, kind: LoopKind, trip: int, line: int = 1) -> int:
        lid = len(self.trace.loops)
        parent = self.frames[-1].loop_id if self.frames else None
        self.trace.loops[lid] = LoopInfo(lid, kind, trip, line, parent)
        return lid

    def enter(self, loop_id: int, iteration: int) -> None:
        """Set the current iteration of `loop_id` (entering it if it is not the innermost)."""
        frames = [f for f in self.frames if f.loop_id != loop_id]
        parent = self.trace.loops[loop_id].parent_id
        keep = []
        for f in frames:
            keep.append(f)
            if f.loop_id == parent:
                break
        if parent is None:
            keep = []
        self.frames = (*keep, LoopFrame(loop_id, iteration))

    def leave(self) -> None:
        self.frames = self.frames[:-1]

    # --- instructions --------------------------------------------------------------------------

    def _item(self, tid: int) -> int:
        return _ITEM.get(self.trace.tensors[tid].dtype, 4)

    def record(
        self,
        engine: Engine,
        opcode: str,
        reads,
        writes,
        *,
        free_size: int,
        partitions: int = 128,
        line: int | None = None,
        dtype: str = "float32",
        src: Memory | None = None,
        dst: Memory | None = None,
        **fields,
    ) -> TraceRecord:
        rec = TraceRecord(
            index=len(self.trace.records),
            engine=engine,
            opcode=opcode,
            partitions=partitions,
            free_size=free_size,
            dtype=dtype,
            out_dtype=dtype,
            reads=tuple(Region(t, tuple(b)) for t, b in reads),
            writes=tuple(Region(t, tuple(b)) for t, b in writes),
            src_memory=src,
            dst_memory=dst,
            line=line if line is not None else self.line,
            loops=self.frames,
            **fields,
        )
        self.trace.records.append(rec)
        return rec

    def load(
        self,
        dst: int,
        dst_box: Box,
        src: int,
        src_box: Box,
        *,
        line: int | None = None,
        opcode: str = "dma_load",
    ) -> TraceRecord:
        item = self._item(src)
        rows = src_box[0][1] - src_box[0][0]
        cols = 1
        for a, b in src_box[1:]:
            cols *= b - a
        src_cols = self.trace.tensors[src].shape[-1]
        chunk = (
            cols * item if cols == src_cols or len(src_box) == 1 else (src_box[-1][1] - src_box[-1][0]) * item
        )
        return self.record(
            Engine.DMA,
            opcode,
            [(src, src_box)],
            [(dst, dst_box)],
            free_size=cols,
            partitions=rows,
            line=line,
            dtype=self.trace.tensors[src].dtype,
            src=Memory.HBM,
            dst=self.trace.tensors[dst].memory,
            bytes=rows * cols * item,
            dma_chunk_bytes=chunk,
            dma_chunks=max(1, rows * cols * item // chunk),
        )

    def store(
        self, dst: int, dst_box: Box, src: int, src_box: Box, *, line: int | None = None
    ) -> TraceRecord:
        item = self._item(dst)
        rows = dst_box[0][1] - dst_box[0][0]
        cols = 1
        for a, b in dst_box[1:]:
            cols *= b - a
        chunk = (dst_box[-1][1] - dst_box[-1][0]) * item
        return self.record(
            Engine.DMA,
            "dma_store",
            [(src, src_box)],
            [(dst, dst_box)],
            free_size=cols,
            partitions=rows,
            line=line,
            dtype=self.trace.tensors[dst].dtype,
            src=self.trace.tensors[src].memory,
            dst=Memory.HBM,
            bytes=rows * cols * item,
            dma_chunk_bytes=chunk,
            dma_chunks=max(1, rows * cols * item // chunk),
        )

    def matmul(
        self,
        out: int,
        out_box: Box,
        stationary: int,
        st_box: Box,
        moving: int,
        mv_box: Box,
        *,
        dtype: str = "bfloat16",
        accumulate: bool = True,
        transpose: bool = False,
        line: int | None = None,
    ) -> TraceRecord:
        k = st_box[-2][1] - st_box[-2][0]
        m = st_box[-1][1] - st_box[-1][0]
        n = mv_box[-1][1] - mv_box[-1][0]
        flops = 2 * k * m * n * (2 if dtype == "float32" else 1)
        reads = [(stationary, st_box), (moving, mv_box)]
        if accumulate:
            reads.append((out, out_box))
        return self.record(
            Engine.TENSOR,
            "transpose" if transpose else "nc_matmul",
            reads,
            [(out, out_box)],
            free_size=n,
            partitions=k,
            line=line,
            dtype=dtype,
            src=Memory.SBUF,
            dst=Memory.PSUM,
            flops=flops,
            matmul_kmn=(k, m, n),
            accumulate=accumulate,
            is_transpose=transpose,
        )

    def compute(
        self,
        engine: Engine,
        opcode: str,
        reads,
        writes,
        *,
        free_size: int,
        line: int | None = None,
        dtype: str = "float32",
        vector_ops: int = 0,
        **extra,
    ) -> TraceRecord:
        return self.record(
            engine,
            opcode,
            reads,
            writes,
            free_size=free_size,
            line=line,
            dtype=dtype,
            vector_ops=vector_ops,
            src=Memory.SBUF,
            dst=Memory.SBUF,
            extra=extra,
        )
