"""The static sandbox policy: real kernels pass, forbidden constructs are refused with a line."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt.profiling.policy import check_source, module_allowed

from .kernels import NKI_07_STYLE

ROOT = Path(__file__).resolve().parents[2]
KERNELS = sorted(
    p
    for p in [*ROOT.glob("kernels_examples/*.py"), *ROOT.glob("nkibench/*/*.py")]
    if not p.stem.endswith("_ref") and p.stem != "reference"
)
REFERENCES = sorted([*ROOT.glob("kernels_examples/*_ref.py"), *ROOT.glob("nkibench/*/reference.py")])


def test_there_are_kernels_to_check():
    assert len(KERNELS) >= 10 and len(REFERENCES) >= 10


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_kernel_passes_the_kernel_policy(path):
    assert check_source(path.read_text(), "kernel") is None


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_reference_passes_the_reference_policy(path):
    assert check_source(path.read_text(), "reference") is None


def test_compiler_generated_idioms_are_allowed():
    text = """
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
from neuronxcc.nki.language import par_dim

@nki.jit
def k(v1):
    import numpy as np
    import neuronxcc.nki.language as nl
    v2 = nl.ndarray((2, par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        ' end loop i0 '
        v2[i0, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
            v2[i0], np.add, np.dtype(np.float32).type(1), engine=nki.isa.unknown_engine
        )
    return v2
"""
    assert check_source(text, "kernel") is None


@pytest.mark.parametrize(
    ("code", "line", "reason"),
    [
        ("import numpy\nimport os", 2, "import of 'os'"),
        ("from numpy import lib", 1, "importing 'lib' from 'numpy'"),
        ("from . import x", 1, "relative imports"),
        ("x = 1\ny = x.__class__", 2, "dunder attribute '.__class__'"),
        ("y = (1)._private", 1, "private or dunder attribute"),
        ("x = getattr(o, '__globals__')", 1, "getattr: access to private or dunder"),
        ("def __getattr__(name):\n    return 1", 1, "defining dunder"),
        (
            "class A:\n    def __getattribute__(self, n):\n        pass",
            2,
            "defining dunder '__getattribute__'",
        ),
        ("class A(metaclass=type):\n    pass", 1, "metaclasses"),
        (
            "class A:\n    def f(self, o):\n        return o._secret",
            3,
            "private or dunder attribute '._secret'",
        ),
        ("class A:\n    def f(self):\n        self = np\n        return self._core", 4, "'._core'"),
        ("match x:\n    case object(__class__=c):\n        pass", 2, "match pattern: access to private"),
        ("match x:\n    case C(_hidden=v):\n        pass", 2, "match pattern: access to private"),
        ("s = '{0.__globals__}'", 1, "format field"),
        ("import neuronxcc.nki.language as nl\nnl.load.cache = 1", 2, "no monkey-patching"),
        ("import numpy as np\nnp.add = None", 2, "no monkey-patching"),
        ("import numpy as np\ndel np.add", 2, "no monkey-patching"),
        ("print(__name__)", 1, "dunder name '__name__'"),
    ],
)
def test_forbidden_constructs(code, line, reason):
    violation = check_source(code, "kernel")
    assert violation is not None and violation.line == line and reason in violation.reason


def test_reference_modules_get_a_slightly_wider_allow_list():
    text = "import ml_dtypes\nimport numpy as np\nif __name__ == '__main__':\n    pass\n"
    assert check_source(text, "reference") is None
    assert check_source(text, "kernel") is not None
    assert check_source("import numpy as np\nx = np.random.randn(2)", "reference") is None


def test_module_allow_list():
    assert module_allowed("numpy", "kernel") and module_allowed("neuronxcc.nki.language", "kernel")
    assert not module_allowed("numpy._core", "kernel") and module_allowed(
        "numpy._core", "kernel", allow_private=True
    )
    assert not module_allowed("numpy.f2py", "kernel", allow_private=True)
    assert not module_allowed("numpy.random", "kernel") and module_allowed("numpy.random", "reference")
    assert not module_allowed("accelopt.nki", "kernel") and not module_allowed("", "kernel")


def test_syntax_errors_are_not_policy_violations():
    with pytest.raises(SyntaxError):
        check_source("def f(:\n", "kernel")


def test_ordinary_python_of_nki_07_kernels_is_allowed():
    """Classes, methods, `self.x = ...`, a method's private state, generators, dataclasses,
    enums, NamedTuples, itertools/functools/typing and getattr of a public name."""
    assert check_source(NKI_07_STYLE, "kernel") is None


def test_a_parameter_may_share_a_refused_builtin_name():
    """A helper such as `def fold(op, input, start)` reads its own argument, not the builtin."""
    helper = "def fold(input, start=1):\n    for v in input:\n        start = start * v\n    return start\n"
    assert check_source(helper, "kernel") is None
    closure = "def outer(input):\n    def inner():\n        return len(input)\n    return inner()\n"
    assert check_source(closure, "kernel") is None
    # outside the function that binds it, the name is the builtin again
    after = helper + "x = input()\n"
    assert (v := check_source(after, "kernel")) is not None and v.line == 5 and "'input'" in v.reason
    # a default value is evaluated where the function is defined, so it still means the builtin
    default = "def f(input=input):\n    return input\n"
    assert (v := check_source(default, "kernel")) is not None and v.line == 1


def test_pure_standard_library_helpers_of_public_kernels_are_allowed():
    text = "from collections import deque\nfrom functools import reduce\nfrom operator import mul\n"
    text += "def n_elts(shape):\n    return reduce(mul, shape, 1)\nq = deque([1])\n"
    assert check_source(text, "kernel") is None
    assert module_allowed("operator", "kernel") and module_allowed("collections", "kernel")


def test_reading_getitem_is_subscripting_and_allowed_but_other_dunders_are_not():
    argsort = "def argsort(seq):\n    return sorted(range(len(seq)), key=seq.__getitem__)\n"
    assert check_source(argsort, "kernel") is None
    assert check_source("def f(seq):\n    return seq.__getattribute__\n", "kernel") is not None
