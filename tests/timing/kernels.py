"""Small hand-built kernel traces shared by the timing tests (each one a structure a real
kernel has: a streaming elementwise loop, a tiled matmul, a two-engine pipeline...)."""

from __future__ import annotations

from accelopt.nki.trace import Engine, LoopKind, Memory, Trace

from .tracebuild import TraceBuilder, full


def streaming(tiles: int = 4, free: int = 2048, kind: LoopKind = LoopKind.AFFINE) -> Trace:
    """for i: t = load(x[i]); o = activation(t); store(y[i], o) — HBM-bound."""
    b = TraceBuilder("streaming")
    x = b.tensor("x", (128 * tiles, free), Memory.HBM, is_input=True)
    y = b.tensor("y", (128 * tiles, free), Memory.HBM, is_output=True)
    loop = b.loop(kind, tiles)
    tile = full((128, free))
    for i in range(tiles):
        b.enter(loop, i)
        t = b.tensor("t", (128, free), in_loop=True, line=5)
        o = b.tensor("o", (128, free), in_loop=True, line=6)
        rows = ((128 * i, 128 * i + 128), (0, free))
        b.load(t, tile, x, rows, line=5)
        b.compute(
            Engine.SCALAR,
            "activation",
            [(t, tile)],
            [(o, tile)],
            free_size=free,
            line=6,
            vector_ops=128 * free,
        )
        b.store(y, rows, o, tile, line=7)
    return b.trace


def two_engine_pipeline(iterations: int = 8, free: int = 2048, kind: LoopKind = LoopKind.AFFINE) -> Trace:
    """Each iteration: Scalar activation on a resident tile, then a Vector op on its result."""
    b = TraceBuilder("pipeline")
    src = b.tensor("src", (128, free))
    tile = full((128, free))
    b.compute(Engine.VECTOR, "memset", [], [(src, tile)], free_size=free, line=2)
    loop = b.loop(kind, iterations)
    for i in range(iterations):
        b.enter(loop, i)
        a = b.tensor("a", (128, free), in_loop=True, line=4)
        c = b.tensor("c", (128, free), in_loop=True, line=5)
        b.compute(Engine.SCALAR, "activation", [(src, tile)], [(a, tile)], free_size=free, line=4)
        b.compute(Engine.VECTOR, "tensor_scalar", [(a, tile)], [(c, tile)], free_size=free, line=5)
    return b.trace


def tiled_matmul(m_tiles: int = 2, n_tiles: int = 2, k_tiles: int = 4, dtype: str = "bfloat16") -> Trace:
    """for m, n: psum = 0; for k: load lhsT[k, m], rhs[k, n]; psum += matmul; copy; store."""
    b = TraceBuilder("matmul")
    K, M, N = 128 * k_tiles, 128 * m_tiles, 512 * n_tiles
    lhsT = b.tensor("lhsT", (K, M), Memory.HBM, dtype, is_input=True)
    rhs = b.tensor("rhs", (K, N), Memory.HBM, dtype, is_input=True)
    out = b.tensor("out", (M, N), Memory.HBM, dtype, is_output=True)
    lm, ln = b.loop(LoopKind.AFFINE, m_tiles), None
    for m in range(m_tiles):
        b.enter(lm, m)
        if ln is None:
            ln = b.loop(LoopKind.AFFINE, n_tiles)
        lk = None
        for n in range(n_tiles):
            b.enter(ln, n)
            if lk is None:
                lk = b.loop(LoopKind.AFFINE, k_tiles)
            acc = b.tensor("acc", (128, 512), Memory.PSUM, "float32", in_loop=True, line=10)
            b.compute(Engine.VECTOR, "memset", [], [(acc, full((128, 512)))], free_size=512, line=10)
            for k in range(k_tiles):
                b.enter(lk, k)
                a = b.tensor("a", (128, 128), dtype=dtype, in_loop=True, line=12)
                r = b.tensor("r", (128, 512), dtype=dtype, in_loop=True, line=13)
                b.load(
                    a, full((128, 128)), lhsT, ((128 * k, 128 * k + 128), (128 * m, 128 * m + 128)), line=12
                )
                b.load(
                    r, full((128, 512)), rhs, ((128 * k, 128 * k + 128), (512 * n, 512 * n + 512)), line=13
                )
                b.matmul(
                    acc, full((128, 512)), a, full((128, 128)), r, full((128, 512)), dtype=dtype, line=14
                )
            b.leave()
            res = b.tensor("res", (128, 512), dtype=dtype, in_loop=True, line=15)
            b.record(
                Engine.UNASSIGNED,
                "psum_copy",
                [(acc, full((128, 512)))],
                [(res, full((128, 512)))],
                free_size=512,
                line=15,
                src=Memory.PSUM,
                dst=Memory.SBUF,
                extra={"engines": ["vector", "scalar"]},
            )
            b.store(out, ((128 * m, 128 * m + 128), (512 * n, 512 * n + 512)), res, full((128, 512)), line=16)
    return b.trace


def invariant_load(iterations: int = 8, free: int = 1024) -> Trace:
    """for i: w = load(W) (same every iteration); x = load(X[i]); store(Y[i], x * w)."""
    b = TraceBuilder("invariant")
    W = b.tensor("W", (128, free), Memory.HBM, is_input=True)
    X = b.tensor("X", (128 * iterations, free), Memory.HBM, is_input=True)
    Y = b.tensor("Y", (128 * iterations, free), Memory.HBM, is_output=True)
    loop = b.loop(LoopKind.AFFINE, iterations)
    tile = full((128, free))
    for i in range(iterations):
        b.enter(loop, i)
        w = b.tensor("w", (128, free), in_loop=True, line=4)
        x = b.tensor("x", (128, free), in_loop=True, line=5)
        o = b.tensor("o", (128, free), in_loop=True, line=6)
        rows = ((128 * i, 128 * i + 128), (0, free))
        b.load(w, tile, W, full((128, free)), line=4)
        b.load(x, tile, X, rows, line=5)
        b.compute(
            Engine.VECTOR,
            "tensor_tensor",
            [(x, tile), (w, tile)],
            [(o, tile)],
            free_size=free,
            line=6,
            vector_ops=128 * free,
        )
        b.store(Y, rows, o, tile, line=7)
    return b.trace


def many_live_tiles(tiles: int = 8, free: int = 8192) -> Trace:
    """Load `tiles` [128, free] fp32 tiles (all live at once), then reduce each: the live set is
    tiles * free * 4 bytes per partition."""
    b = TraceBuilder("live")
    X = b.tensor("X", (128 * tiles, free), Memory.HBM, is_input=True)
    Y = b.tensor("Y", (128, tiles), Memory.HBM, is_output=True)
    tile = full((128, free))
    held = []
    for i in range(tiles):
        t = b.tensor(f"t{i}", (128, free), line=10 + i)
        b.load(t, tile, X, ((128 * i, 128 * i + 128), (0, free)), line=10 + i)
        held.append(t)
    sums = b.tensor("sums", (128, tiles), line=30)
    for i, t in enumerate(held):
        b.compute(
            Engine.VECTOR,
            "tensor_reduce",
            [(t, tile)],
            [(sums, ((0, 128), (i, i + 1)))],
            free_size=free,
            line=31,
            vector_ops=128 * free,
        )
    b.store(Y, full((128, tiles)), sums, full((128, tiles)), line=32)
    return b.trace


def unassigned_copies(count: int = 16, free: int = 2048) -> Trace:
    """Independent SBUF copies the kernel left to the compiler."""
    b = TraceBuilder("copies")
    src = b.tensor("src", (128, free))
    tile = full((128, free))
    b.compute(Engine.VECTOR, "memset", [], [(src, tile)], free_size=free, line=1)
    for i in range(count):
        dst = b.tensor(f"d{i}", (128, free), line=3)
        b.record(
            Engine.UNASSIGNED,
            "tensor_copy",
            [(src, tile)],
            [(dst, tile)],
            free_size=free,
            line=3,
            src=Memory.SBUF,
            dst=Memory.SBUF,
            extra={"engines": ["vector", "scalar", "gpsimd"]},
        )
    return b.trace
