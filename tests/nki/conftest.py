"""Helpers to run kernel source strings on the emulator (each written to a real file so that
error locations and trace lines point into it)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelopt.nki import runtime

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
from neuronxcc.nki.language import par_dim
"""
HEADER_LINES = HEADER.count("\n")
# the nki.* language (NKI 0.2-0.7): the API generation is read from these imports
HEADER_NKI = """\
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa
"""


class KernelFile:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def line_of(self, marker: str) -> int:
        """1-based line of the first source line containing `marker`."""
        for number, line in enumerate(self.text.splitlines(), start=1):
            if marker in line:
                return number
        raise AssertionError(f"marker {marker!r} not in kernel")

    def load(self, name: str) -> Callable[..., Any]:
        return runtime.load_kernel(self.text, name, str(self.path))

    def run(self, name: str, *inputs: Any, numerics: bool = True, fast_paths: bool = True) -> runtime.KernelRun:
        return runtime.run_kernel(self.load(name), list(inputs), numerics=numerics, fast_paths=fast_paths)


@pytest.fixture
def kernel(tmp_path: Path) -> Callable[[str], KernelFile]:
    counter = iter(range(1000))

    def make(body: str) -> KernelFile:
        text = HEADER + "\n" + textwrap.dedent(body)
        path = tmp_path / f"kernel_{next(counter)}.py"
        path.write_text(text)
        return KernelFile(path, text)

    return make


@pytest.fixture
def nki_kernel(tmp_path: Path) -> Callable[[str], KernelFile]:
    """Like `kernel`, for kernels written in the nki.* language."""
    counter = iter(range(1000))

    def make(body: str) -> KernelFile:
        text = HEADER_NKI + "\n" + textwrap.dedent(body)
        path = tmp_path / f"nki_kernel_{next(counter)}.py"
        path.write_text(text)
        return KernelFile(path, text)

    return make


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
