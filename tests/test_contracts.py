"""The models that cross process and protocol boundaries round-trip without loss."""

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
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Candidate
from accelopt.search.events import CandidateEvent, search_event_adapter


def test_trace_round_trips_through_json():
    trace = Trace(kernel_name="k", source_path="k.py")
    trace.loops[0] = LoopInfo(0, LoopKind.AFFINE, 4, 10)
    trace.tensors[1] = TensorInfo(1, "x", (4, 128, 512), "float32", Memory.SBUF, 12, block_dims=1)
    trace.records.append(
        TraceRecord(
            index=0,
            engine=Engine.DMA,
            opcode="dma_load",
            partitions=128,
            free_size=512,
            dtype="float32",
            out_dtype="float32",
            reads=(Region(0, ((0, 128), (0, 512))),),
            writes=(Region(1, ((2, 3), (0, 128), (0, 512))),),
            src_memory=Memory.HBM,
            dst_memory=Memory.SBUF,
            line=13,
            loops=(LoopFrame(0, 2),),
            bytes=128 * 512 * 4,
            dma_chunk_bytes=2048,
            dma_chunks=128,
            extra={"stride_bytes": 4},
        )
    )
    again = Trace.from_json(trace.to_json())
    assert again == trace


def test_region_overlap():
    a = Region(1, ((0, 128), (0, 512)))
    assert a.overlaps(Region(1, ((64, 65), (511, 600))))
    assert not a.overlaps(Region(1, ((0, 128), (512, 600))))
    assert not a.overlaps(Region(2, ((0, 128), (0, 512))))


def test_normalized_hash_ignores_comments_and_blank_lines():
    a = KernelSource(text="x = 1  # note\n\n\ny = 2\n", name="k")
    b = KernelSource(text="x = 1\ny = 2", name="k")
    c = KernelSource(text="x = 1\ny = 3", name="k")
    assert a.normalized_hash() == b.normalized_hash() != c.normalized_hash()


def test_search_events_are_discriminated():
    cand = Candidate(id="c0", parent_id=None, iteration=0, kernel=KernelSource(text="", name="k"))
    event = search_event_adapter.validate_json(
        CandidateEvent(search_id="s", candidate=cand).model_dump_json()
    )
    assert isinstance(event, CandidateEvent)
