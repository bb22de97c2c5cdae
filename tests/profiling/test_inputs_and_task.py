"""Directives, declared inputs and tasks: everything here is read, nothing is run."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.inputs import (
    DirectiveError,
    find_directive,
    generate_inputs,
    parse_input_specs,
    point_reference_directive,
    suggest_inputs_directive,
    tuple_arguments,
)
from accelopt.profiling.task import TaskError, task_for_kernel, transform_is_identity

REFERENCE = """
import numpy as np
TOLERANCE = 1e-4

def get_inputs(size="full"):
    return [np.random.randn(4, 8).astype(np.float32)]

def forward(x):
    return x * 2

def transform_to_nki_inputs(inputs):
    return list(inputs)

def transform_nki_outputs(kernel_out, ref_out):
    return [kernel_out], [ref_out]
"""


def kernel_text(directive: str) -> str:
    return f"""import neuronxcc.nki as nki

{directive}
@nki.jit
def k(x, w):
    return x
"""


def test_nearest_directive_above_the_kernel_wins():
    text = "# accelopt: inputs a=float32[1]\n" + kernel_text("# accelopt: inputs x=float32[2,3] w=float32[3]")
    found = find_directive(text, "k")
    assert found is not None and found.kind == "inputs" and found.line == 4
    assert found.argument == "x=float32[2,3] w=float32[3]"


def test_directive_below_the_kernel_is_ignored_and_typos_are_reported():
    text = kernel_text("") + "# accelopt: inputs x=float32[2]\n"
    assert find_directive(text, "k") is None
    with pytest.raises(DirectiveError) as err:
        find_directive(kernel_text("# accelopt: input x=float32[2]"), "k")
    assert err.value.line == 3 and "unknown accelopt directive 'input'" in err.value.message


def test_input_specs_parse_dtypes_shapes_and_distributions():
    specs = parse_input_specs(
        "x=float32[256,1024] w=bfloat16[4]~uniform(-1,1) i=int32[3] n=float32[2]~normal(5,0.5)"
    )
    assert [(s.name, s.dtype, s.shape) for s in specs] == [
        ("x", "float32", (256, 1024)),
        ("w", "bfloat16", (4,)),
        ("i", "int32", (3,)),
        ("n", "float32", (2,)),
    ]
    assert specs[1].distribution == "uniform" and specs[1].params == (-1.0, 1.0)
    assert specs[2].distribution == "uniform"  # integers default to uniform integers
    assert specs[3].text() == "n=float32[2]~normal(5,0.5)"


@pytest.mark.parametrize(
    ("argument", "complaint"),
    [
        ("", "at least one"),
        ("x=float32(2,3)", "cannot read input spec"),
        ("x=float33[2]", "unknown dtype"),
        ("x=float32[0,2]", "positive"),
        ("x=float32[2]~uniform(1,0)", "low < high"),
        ("x=float32[2]~cauchy(0,1)", "unknown distribution"),
        ("x=float32[2] x=float32[3]", "declared twice"),
    ],
)
def test_bad_input_specs_say_what_is_wrong(argument, complaint):
    with pytest.raises(DirectiveError) as err:
        parse_input_specs(argument, line=7)
    assert complaint in err.value.message and err.value.line == 7


def test_generated_inputs_are_reproducible_and_match_numpy_seeding():
    specs = parse_input_specs("x=float32[3,4] w=float32[4]~uniform(0,1) b=bfloat16[2]")
    first, again, other = generate_inputs(specs, 11), generate_inputs(specs, 11), generate_inputs(specs, 12)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])
    np.random.seed(11)  # the stream a reference module's get_inputs would see
    assert np.array_equal(first[0], np.random.randn(3, 4).astype(np.float32))
    assert first[1].min() >= 0 and first[1].max() < 1
    assert str(first[2].dtype) == "bfloat16"


def test_suggested_directive_shares_unpacked_dimensions():
    kernel = KernelSource(
        name="mm",
        text="def mm(lhsT, rhs, bias, scale=1.0):\n    K, M = lhsT.shape\n    K, N = rhs.shape\n    return lhsT\n",
    )
    line = suggest_inputs_directive(kernel)
    assert line == "# accelopt: inputs lhsT=float32[128,512] rhs=float32[128,512] bias=float32[128,512]"
    assert parse_input_specs(line.removeprefix("# accelopt: inputs "))  # it parses back


def test_baseline_task_from_inputs_directive(tmp_path):
    kernel = KernelSource(
        text=kernel_text("# accelopt: inputs x=float32[2,3] w=float32[3]"),
        name="k",
        path=str(tmp_path / "k.py"),
    )
    task = task_for_kernel(kernel)
    assert task.kind == "baseline" and task.baseline == kernel and [s.name for s in task.inputs] == ["x", "w"]
    assert task.tolerance == 2e-5 and task.seeds == 5


def test_reference_directive_is_relative_to_the_kernel_and_read_once(tmp_path):
    (tmp_path / "k_ref.py").write_text(REFERENCE)
    kernel = KernelSource(
        text=kernel_text("# accelopt: reference k_ref.py"), name="k", path=str(tmp_path / "k.py")
    )
    task = task_for_kernel(kernel, size="small")
    assert task.kind == "reference" and task.reference_text == REFERENCE and task.size == "small"
    assert task.tolerance == 1e-4  # the module's TOLERANCE, read statically
    assert task.name == "k"
    assert task.key() == task_for_kernel(kernel, size="small").key() != task_for_kernel(kernel).key()


def test_explicit_reference_wins_over_the_directive(tmp_path):
    (tmp_path / "other.py").write_text(REFERENCE)
    kernel = KernelSource(
        text=kernel_text("# accelopt: inputs x=float32[2]"), name="k", path=str(tmp_path / "k.py")
    )
    assert task_for_kernel(kernel, reference=str(tmp_path / "other.py")).kind == "reference"


def test_missing_inputs_explain_how_to_declare_them(tmp_path):
    kernel = KernelSource(text=kernel_text(""), name="k", path=str(tmp_path / "k.py"))
    with pytest.raises(TaskError) as err:
        task_for_kernel(kernel)
    assert err.value.path == kernel.path and err.value.line == 4  # the decorator line
    assert "# accelopt: inputs x=float32[128,512] w=float32[128,512]" in err.value.message


def test_reference_problems_name_file_and_line(tmp_path):
    kernel = KernelSource(
        text=kernel_text("# accelopt: reference nowhere.py"), name="k", path=str(tmp_path / "k.py")
    )
    with pytest.raises(TaskError) as err:
        task_for_kernel(kernel)
    assert err.value.path == kernel.path and err.value.line == 3 and "not found" in err.value.message

    (tmp_path / "broken.py").write_text("def get_inputs(:\n")
    with pytest.raises(TaskError) as err:
        task_for_kernel(kernel, reference=str(tmp_path / "broken.py"))
    assert err.value.path == str(tmp_path / "broken.py") and err.value.line == 1

    (tmp_path / "partial.py").write_text("def get_inputs(size='full'):\n    return []\n")
    with pytest.raises(TaskError) as err:
        task_for_kernel(kernel, reference=str(tmp_path / "partial.py"))
    assert "`forward`" in err.value.message and "`transform_nki_outputs`" in err.value.message


@pytest.mark.parametrize(
    ("transform", "identity"),
    [
        ("return [np.asarray(kernel_out)], [np.asarray(ref_out)]", True),
        ("return ([kernel_out], [ref_out])", True),
        ('"""Pair them."""\n    return [kernel_out], [np.asarray(ref_out)]', True),
        ("return [ref_out], [kernel_out]", False),
        ("return [np.asarray(kernel_out).T], [ref_out]", False),
        ("return [np.asarray(kernel_out, dtype=np.float64)], [ref_out]", False),
        ("x = 1\n    return [kernel_out], [ref_out]", False),
    ],
)
def test_identity_transform_is_recognised_without_running_it(transform, identity):
    text = f"import numpy as np\n\ndef transform_nki_outputs(kernel_out, ref_out):\n    {transform}\n"
    assert transform_is_identity(text) is identity


def test_a_copy_in_another_folder_gets_a_reference_directive_that_resolves(tmp_path):
    (tmp_path / "silu_ref.py").write_text("")
    text = "import x\n\n# accelopt: reference silu_ref.py\n@nki.jit\ndef k(x):\n    pass\n"
    out = tmp_path / "accelopt-out" / "k"
    moved = point_reference_directive(text, "k", str(tmp_path / "silu_ref.py"), out)
    assert "# accelopt: reference ../../silu_ref.py\n@nki.jit" in moved
    directive = find_directive(moved, "k")
    assert (
        directive is not None and (out / directive.argument).resolve() == (tmp_path / "silu_ref.py").resolve()
    )
    # a kernel whose task came from --reference gets a directive added above it
    added = point_reference_directive(
        "@nki.jit\ndef k(x):\n    pass\n", "k", str(tmp_path / "silu_ref.py"), out
    )
    assert added.startswith("# accelopt: reference ../../silu_ref.py\n@nki.jit")
    # an inputs directive is left alone
    declared = "# accelopt: inputs x=float32[128,512]\ndef k(x):\n    pass\n"
    assert point_reference_directive(declared, "k", str(tmp_path / "silu_ref.py"), out) == declared


def test_scalar_arguments_are_declared_by_value_and_passed_as_python_numbers():
    specs = parse_input_specs("x=float32[2,3] eps=1e-5 pool=2 causal=True shift=-0.5")
    assert [(s.name, s.value) for s in specs[1:]] == [
        ("eps", 1e-5),
        ("pool", 2),
        ("causal", True),
        ("shift", -0.5),
    ]
    assert [s.text() for s in specs[1:]] == ["eps=1e-05", "pool=2", "causal=True", "shift=-0.5"]
    first, other = generate_inputs(specs, 1), generate_inputs(specs, 2)
    assert not np.array_equal(first[0], other[0])
    for seed_inputs in (first, other):  # the same value on every seed, as a 0-d array
        eps, pool, causal, shift = seed_inputs[1:]
        assert eps.shape == () and eps.dtype == np.float64 and eps.item() == 1e-5
        assert pool.dtype == np.int64 and pool.item() == 2
        assert causal.dtype == np.bool_ and causal.item() is True
        assert shift.item() == -0.5
    with pytest.raises(DirectiveError, match="declared twice"):
        parse_input_specs("eps=1 eps=2")
    with pytest.raises(DirectiveError, match="a tuple of them"):
        parse_input_specs("shape=[3,4]")


def test_tuple_arguments_are_declared_by_value_and_travel_beside_the_arrays():
    specs = parse_input_specs("x=float32[5,12] shape2D=(3,4) one=(7,) none=() mixed=(1,2.5,True)")
    assert [s.value for s in specs[1:]] == [(3, 4), (7,), (), (1, 2.5, True)]
    assert [s.text() for s in specs[1:]] == ["shape2D=(3,4)", "one=(7,)", "none=()", "mixed=(1,2.5,True)"]
    placeholders = generate_inputs(specs, 4)[1:]
    assert all(p.shape == () and p.dtype == np.int64 for p in placeholders)  # scalars on every array path
    assert [t.model_dump() for t in tuple_arguments(specs)] == [
        {"position": 1, "items": [3, 4]},
        {"position": 2, "items": [7]},
        {"position": 3, "items": []},
        {"position": 4, "items": [1, 2.5, True]},
    ]
    with pytest.raises(DirectiveError, match="declared twice"):
        parse_input_specs("p=(1,2) p=3")
    with pytest.raises(DirectiveError, match="cannot read input spec 'p=\\(1,x\\)'"):
        parse_input_specs("p=(1,x)")


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3", "bfloat16"])
def test_declared_low_precision_inputs_cross_the_sandbox_boundary_as_npy(name, tmp_path):
    """float8_e5m2 says its kind is float ('<f1'), which np.load refuses: it travels as float32."""
    from accelopt.profiling import arrays

    (x,) = generate_inputs(parse_input_specs(f"x={name}[4,8]"), 3)
    path = tmp_path / "x.npy"
    np.save(path, arrays.to_transport(x), allow_pickle=False)
    back = arrays.from_transport(np.load(path, allow_pickle=False), arrays.dtype_name(x))
    assert back.dtype == x.dtype and np.array_equal(back.astype(np.float32), x.astype(np.float32))
    assert not arrays.is_standard(x.dtype) and arrays.is_standard(np.dtype(np.float32))
