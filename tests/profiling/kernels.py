"""Small kernels for the backend tests, in both NKI styles (hand-written and compiler-generated).

The baseline doubles a [128, 256] fp32 tensor; each variant changes one thing."""

from __future__ import annotations

from accelopt.profiling.evaluation import KernelSource

PATH = "/virtual/double.py"
HEADER = """import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


"""

HAND_WRITTEN = (
    HEADER
    + """# accelopt: inputs x=float32[128,256]
@nki.jit
def double_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.multiply(t, 2.0))
    return out
"""
)

# The same computation written the way the compiler writes kernels: block dimensions, arange
# grids with affine offsets, numpy scalar constants, a bare string statement.
COMPILER_GENERATED = (
    HEADER
    + """@nki.jit
def double_kernel(x):
    out = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((2, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        buf[i0, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
            x[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]]
        )
        ' end load '
        res = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
        res[nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.multiply(
            buf[i0, nl.arange(128)[:, None], nl.arange(128)[None, :]], np.dtype(np.float32).type(2)
        )
        nl.store(
            out[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]],
            value=res[nl.arange(128)[:, None], nl.arange(128)[None, :]],
        )
    return out
"""
)


# The same computation written with the ordinary Python NKI 0.7 kernels use while traced: a
# dataclass for the tiling, an enum, a NamedTuple, a class with private state and a generator
# method, itertools/functools/typing, a match statement and getattr of a public name.
NKI_07_STYLE = (
    """import dataclasses
import enum
import functools
import itertools
import math
from typing import NamedTuple, Optional

"""
    + HEADER
    + """class Mode(enum.Enum):
    DOUBLE = 2


@dataclasses.dataclass(frozen=True)
class Tiling:
    rows: int = 128
    cols: int = 128

    def __post_init__(self):
        assert self.rows <= 128

    def blocks(self, shape):
        return math.ceil(shape[0] / self.rows), math.ceil(shape[1] / self.cols)


class Block(NamedTuple):
    i: int
    j: int


class Planner:
    def __init__(self, tiling: Optional[Tiling] = None):
        super().__init__()
        self._tiling = tiling or Tiling()
        self.visited = 0

    def blocks(self, shape):
        def counts():
            return self._tiling.blocks(shape)

        rows, cols = counts()
        for i, j in itertools.product(range(rows), range(cols)):
            self.visited += 1
            yield Block(i, j)


@functools.lru_cache(maxsize=None)
def factor(mode):
    return float(mode.value)


@nki.jit
def double_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    planner = Planner(Tiling())
    scale = factor(getattr(Mode, "DOUBLE"))
    for block in planner.blocks(x.shape):
        match block:
            case Block(i=i, j=j):
                rows = nl.ds(i * 128, 128)
                cols = nl.ds(j * 128, 128)
        nl.store(out[rows, cols], value=nl.multiply(nl.load(x[rows, cols]), scale))
    assert planner.visited == 2
    return out
"""
)


def body(code: str, directive: str = "") -> str:
    """A kernel `double_kernel(x)` whose body is `code` (indented by the caller's layout)."""
    lines = "\n".join("    " + ln if ln else "" for ln in code.strip("\n").splitlines())
    return (
        HEADER + (directive + "\n" if directive else "") + "@nki.jit\ndef double_kernel(x):\n" + lines + "\n"
    )


def kernel(text: str, name: str = "double_kernel") -> KernelSource:
    return KernelSource(text=text, name=name, path=PATH)


def line_of(text: str, fragment: str) -> int:
    """1-based line of the first line containing `fragment`."""
    return next(i for i, ln in enumerate(text.splitlines(), start=1) if fragment in ln)
