"""Trace-only runs fast-forward regular loops (accelopt.nki.fast.fastforward): the first two or three
iterations and the last one run, the middle ones are written from a template. Numeric runs never
fast-forward, so a trace-only run must record byte for byte what it records without fast-forward
and what the numeric run records, fail with the same error at the same line, and leave the
kernel's Python values after the loop as a full run does. Each test also checks, through a spy
on fastforward._synthesize, that synthesis did (or did not) happen and over which iterations."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelopt.nki import runtime
from accelopt.nki.errors import NkiError
from accelopt.nki.fast import fastforward
from accelopt.nki.trace import Trace

if TYPE_CHECKING:
    from conftest import KernelFile

# --- instruments ---------------------------------------------------------------------------------


# A loop runs iterations 0 and 1 (and 2 if iteration 0 differs) to learn its step
FIRST_SYNTHESIZED = (2, 3)


@dataclass
class Span:
    """One call of fastforward._synthesize: iterations start..last of the loop at `line`."""

    line: int
    trip: int
    start: int
    last: int
    raised: str | None = None  # the error code a synthesized iteration raised, if any

    @property
    def count(self) -> int:
        return self.last - self.start + 1


def _spans_of(spans: list[Span], line: int) -> list[Span]:
    """The syntheses of the loop at `line`; each must start right after the iterations run to
    learn the step."""
    found = [span for span in spans if span.line == line]
    for span in found:
        assert span.start in FIRST_SYNTHESIZED and span.start <= span.last, span
    return found


@pytest.fixture
def synthesized(monkeypatch: pytest.MonkeyPatch) -> list[Span]:
    spans: list[Span] = []
    original = fastforward._synthesize

    def spy(ctx: Any, scope: Any, template: Any, start: int, last: int) -> Any:
        loop = ctx.trace.loops[scope.loop_id]
        span = Span(loop.line, loop.trip_count, start, last)
        spans.append(span)
        try:
            return original(ctx, scope, template, start, last)
        except NkiError as error:
            span.raised = error.code
            raise

    monkeypatch.setattr(fastforward, "_synthesize", spy)
    return spans


@contextmanager
def _line_runs(path: str, line: int) -> Iterator[list[int]]:
    """Counts how often the kernel's Python runs line `line` of `path`."""
    hits = [0]

    def local(frame: Any, event: str, _arg: Any) -> Callable[..., Any]:
        if event == "line" and frame.f_lineno == line:
            hits[0] += 1
        return local

    def calls(frame: Any, _event: str, _arg: Any) -> Callable[..., Any] | None:
        return local if frame.f_code.co_filename == path else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        yield hits
    finally:
        sys.settrace(previous)


def _rows(trace: Trace) -> dict[str, Any]:
    data = trace.to_dict()
    data.pop("numerics")
    return data


@dataclass
class Runs:
    numeric: Trace
    plain: Trace  # trace-only, the fast paths off
    fast: Trace  # trace-only, fast-forward on


def _traces(k: KernelFile, inputs: list[np.ndarray], spans: list[Span]) -> Runs:
    plain = k.run("k", *inputs, numerics=False, fast_paths=False).trace
    numeric = k.run("k", *inputs, numerics=True).trace
    assert spans == [], "only trace-only runs with fast-forward on synthesize"
    fast = k.run("k", *inputs, numerics=False).trace
    return Runs(numeric, plain, fast)


def _assert_same(runs: Runs) -> None:
    assert runs.fast.to_json() == runs.plain.to_json(), "fast-forward changed the trace-only trace"
    assert _rows(runs.fast) == _rows(runs.numeric), "the trace-only trace is not the numeric run's"


def _error(
    k: KernelFile, inputs: list[np.ndarray], numerics: bool, fast_paths: bool = True
) -> tuple[str, str, str, int]:
    with pytest.raises(NkiError) as caught:
        k.run("k", *inputs, numerics=numerics, fast_paths=fast_paths)
    error = caught.value
    return error.code, error.message, error.path, error.line


def _inputs(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


# --- equivalence where the loop is fast-forwarded -----------------------------------------------


@dataclass(frozen=True)
class Case:
    source: str
    shapes: tuple[tuple[int, ...], ...]
    loops: tuple[str, ...]  # markers of the loops that synthesize (each once)
    # code after the loop reads what its iterations bind: the last iteration runs for real (else
    # it is synthesized too)
    read_after: bool = False


CASES = {
    "tile loop": Case(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                u = nl.exp(t)
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=u)
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "rows as a slice object": Case(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):  # LOOP
                rows = slice(i * 4, (i + 1) * 4)
                t = nl.load(x[rows, 0:16])
                nl.store(out[rows, 0:16], value=nl.exp(t))
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "psum accumulation through a subscript": Case(
        """
        def k(a_t, b):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((8, 16), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(8):  # LOOP
                s = nl.load(a_t[ki * 8:(ki + 1) * 8, 0:8])
                mv = nl.load(b[ki * 8:(ki + 1) * 8, 0:16])
                acc[...] += nisa.nc_matmul(s, mv)
            nl.store(out, value=acc)
            return out
        """,
        ((64, 8), (64, 16)),
        ("# LOOP",),
    ),
    "loop_reduce": Case(
        """
        def k(x):
            out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[i])
                acc = nl.loop_reduce(t, op=np.max, loop_indices=[i], dtype=nl.float32)
            nl.store(out, value=acc)
            return out
        """,
        ((8, 8, 16),),
        ("# LOOP",),
        read_after=True,
    ),
    "loop_reduce into a tile made before the loop": Case(
        """
        def k(x):
            out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            red = nl.ndarray((1, par_dim(8), 1), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[nl.arange(8)[:, None], 16 * i + nl.arange(16)[None, :]])
                s = nl.sum(t, axis=[1], keepdims=True)
                red[0, nl.arange(8)[:, None], 0] = nl.loop_reduce(s, op=np.add, loop_indices=[i], dtype=nl.float32)
            nl.store(out, value=red[0])
            return out
        """,
        ((8, 128),),
        ("# LOOP",),
    ),
    "sequential_range accumulating into a tile": Case(
        """
        def k(x):
            out = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((4, 16), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.sequential_range(8):  # LOOP
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                acc[...] = nl.add(acc, t)
            nl.store(out, value=acc)
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "plain range": Case(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in range(8):  # LOOP
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=nl.multiply(t, 2.0))
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "tile allocated in the body": Case(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):  # LOOP
                buf = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.sbuf)
                buf[...] = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                row = nl.load(x[i * 4:i * 4 + 1, 0:16])
                wide = row.broadcast_to((4, 16))
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=nl.add(nl.exp(buf), wide))
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "view of an input made before the loop": Case(
        """
        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            rows = x.reshape((32, 16))
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(rows[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
        ((8, 4, 16),),
        ("# LOOP",),
    ),
    "block tile filled by one loop and read by another": Case(
        """
        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((8, par_dim(4), 16), dtype=x.dtype, buffer=nl.sbuf)
            for i in nl.affine_range(8):  # FILL
                buf[i] = nl.load(x[i * 4:(i + 1) * 4, 0:16])
            for j in nl.affine_range(8):  # READ
                nl.store(out[j * 4:(j + 1) * 4, 0:16], value=nl.exp(buf[j]))
            return out
        """,
        ((32, 16),),
        ("# FILL", "# READ"),
    ),
    "a tile made before the loop copied into every block": Case(
        """
        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((8, par_dim(4), 16), dtype=x.dtype, buffer=nl.sbuf)
            u = nl.exp(nl.load(x[0:4, 0:16]))
            for i in nl.affine_range(8):  # FILL
                buf[i] = u
            for j in nl.affine_range(8):  # READ
                nl.store(out[j * 4:(j + 1) * 4, 0:16], value=buf[j])
            return out
        """,
        ((32, 16),),
        ("# FILL", "# READ"),
    ),
    "each iteration reads what the previous one wrote": Case(
        """
        def k(x):
            out = nl.ndarray((4, 36), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((4, 36), dtype=x.dtype, buffer=nl.sbuf)
            buf[0:4, 0:4] = nl.load(x[0:4, 0:4])
            for i in nl.sequential_range(8):  # LOOP
                t = nl.load(x[0:4, i * 4 + 4:i * 4 + 8])
                buf[0:4, i * 4 + 4:i * 4 + 8] = nl.add(buf[0:4, i * 4:i * 4 + 4], t)
            nl.store(out, value=buf)
            return out
        """,
        ((4, 36),),
        ("# LOOP",),
    ),
    "fixed mask and arange grids": Case(
        """
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(4)[:, None]
            i_f = nl.arange(16)[None, :]
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[i * 4 + i_p, i_f])
                nl.store(out[i * 4 + i_p, i_f], value=t, mask=(i_f < 12))
            return out
        """,
        ((32, 16),),
        ("# LOOP",),
    ),
    "two-dimensional step and a loop-dependent scalar": Case(
        """
        def k(x):
            out = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[i * 4:(i + 1) * 4, i * 8:i * 8 + 8])
                nl.store(out[28 - i * 4:32 - i * 4, i * 8:i * 8 + 8], value=nl.add(t, i * 2.0))
            return out
        """,
        ((32, 64),),
        ("# LOOP",),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fast_forwarded_loops_record_what_a_full_run_records(kernel, synthesized, case):
    k = kernel(case.source)
    runs = _traces(k, _inputs(*case.shapes), synthesized)
    _assert_same(runs)
    assert {span.line for span in synthesized} == {k.line_of(marker) for marker in case.loops}
    for marker in case.loops:
        (span,) = _spans_of(synthesized, k.line_of(marker))
        assert span.last == span.trip - (2 if case.read_after else 1)
    # one loaded kernel run again and again (its replay logs and synthesis makers cached)
    fn = k.load("k")
    again = [runtime.run_kernel(fn, _inputs(*case.shapes), numerics=False).trace.to_json() for _ in range(2)]
    assert again == [runs.fast.to_json()] * 2


def test_synthesized_iterations_do_not_run_the_kernels_python(kernel, synthesized):
    k = kernel(CASES["tile loop"].source)
    line = k.line_of("u = nl.exp(t)")
    (x,) = _inputs((32, 16))
    with _line_runs(str(k.path), line) as numeric:
        k.run("k", x, numerics=True)
    with _line_runs(str(k.path), line) as fast:
        k.run("k", x, numerics=False)
    (span,) = _spans_of(synthesized, k.line_of("# LOOP"))
    assert span.last == 7  # nothing after the loop reads `t` or `u`: the last one is synthesized too
    assert numeric == [8]
    assert fast == [8 - span.count]  # only the iterations run for real


def _tile_loop(trip: int) -> str:
    return f"""
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range({trip}):  # LOOP
        t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
        nl.store(out[i * 4:(i + 1) * 4, 0:16], value=nl.exp(t))
    return out
"""


def test_loops_of_min_trip_iterations_and_more_are_fast_forwarded_and_shorter_ones_are_not(
    kernel, synthesized
):
    trip = fastforward.MIN_TRIP
    k = kernel(_tile_loop(trip))
    _assert_same(_traces(k, _inputs((4 * trip, 16)), synthesized))
    (span,) = _spans_of(synthesized, k.line_of("# LOOP"))
    assert span.last == trip - 1
    synthesized.clear()
    short = kernel(_tile_loop(trip - 1))
    _assert_same(_traces(short, _inputs((4 * (trip - 1), 16)), synthesized))
    assert synthesized == []


def test_an_inner_loop_is_fast_forwarded_in_every_outer_iteration_run_for_real(kernel, synthesized):
    k = kernel(
        """
        def k(a_t, b):
            out = nl.ndarray((8, 96), dtype=nl.float32, buffer=nl.shared_hbm)
            for ni in nl.affine_range(6):  # OUTER
                acc = nl.zeros((8, 16), dtype=nl.float32, buffer=nl.psum)
                for ki in nl.affine_range(6):  # INNER
                    s = nl.load(a_t[ki * 8:(ki + 1) * 8, 0:8])
                    mv = nl.load(b[ki * 8:(ki + 1) * 8, ni * 16:(ni + 1) * 16])
                    acc += nisa.nc_matmul(s, mv)
                res = nl.copy(acc)
                nl.store(out[0:8, ni * 16:(ni + 1) * 16], value=res)
            return out
        """
    )
    _assert_same(_traces(k, _inputs((48, 8), (48, 96)), synthesized))
    (outer,) = _spans_of(synthesized, k.line_of("# OUTER"))
    inner = _spans_of(synthesized, k.line_of("# INNER"))
    assert outer.last == 5
    assert len(inner) == 6 - outer.count and all(span.last == 5 for span in inner)


TAIL_MASKED = """
def k(x):
    out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(4)[:, None]
    i_f = nl.arange(16)[None, :]
    for i in nl.affine_range(8):  # LOOP
        t = nl.load(x[i * 4 + i_p, i_f], mask=(i * 4 + i_p < ROWS))
        nl.store(out[i * 4 + i_p, i_f], value=t, mask=(i * 4 + i_p < ROWS))
    return out
"""


@pytest.mark.parametrize(
    ("rows", "last"),
    [
        (30, 6),  # only the last iteration is cut, and it runs for real
        (18, 3),  # iteration 4 is cut and 5-7 keep nothing: synthesis stops before 4
    ],
)
def test_a_mask_that_moves_with_the_loop_is_synthesized_only_while_it_keeps_the_same(
    kernel, synthesized, rows, last
):
    k = kernel(TAIL_MASKED.replace("ROWS", str(rows)))
    runs = _traces(k, _inputs((32, 16)), synthesized)
    assert [span.last for span in _spans_of(synthesized, k.line_of("# LOOP"))] == [last]
    assert len(synthesized) == 1
    _assert_same(runs)


# --- loops that must run in full -----------------------------------------------------------------


def _row_loop(*body: str, before: str = "pass") -> str:
    """A kernel whose loop of 8 loads a row `t` of x (shape (64, 1, 16)) as `body` says and
    stores it to row i of the output (`before`: a statement before the loop)."""
    lines = "\n".join("        " + line for line in body)
    return f"""
def k(x):
    out = nl.ndarray((8, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    {before}
    for i in nl.affine_range(8):
{lines}
        nl.store(out[i:i + 1, 0:16], value=t)
    return out
"""


# Each loads rows the first iterations do not predict: synthesizing would record wrong ones.
NOT_AFFINE = {
    "square index": _row_loop("t = nl.load(x[i * i])"),
    "floor division": _row_loop("t = nl.load(x[i // 2])"),
    "branch on the loop variable": _row_loop("r = i + 0", "if i - 4:", "    r = 40 - i", "t = nl.load(x[r])"),
    "carried counter": _row_loop("r = r + i", "t = nl.load(x[r])", before="r = 0"),
    "numpy function of the loop variable": _row_loop("t = nl.load(x[np.square(i)])"),
    "builtin of the loop variable": _row_loop("t = nl.load(x[abs(i - 3)])"),
    "list made in the body": _row_loop("offs = [0, 1, 3, 4, 6, 7, 9, 10]", "t = nl.load(x[offs[i]])"),
    "numpy array made in the body": _row_loop(
        "offs = np.array([0, 1, 3, 4, 6, 7, 9, 10])", "t = nl.load(x[offs[i]])"
    ),
    "augmented multiplication": _row_loop("r = i", "r *= i", "t = nl.load(x[r])"),
    "augmented floor division": _row_loop("r = i * 3", "r //= 2", "t = nl.load(x[r])"),
    "method of a loop-dependent number": _row_loop("r = i + 0", "t = nl.load(x[r.bit_length()])"),
}


@pytest.mark.parametrize("source", NOT_AFFINE.values(), ids=NOT_AFFINE.keys())
def test_loops_whose_offsets_are_not_affine_run_in_full(kernel, synthesized, source):
    k = kernel(source)
    runs = _traces(k, _inputs((64, 1, 16)), synthesized)
    _assert_same(runs)
    assert synthesized == []


def test_a_tuple_read_from_a_tile_and_indexed_by_the_loop_variable_runs_in_full(kernel, synthesized):
    # `dims` rests on the tile `x` but is a Python tuple: its items are no step apart
    k = kernel(
        """
        def k(x, y):
            out = nl.ndarray((8, 16), dtype=y.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):
                dims = x.shape[0:8]
                t = nl.load(y[dims[i]])
                nl.store(out[i:i + 1, 0:16], value=t)
            return out
        """
    )
    runs = _traces(k, _inputs((1, 2, 3, 5, 1, 4, 2, 3), (8, 1, 16)), synthesized)
    _assert_same(runs)
    assert synthesized == []


# Free names bound, when the loop starts, to something a synthesized iteration could miss.
DYNAMIC_REFUSALS = {
    "user helper": """
        def double(t):
            return nl.multiply(t, 2.0)

        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=double(t))
            return out
        """,
    "global list indexed by the loop variable": """
        OFFSETS = [0, 4, 8, 20, 16, 24, 12, 28]

        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):
                t = nl.load(x[OFFSETS[i]:OFFSETS[i] + 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
    "print": """
        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):
                print("iteration", i)
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
    "python bool mask that moves with the loop": """
        def k(x):
            out = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            k0 = 1
            for i in nl.affine_range(8):
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16], mask=(i + k0 != 5))  # iteration 4 loads nothing
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
    "free int updated in place": """
        def k(x):
            out = nl.ndarray((4, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            count = 0
            for i in nl.affine_range(8):
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                count += 1
            last = nl.load(x[count * 4 - 4:count * 4, 0:16])
            nl.store(out, value=last)
            return out
        """,
}


@pytest.mark.parametrize("source", DYNAMIC_REFUSALS.values(), ids=DYNAMIC_REFUSALS.keys())
def test_loops_reaching_unsafe_bindings_run_in_full(kernel, synthesized, capsys, source):
    k = kernel(source)
    runs = _traces(k, _inputs((32, 16)), synthesized)
    _assert_same(runs)
    assert synthesized == []
    if "print(" in source:
        # the kernel's own output is the full run's in every mode
        assert capsys.readouterr().out.count("iteration") == 3 * 8


def test_bindings_are_checked_each_time_the_loop_starts(kernel, synthesized):
    k = kernel(
        """
        def double(t):
            return nl.multiply(t, 2.0)

        def tile_loop(x, out, op):
            for i in nl.affine_range(8):  # LOOP
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=op(t))

        def k(x):
            out = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.shared_hbm)
            tile_loop(x, out[0:32, 0:16], nl.exp)
            tile_loop(x, out[0:32, 16:32], double)
            tile_loop(x, out[0:32, 0:16], nl.sqrt)
            return out
        """
    )
    runs = _traces(k, _inputs((32, 16)), synthesized)
    _assert_same(runs)
    # the first and third starts bind `op` to an NKI API, the second to the kernel's helper
    spans = _spans_of(synthesized, k.line_of("# LOOP"))
    assert len(synthesized) == len(spans) == 2 and all(span.last == 7 for span in spans)


# --- errors --------------------------------------------------------------------------------------

OUT_OF_BOUNDS = {
    "load past the end": (
        """
        def k(x):
            out = nl.ndarray((40, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(10):
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])  # FAILS
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
        (28, 16),
    ),
    "load before the start": (
        """
        def k(x):
            out = nl.ndarray((40, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(10):
                t = nl.load(x[(6 - i) * 4:(7 - i) * 4, 0:16])  # FAILS
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)
            return out
        """,
        (28, 16),
    ),
    "store past the end of the output": (
        """
        def k(x):
            out = nl.ndarray((28, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(10):
                t = nl.load(x[i * 4:(i + 1) * 4, 0:16])
                nl.store(out[i * 4:(i + 1) * 4, 0:16], value=t)  # FAILS
            return out
        """,
        (40, 16),
    ),
    "free axis of an sbuf tile made before the loop": (
        """
        def k(x):
            out = nl.ndarray((4, 28), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((4, 28), dtype=x.dtype, buffer=nl.sbuf)
            for i in nl.sequential_range(10):
                buf[0:4, i * 4:(i + 1) * 4] = nl.load(x[0:4, i * 4:(i + 1) * 4])  # FAILS
            nl.store(out, value=buf)
            return out
        """,
        (4, 40),
    ),
}


@pytest.mark.parametrize(("source", "shape"), OUT_OF_BOUNDS.values(), ids=OUT_OF_BOUNDS.keys())
def test_an_access_leaving_its_tensor_mid_loop_fails_as_in_a_full_run(kernel, synthesized, source, shape):
    k = kernel(source)
    inputs = _inputs(shape)
    plain = _error(k, inputs, numerics=False, fast_paths=False)
    numeric = _error(k, inputs, numerics=True)
    fast = _error(k, inputs, numerics=False)
    assert fast == plain == numeric
    assert fast[0] == "err_tensor_access_out_of_bound" and fast[3] == k.line_of("# FAILS")
    # iterations up to 6 were synthesized; iteration 7, the first out of bounds, ran for real
    (span,) = synthesized
    assert (span.last, span.raised) == (6, None) and span.start in FIRST_SYNTHESIZED


def test_an_affine_write_conflict_first_met_in_a_synthesized_iteration_fails_as_in_a_full_run(
    kernel, synthesized
):
    # Outer iteration 0 writes row 0 in every inner iteration j; outer iteration 1 writes row
    # 12 - 4j, which is row 0 first at j = 3: a synthesized iteration of the inner loop.
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            for o in nl.affine_range(2):
                for j in nl.sequential_range(8):  # INNER
                    t = nl.load(x[j * 4:(j + 1) * 4, 0:16])
                    nl.store(out[(12 - 4 * j) * o:(12 - 4 * j) * o + 1, 0:16], value=t[0:1, 0:16])  # FAILS
            return out
        """
    )
    inputs = _inputs((32, 16))
    plain = _error(k, inputs, numerics=False, fast_paths=False)
    numeric = _error(k, inputs, numerics=True)
    fast = _error(k, inputs, numerics=False)
    assert fast == plain == numeric
    assert fast[0] == "err_unexpected_output_dependencies" and fast[3] == k.line_of("# FAILS")
    spans = _spans_of(synthesized, k.line_of("# INNER"))
    assert [(span.last, span.raised) for span in spans] == [
        (7, None),  # outer iteration 0
        (3, "err_unexpected_output_dependencies"),  # outer iteration 1: j = 3 was synthesized
    ]


# --- Python state after the loop ----------------------------------------------------------------


def test_the_kernels_values_after_the_loop_are_the_last_iterations(kernel, synthesized):
    k = kernel(
        """
        def k(x):
            out = nl.ndarray((12, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((4, 16), dtype=x.dtype, buffer=nl.sbuf)
            for i in nl.sequential_range(8):  # LOOP
                row = i * 4
                buf[...] = nl.load(x[row:row + 4, 0:16])
            nl.store(out[i - 7:i - 3, 0:16], value=buf)
            after = nl.load(x[row:row + 4, 0:16])  # AFTER
            nl.store(out[4:8, 0:16], value=after)
            late = nl.ndarray((4, 16), dtype=x.dtype, buffer=nl.sbuf)
            late[...] = nl.exp(after)
            nl.store(out[8:12, 0:16], value=late)
            return out
        """
    )
    runs = _traces(k, _inputs((32, 16)), synthesized)
    _assert_same(runs)
    assert [span.last for span in _spans_of(synthesized, k.line_of("# LOOP"))] == [6]
    # `i` and `row` are iteration 7's: the load after the loop reads rows 28-32
    after = next(r for r in runs.fast.records if r.line == k.line_of("# AFTER"))
    assert after.reads[0].box == ((28, 32), (0, 16))


# --- the affine-loop check worked out for all synthesized iterations at once -----------------------

_bound = st.integers(-20, 20)


@st.composite
def _moving_boxes(draw: st.DrawFn) -> tuple[Any, ...]:
    dims = draw(st.integers(1, 3))
    fixed = [tuple(sorted(draw(st.tuples(_bound, _bound)))) for _ in range(dims)]
    box = [tuple(sorted(draw(st.tuples(_bound, _bound)))) for _ in range(dims)]
    step = draw(
        st.none() | st.lists(st.tuples(st.integers(-6, 6), st.integers(-6, 6)), min_size=dims, max_size=dims)
    )
    first = draw(st.integers(-5, 5))
    return (
        tuple(fixed),
        tuple(box),
        None if step is None else tuple(step),
        first,
        first + draw(st.integers(0, 8)),
    )


@given(_moving_boxes())
def test_a_moving_box_meets_a_fixed_one_exactly_when_some_step_overlaps_it(case):
    fixed, box, step, first, last = case

    def overlaps(s: int) -> bool:
        moved = (
            box if step is None else [(lo + s * dlo, hi + s * dhi) for (lo, hi), (dlo, dhi) in zip(box, step)]
        )
        return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(fixed, moved))

    assert fastforward.meets(fixed, box, step, first, last) == any(
        overlaps(s) for s in range(first, last + 1)
    )
