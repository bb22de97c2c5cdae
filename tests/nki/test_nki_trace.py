"""What the instruction trace records: engines, counts, regions, flops, DMA shape, loops."""

from __future__ import annotations

from collections import Counter

import numpy as np

from accelopt.nki.trace import Engine, LoopKind, Memory, Region, Trace

TILED_MATMUL = """
def mm(a_t, b):
    k, m = a_t.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mi in nl.affine_range(m // 128):
        for ni in nl.affine_range(n // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // 128):
                s = nl.load(a_t[ki * 128:(ki + 1) * 128, mi * 128:(mi + 1) * 128])
                mv = nl.load(b[ki * 128:(ki + 1) * 128, ni * 512:(ni + 1) * 512])
                acc += nisa.nc_matmul(s, mv)  # MATMUL
            res = nl.copy(acc)
            nl.store(out[mi * 128:(mi + 1) * 128, ni * 512:(ni + 1) * 512], value=res)
    return out
"""


def test_tiled_matmul_records(kernel, rng):
    k = kernel(TILED_MATMUL)
    a_t = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 1024)).astype(np.float32)
    run = k.run("mm", a_t, b)
    np.testing.assert_allclose(run.outputs[0], a_t.T @ b, rtol=1e-4, atol=1e-3)
    counts = Counter((r.engine, r.opcode) for r in run.trace.records)
    assert counts == {
        (Engine.DMA, "dma_load"): 16,
        (Engine.TENSOR, "nc_matmul"): 8,
        (Engine.UNASSIGNED, "memset"): 4,
        (Engine.UNASSIGNED, "psum_copy"): 4,
        (Engine.DMA, "dma_store"): 4,
    }
    matmuls = [r for r in run.trace.records if r.opcode == "nc_matmul"]
    assert all(r.accumulate and r.matmul_kmn == (128, 128, 512) for r in matmuls)
    assert all(r.flops == 2 * 128 * 128 * 512 * 2 for r in matmuls)  # fp32 operands count double
    assert {r.line for r in matmuls} == {k.line_of("# MATMUL")}
    assert all(r.src_memory is Memory.SBUF and r.dst_memory is Memory.PSUM for r in matmuls)
    # the accumulation target is the PSUM tile of the current (mi, ni) iteration
    acc_ids = {r.writes[0].tensor_id for r in matmuls}
    assert len(acc_ids) == 4 and all(run.trace.tensors[t].memory is Memory.PSUM for t in acc_ids)
    # loops: three nested affine loops with their trip counts; records carry the nest
    loops = sorted(run.trace.loops.values(), key=lambda lp: lp.loop_id)
    assert [(lp.kind, lp.trip_count, lp.parent_id) for lp in loops] == [
        (LoopKind.AFFINE, 2, None),
        (LoopKind.AFFINE, 2, 0),
        (LoopKind.AFFINE, 2, 1),
    ]
    assert [f.loop_id for f in matmuls[-1].loops] == [0, 1, 2]
    assert [f.iteration for f in matmuls[-1].loops] == [1, 1, 1]
    # regions are exact boxes over the declared tensors
    last_store = [r for r in run.trace.records if r.opcode == "dma_store"][-1]
    assert last_store.writes == (Region(2, ((128, 256), (512, 1024))),)
    info = run.trace.tensors
    assert info[0].is_input and info[0].name == "a_t" and info[2].is_output and info[2].name == "out"


def test_dma_chunks_follow_hbm_contiguity(kernel):
    k = kernel(
        """
        def k(x):
            a = nl.load(x[0:128, 0:512])
            b = nl.load(x[0:128, :])
            c = nl.load(x[0:1, :])
            return x
        """
    )
    run = k.run("k", np.zeros((256, 4096), np.float32), numerics=False)
    loads = [(r.dma_chunk_bytes, r.dma_chunks, r.bytes) for r in run.trace.records]
    assert loads == [(2048, 128, 128 * 512 * 4), (16384, 128, 128 * 4096 * 4), (16384, 1, 4096 * 4)]


def test_transposed_loads_move_single_elements(kernel):
    k = kernel(
        """
        def k(x):
            t = nl.load(x[nl.arange(4)[None, :], nl.arange(8)[:, None]])
            u = nl.load_transpose2d(x[0:4, 0:8])
            return x
        """
    )
    run = k.run("k", np.zeros((4, 8), np.float32), numerics=False)
    assert [(r.dma_chunk_bytes, r.dma_chunks) for r in run.trace.records] == [(4, 32), (4, 32)]
    assert run.trace.records[1].is_transpose


def test_nl_matmul_is_transpose_plus_matmul(kernel):
    k = kernel(
        """
        def k(a, b, a_t):
            x = nl.load(a)
            y = nl.load(b)
            xt = nl.load(a_t)
            p = nl.matmul(x, y)
            q = nl.matmul(xt, y, transpose_x=True)
            return a
        """
    )
    a, b = np.zeros((64, 32), np.float32), np.zeros((32, 16), np.float32)
    run = k.run("k", a, b, np.zeros((32, 64), np.float32), numerics=False)
    tensor_ops = [
        (r.opcode, r.is_transpose, r.matmul_kmn, r.flops)
        for r in run.trace.records
        if r.engine is Engine.TENSOR
    ]
    assert tensor_ops == [
        ("transpose", True, (64, 32, 64), 2 * 64 * 32 * 64 * 2),
        ("nc_matmul", False, (32, 64, 16), 2 * 32 * 64 * 16 * 2),
        ("nc_matmul", False, (32, 64, 16), 2 * 32 * 64 * 16 * 2),
    ]


def test_partition_broadcast_is_a_tensor_engine_op_and_engine_choices(kernel):
    k = kernel(
        """
        def k(row, x):
            r = nl.load(row)
            t = nl.load(x)
            wide = r.broadcast_to((128, 64))
            y = nl.multiply(t, wide)
            z = nl.exp(y)
            w = nl.add(z, 1.0)
            c = nisa.tensor_scalar(w, np.multiply, 2.0, engine=nisa.scalar_engine)
            return row
        """
    )
    run = k.run(
        "k",
        np.zeros((1, 64), np.bfloat16 if False else np.float32),
        np.zeros((128, 64), np.float32),
        numerics=False,
    )
    rec = {r.opcode if r.opcode != "tensor_scalar" else f"ts{i}": r for i, r in enumerate(run.trace.records)}
    assert rec["broadcast"].engine is Engine.TENSOR and rec["broadcast"].flops == 2 * 128 * 64 * 2
    assert rec["tensor_tensor"].engine is Engine.VECTOR and rec["tensor_tensor"].vector_ops == 128 * 64
    assert rec["activation"].engine is Engine.SCALAR
    scalars = [r for r in run.trace.records if r.opcode == "tensor_scalar"]
    assert scalars[0].engine is Engine.UNASSIGNED and set(scalars[0].extra["engines"]) == {
        "vector",
        "scalar",
        "gpsimd",
    }
    assert scalars[1].engine is Engine.SCALAR


def test_vector_ops_count_silu(kernel):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(x.shape[0] // 128):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
                nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, nl.sigmoid(t)))
            return out
        """
    )
    run = k.run("k", np.zeros((512, 64), np.float32), numerics=False)
    assert len(run.trace.records) == 4 * 4
    assert sum(r.vector_ops for r in run.trace.records) == 2 * 512 * 64
    assert sum(r.bytes for r in run.trace.records if r.engine is Engine.DMA) == 2 * 512 * 64 * 4


def test_trace_only_matches_numeric_trace(kernel, rng):
    k = kernel(TILED_MATMUL)
    a_t = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    numeric = k.run("mm", a_t, b)
    fast = k.run("mm", a_t, b, numerics=False)
    assert fast.trace.records == numeric.trace.records
    assert fast.trace.tensors == numeric.trace.tensors
    assert fast.trace.loops == numeric.trace.loops
    assert not fast.trace.numerics
    assert fast.outputs[0].shape == (128, 512) and np.isnan(fast.outputs[0]).all()


def test_trace_round_trips_through_json(kernel, rng):
    k = kernel(TILED_MATMUL)
    run = k.run("mm", np.zeros((128, 128), np.float32), np.zeros((128, 512), np.float32), numerics=False)
    again = Trace.from_json(run.trace.to_json())
    assert again == run.trace


def test_tensors_allocated_in_loops_record_their_loop_frames(kernel):
    k = kernel(
        """
        def k(x):
            big = nl.ndarray((2, par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.affine_range(2):
                big[i, :, :] = nl.load(x[i * 128:(i + 1) * 128, :])
            return x
        """
    )
    run = k.run("k", np.zeros((256, 64), np.float32), numerics=False)
    loads = run.trace.records
    assert [r.writes[0].box for r in loads] == [((0, 1), (0, 128), (0, 64)), ((1, 2), (0, 128), (0, 64))]
    big = next(t for t in run.trace.tensors.values() if t.name == "big")
    assert big.block_dims == 1 and big.alloc_loops == ()


def test_every_region_names_a_registered_tensor(kernel, rng):
    k = kernel(
        TILED_MATMUL
        + """
def mixed(x, row):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((2, par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        buf[i] = nl.load(x[i * 128:(i + 1) * 128, :])
        t = nl.exp(buf[i])
        r = nl.load(row).broadcast_to((128, 64))
        acc = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)
        acc += nl.matmul(t, r, transpose_x=True)
        nl.store(out[i * 128:i * 128 + 64, :], value=nl.add(acc, t[0:64, :]))
    return out
"""
    )
    runs = [
        k.run("mm", np.zeros((128, 128), np.float32), np.zeros((128, 512), np.float32)),
        k.run("mixed", rng.standard_normal((256, 64)).astype(np.float32), np.ones((1, 64), np.float32)),
    ]
    for run in runs:
        known = set(run.trace.tensors)
        for record in run.trace.records:
            for region in (*record.reads, *record.writes):
                assert region.tensor_id in known, (record.opcode, region)
                shape = run.trace.tensors[region.tensor_id].shape
                assert len(region.box) == len(shape)
                assert all(0 <= lo <= hi <= n for (lo, hi), n in zip(region.box, shape))


def test_bf16_matmul_flops_are_not_doubled(kernel):
    k = kernel(
        """
        def k(a, b):
            acc = nl.zeros((32, 64), dtype=nl.float32, buffer=nl.psum)
            acc += nisa.nc_matmul(nl.load(a), nl.load(b))
            return a
        """
    )
    run = k.run("k", np.zeros((16, 32), "bfloat16"), np.zeros((16, 64), "bfloat16"), numerics=False)
    (mm,) = [r for r in run.trace.records if r.opcode == "nc_matmul"]
    assert mm.flops == 2 * 16 * 32 * 64 and mm.dtype == "bfloat16" and mm.out_dtype == "float32"
