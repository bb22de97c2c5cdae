"""Property tests: the timing model on random (valid-shaped) traces never fails and keeps its
invariants — dependencies respected, everything inside the kernel's time, no faster than the
roofline."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelopt.hardware.specs import TRN1
from accelopt.nki.trace import Engine, LoopKind, Memory
from accelopt.profiling.metrics import profile_trace
from accelopt.profiling.timeline import ModelOptions, schedule

from .tracebuild import TraceBuilder, full

ALL_OFF = ModelOptions(False, False, False, False, False, False)

_COMPUTE = [
    (Engine.VECTOR, "tensor_tensor"),
    (Engine.VECTOR, "tensor_reduce"),
    (Engine.SCALAR, "activation"),
    (Engine.GPSIMD, "iota"),
    (Engine.UNASSIGNED, "tensor_scalar"),
    (Engine.UNASSIGNED, "tensor_copy"),
]


@st.composite
def traces(draw):
    b = TraceBuilder("random")
    free = draw(st.sampled_from([64, 256, 512]))
    tiles = draw(st.integers(1, 3))
    x = b.tensor("x", (128 * tiles, free), Memory.HBM, is_input=True)
    y = b.tensor("y", (128 * tiles, free), Memory.HBM, is_output=True)
    sb = [b.tensor(f"s{i}", (128, free)) for i in range(3)]
    blocks = b.tensor("blk", (4, 128, free), block_dims=1)
    ps = b.tensor("p", (128, free), Memory.PSUM)
    w = b.tensor("w", (128, 128), dtype="bfloat16")
    r = b.tensor("r", (128, free), dtype="bfloat16")
    loop = b.loop(draw(st.sampled_from([LoopKind.AFFINE, LoopKind.SEQUENTIAL])), tiles)
    tile = full((128, free))
    for i in range(tiles):
        b.enter(loop, i)
        rows = ((128 * i, 128 * i + 128), (0, free))
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.integers(0, 5))
            line = draw(st.integers(1, 9))
            if kind == 0:
                b.load(draw(st.sampled_from(sb)), tile, x, rows, line=line)
            elif kind == 1:
                b.store(y, rows, draw(st.sampled_from(sb)), tile, line=line)
            elif kind == 2:
                k = draw(st.integers(0, 3))
                box = ((k, k + 1), (0, 128), (0, free))
                if draw(st.booleans()):
                    b.load(blocks, box, x, rows, line=line)
                else:
                    src = draw(st.sampled_from(sb))
                    b.compute(
                        Engine.VECTOR,
                        "tensor_copy",
                        [(src, tile)],
                        [(blocks, box)],
                        free_size=free,
                        line=line,
                        vector_ops=0,
                    )
            elif kind == 3:
                b.matmul(ps, tile, w, full((128, 128)), r, full((128, free)), line=line)
            else:
                engine, opcode = draw(st.sampled_from(_COMPUTE))
                src = draw(st.sampled_from([*sb, ps])) if engine is not Engine.GPSIMD else sb[0]
                dst = draw(st.sampled_from(sb))
                reads = [] if opcode == "iota" else [(src, tile)]
                extra = {"engines": ["vector", "scalar"]} if engine is Engine.UNASSIGNED else {}
                b.compute(
                    engine,
                    opcode,
                    reads,
                    [(dst, tile)],
                    free_size=free,
                    line=line,
                    vector_ops=128 * free,
                    **extra,
                )
    return b.trace


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.sampled_from(["trn1", "trn2"]))
def test_random_traces_keep_the_model_invariants(trace, hardware) -> None:
    profile, timeline = profile_trace(trace, hardware)
    assert profile.latency_ms >= profile.peak_latency_ms
    for op in timeline.ops:
        assert 0 <= op.start <= op.end <= timeline.total_time + 1e-15
    for busy in timeline.engine_busy.values():
        assert busy <= timeline.total_time + 1e-15

    plain = schedule(trace, TRN1, ALL_OFF)
    by_record = {op.record: op for op in plain.ops}
    records = trace.records
    for j, later in enumerate(records):
        for i in range(j):
            earlier = records[i]
            if any(w.overlaps(r) for w in earlier.writes for r in (*later.reads, *later.writes)) or any(
                r.overlaps(w) for r in earlier.reads for w in later.writes
            ):
                assert by_record[j].start >= by_record[i].end - 1e-12, (i, j)
