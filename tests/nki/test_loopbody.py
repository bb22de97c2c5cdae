"""The static reading of a kernel loop's body (accelopt.nki.fast.loopbody): which loops a trace-only
run may fast-forward, what their bodies read from outside, and the check of those free names'
bindings each time the loop starts. Run-level behaviour is in test_fastforward.py."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from types import FrameType, SimpleNamespace

import numpy as np
import pytest

from accelopt.nki import isa, language
from accelopt.nki.fast.loopbody import Body, body_at, read_loop
from accelopt.nki.instructions import SBUF, SHARED_HBM
from accelopt.nki.tensor import Tensor


def _read(source: str) -> Body | None:
    """read_loop on the first `for` of `source`."""
    tree = ast.parse(textwrap.dedent(source))
    loop = next(node for node in ast.walk(tree) if isinstance(node, ast.For))
    return read_loop(loop)


def _accepted(source: str) -> Body:
    body = _read(source)
    assert body is not None, "the loop should be fast-forwardable"
    return body


# --- accepted forms ----------------------------------------------------------------------------


def test_a_tile_loop_with_affine_slices_is_accepted_and_names_its_tiles_and_apis():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.load(x[i * T:(i + 1) * T, 0:16])
            nl.store(out[i * T:(i + 1) * T, 0:16], value=nl.exp(t))
        """
    )
    assert body.free_names == {"nl", "x", "out", "T"}
    assert body.tile_names == {"x", "out"}  # indexed by the loop variable
    assert body.api_names == {"nl"}  # called with loop-dependent arguments


def test_arange_grids_with_affine_offsets_and_a_fixed_mask_are_accepted():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            i_p = nl.arange(4)[:, None]
            t = nl.load(x[4 * i + i_p - 0, i_f], mask=(i_f < 12))
            nl.store(out[i * 4 + i_p, i_f + 16 * i], value=t)
        """
    )
    assert body.free_names == {"nl", "x", "out", "i_f"}
    assert body.tile_names == {"x", "out"}


def test_psum_accumulation_into_a_free_tile_is_accepted_and_the_tile_must_be_one():
    body = _accepted(
        """
        for k in nl.affine_range(6):
            s = nl.load(a_t[k * 8:(k + 1) * 8, 0:8])
            mv = nl.load(b[k * 8:(k + 1) * 8, 0:16])
            acc += nisa.nc_matmul(s, mv)
            acc2[...] += nisa.nc_matmul(s, mv)
        """
    )
    assert {"acc", "acc2", "a_t", "b"} <= body.tile_names
    assert body.api_names == {"nl", "nisa"}


def test_methods_of_tiles_made_in_the_body_and_nested_loops_are_accepted():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            b = nl.load(row[i:i + 1, 0:16])
            c = b.broadcast_to((4, 16))
            for j in nl.affine_range(2):
                t = nl.load(x[i * 8 + j * 4:i * 8 + j * 4 + 4, 0:16])
                nl.store(out[i * 8 + j * 4:i * 8 + j * 4 + 4, 0:16], value=nl.add(t, c))
            lo, hi = i * 4, -i + 40
            "loop end"
        """
    )
    assert "b" not in body.api_names and "c" not in body.free_names
    assert body.tile_names == {"row", "x", "out"}


def test_a_loop_independent_value_may_be_anything_the_bindings_allow():
    body = _accepted(
        """
        for i in range(8):
            n = len(shape) * 2
            t = nl.ndarray((4, n), dtype=nl.float32, buffer=nl.sbuf)
            t[...] = nl.load(x[i * 4:i * 4 + 4, 0:n])
        """
    )
    # `len` takes no loop-dependent argument: only its binding's purity matters, not being an API
    assert {"len", "shape"} <= body.free_names and "len" not in body.api_names


def test_a_mask_moving_with_the_loop_is_accepted_when_a_side_is_an_index_grid():
    made_here = _accepted(
        """
        for i in nl.affine_range(8):
            i_p = nl.arange(4)[:, None]
            t = nl.load(x[i * 4 + i_p, 0:16], mask=(i * 4 + i_p < 30))
        """
    )
    assert made_here.moving_masks and made_here.index_groups == ()
    # a free name: it must hold an index grid when the loop starts (else the comparison is a
    # Python bool that moves with the loop)
    free = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.load(x[i * 4 + i_p, 0:16], mask=(i * 4 + i_p < 30) & (i_f < 12 + i))
        """
    )
    assert free.moving_masks and set(free.index_groups) == {frozenset({"i_p"}), frozenset({"i_f"})}
    fixed = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.load(x[i * 4 + i_p, 0:16], mask=(i_p < 3))
        """
    )
    assert not fixed.moving_masks


# --- refusals the source decides -----------------------------------------------------------------

REFUSED = {
    "carried counter": """
        for i in nl.affine_range(8):
            total = total + 1
            t = nl.load(x[i])
        """,
    "name read before the iteration assigns it": """
        for i in nl.affine_range(8):
            nl.store(out[i], value=t)
            t = nl.load(x[i])
        """,
    "if on the loop variable": """
        for i in nl.affine_range(8):
            if i > 2:
                t = nl.load(x[i])
        """,
    "any branch": """
        for i in nl.affine_range(8):
            if flag:
                t = nl.load(x[i])
        """,
    "conditional expression": """
        for i in nl.affine_range(8):
            t = nl.load(x[i if flag else 0])
        """,
    "square of the loop variable": """
        for i in nl.affine_range(8):
            t = nl.load(x[i * i])
        """,
    "product of two loop variables": """
        for i in nl.affine_range(8):
            for j in nl.affine_range(2):
                t = nl.load(x[i * j])
        """,
    "floor division": """
        for i in nl.affine_range(8):
            t = nl.load(x[i // 2])
        """,
    "modulo": """
        for i in nl.affine_range(8):
            t = nl.load(x[i % 2])
        """,
    "true division": """
        for i in nl.affine_range(8):
            t = nl.load(x[i / 2])
        """,
    "comparison of numbers that moves with the loop": """
        for i in nl.affine_range(8):
            t = nl.load(x[i], mask=(i < 5))
        """,
    "break": """
        for i in nl.affine_range(8):
            t = nl.load(x[i])
            break
        """,
    "continue": """
        for i in nl.affine_range(8):
            continue
        """,
    "while": """
        for i in nl.affine_range(8):
            while cond:
                t = nl.load(x[i])
        """,
    "try": """
        for i in nl.affine_range(8):
            try:
                t = nl.load(x[i])
            except ValueError:
                pass
        """,
    "for-else": """
        for i in nl.affine_range(8):
            t = nl.load(x[i])
        else:
            t = None
        """,
    "tuple loop target": """
        for i, j in pairs:
            t = nl.load(x[i])
        """,
    "private attribute": """
        for i in nl.affine_range(8):
            t = x._data
        """,
    "random generator": """
        for i in nl.affine_range(8):
            t = np.random.rand(4)
        """,
    "method of the loop variable": """
        for i in nl.affine_range(8):
            t = nl.load(x[i.bit_length()])
        """,
    "starred argument": """
        for i in nl.affine_range(8):
            t = nl.load(*args)
        """,
    "attribute assignment": """
        for i in nl.affine_range(8):
            state.last = i
        """,
    "comprehension": """
        for i in nl.affine_range(8):
            t = [nl.load(x[i]) for _ in range(2)]
        """,
    "f-string": """
        for i in nl.affine_range(8):
            name = f"t{i}"
        """,
}


@pytest.mark.parametrize("source", REFUSED.values(), ids=REFUSED.keys())
def test_the_source_refuses_what_a_synthesized_iteration_could_not_reproduce(source):
    assert _read(source) is None


# A Python value made in the body that is not affine in the loop variable: nothing is carried
# between iterations, yet iterations 1 and 2 do not show the step of later ones (the runs of these
# loops are in test_fastforward.py: test_loops_whose_offsets_are_not_affine_run_in_full).
NOT_AFFINE_IN_BODY = {
    "list made in the body indexed by the loop variable": """
        for i in nl.affine_range(8):
            offs = [0, 1, 3, 4, 6, 7, 9, 10]
            t = nl.load(x[offs[i]])
        """,
    "augmented multiplication by the loop variable": """
        for i in nl.affine_range(8):
            r = i
            r *= i
            t = nl.load(x[r])
        """,
    "augmented floor division": """
        for i in nl.affine_range(8):
            r = i * 3
            r //= 2
            t = nl.load(x[r])
        """,
    "method of a loop-dependent number": """
        for i in nl.affine_range(8):
            r = i + 0
            t = nl.load(x[r.bit_length()])
        """,
}


@pytest.mark.parametrize("source", NOT_AFFINE_IN_BODY.values(), ids=NOT_AFFINE_IN_BODY.keys())
def test_the_source_refuses_non_affine_values_made_in_the_body(source):
    assert _read(source) is None


# --- what the source leaves to the bindings -----------------------------------------------------


def test_a_free_name_updated_in_place_or_indexed_by_the_loop_variable_must_be_a_tile():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            count += 1
            t = nl.load(x[offs[i]])
        """
    )
    assert {"count", "offs", "x"} <= body.tile_names


def test_a_free_function_called_with_loop_dependent_arguments_must_be_an_api():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.load(x[i])
            u = helper(t)
            print(i)
        """
    )
    assert {"helper", "print", "nl"} <= body.api_names


def test_a_value_made_by_a_call_and_indexed_by_the_loop_variable_must_come_from_an_api():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            offs = np.array([0, 1, 3, 4, 6, 7, 9, 10])
            t = nl.load(x[offs[i]])
        """
    )
    assert "np" in body.api_names  # numpy makes arrays, not tiles: refused when the loop starts
    assert body.bindings(_frame(nl=language, np=np, x=_tile())) is None


def _frame(**values: object) -> FrameType:
    """A module-level frame whose names are `values` (what Body.bindings reads at loop start)."""
    namespace: dict[str, object] = dict(values)
    exec("import sys\nframe = sys._getframe()", namespace)
    return namespace["frame"]  # type: ignore[return-value]


def _tile(shape: tuple[int, ...] = (32, 16)) -> Tensor:
    return Tensor(shape, np.dtype(np.float32), SHARED_HBM)


TILE_LOOP = """
for i in nl.affine_range(8):
    t = nl.load(x[i * T:(i + 1) * T, 0:16])
    u = op(t)
    nl.store(out[i * T:(i + 1) * T, 0:16], value=u)
"""


def test_bindings_return_the_reachable_tiles_when_every_free_name_is_safe():
    body = _accepted(TILE_LOOP)
    x, out = _tile(), _tile()
    tiles = body.bindings(_frame(nl=language, x=x, out=out, T=4, op=language.exp))
    assert tiles is not None and {id(t) for t in tiles} == {id(x), id(out)}
    # a view of a tile is a tile too
    assert body.bindings(_frame(nl=language, x=x[0:32, 0:16], out=out, T=4, op=isa.activation)) is not None


def _user_function(t: object) -> object:
    return t


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("op", _user_function),  # a helper could change Python state
        ("op", print),  # an impure builtin
        ("x", np.zeros((32, 16), np.float32)),  # indexed by the loop variable: must be a tile
        ("x", (0, 4, 8)),  # a plain tuple indexed by the loop variable is not affine
        ("nl", SimpleNamespace(load=language.load, store=language.store)),  # not the NKI module
        ("T", [4]),  # a mutable value
        ("T", None),  # (unbound below: a NameError to come)
    ],
)
def test_bindings_refuse_a_free_name_bound_to_something_unsafe(name, value):
    body = _accepted(TILE_LOOP)
    values: dict[str, object] = {"nl": language, "x": _tile(), "out": _tile(), "T": 4, "op": language.exp}
    if value is None:
        del values[name]
    else:
        values[name] = value
    assert body.bindings(_frame(**values)) is None


def test_bindings_require_an_index_grid_where_a_moving_mask_compares_a_free_name():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.load(x[i * 4:i * 4 + 4, 0:16], mask=(i + lim < 30))
        """
    )
    assert body.index_groups == (frozenset({"lim"}),)
    assert body.bindings(_frame(nl=language, x=_tile(), lim=language.arange(4)[:, None])) is not None
    assert body.bindings(_frame(nl=language, x=_tile(), lim=3)) is None


def test_bindings_accept_plain_values_numpy_and_sbuf_tiles():
    body = _accepted(
        """
        for i in nl.affine_range(8):
            t = nl.ndarray(shape, dtype=dt, buffer=nl.sbuf)
            t[...] = nl.load(x[i * 4:i * 4 + 4, 0:16])
            nl.store(buf[i * 4:i * 4 + 4, 0:16], value=np.float32(scale) * t)
        """
    )
    buf = Tensor((32, 16), np.dtype(np.float32), SBUF)
    frame = _frame(nl=language, np=np, shape=(4, 16), dt=np.float32, x=_tile(), buf=buf, scale=0.5)
    assert body.bindings(frame) is not None


# --- finding a loop in a kernel file -------------------------------------------------------------


def test_body_at_finds_each_loop_by_its_header_lines(tmp_path: Path):
    text = textwrap.dedent(
        """\
        def k(x, out):
            for i in nl.affine_range(
                8
            ):
                t = nl.load(x[i])
                nl.store(out[i], value=t)
            for j in nl.affine_range(8):
                if j:
                    pass
        """
    )
    path = tmp_path / "kernel.py"
    path.write_text(text)
    assert isinstance(body_at(str(path), 2), Body)
    assert isinstance(body_at(str(path), 4), Body)  # the header spans lines 2-4
    assert body_at(str(path), 5) is None  # not a header
    assert body_at(str(path), 7) is None  # a refused loop


# --- what is read after the loop -----------------------------------------------------------------


def _last_unread(source: str, marker: str = "# LOOP") -> bool:
    """Body.last_unread of the loop marked `marker` in the function of `source`."""
    tree = ast.parse(textwrap.dedent(source))
    function = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    line = next(n for n, text in enumerate(textwrap.dedent(source).splitlines(), 1) if marker in text)
    loop = next(node for node in ast.walk(function) if isinstance(node, ast.For) and node.lineno == line)
    body = read_loop(loop, function)
    assert body is not None
    return body.last_unread


@pytest.mark.parametrize(
    ("after", "unread"),
    [
        ("return out", True),  # only what the loop wrote into
        ("nl.store(out, value=t)\n    return out", False),  # a tile of the last iteration
        ("nl.store(out[i:i + 1], value=x[0:1])\n    return out", False),  # the loop variable
        ("return locals()['out']", False),  # every name
    ],
)
def test_the_last_iteration_is_synthesized_only_if_nothing_outside_the_loop_reads_what_it_binds(
    after, unread
):
    source = f"""
def k(x, out):
    for i in nl.affine_range(8):  # LOOP
        t = nl.load(x[i])
        nl.store(out[i], value=t)
    {after}
"""
    assert _last_unread(source) is unread


def test_an_enclosing_loop_coming_back_to_a_read_before_the_inner_loop_counts_as_after():
    source = """
def k(x, out):
    for o in nl.affine_range(4):
        nl.store(out[o], value=x[o])
        for i in nl.affine_range(8):  # LOOP
            s = nl.load(x[i])
    return out
"""
    assert _last_unread(source) is True
    assert _last_unread(source.replace("value=x[o]", "value=s")) is False  # `s` of o - 1's last i


def test_a_name_declared_global_is_read_elsewhere():
    source = """
def k(x, out):
    global t
    for i in nl.affine_range(8):  # LOOP
        t = nl.load(x[i])
        nl.store(out[i], value=t)
    return out
"""
    compile(textwrap.dedent(source), "<kernel>", "exec")  # valid Python
    assert _last_unread(source) is False
