"""Kernel discovery: every NKI entry point, under every import spelling, even mid-edit."""

from __future__ import annotations

from accelopt.lsp.discovery import find_kernels

MODULE = """import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from neuronxcc.nki import baremetal


def helper(x):
    return x


@nki.jit
def plain_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    return out


@nki.jit(mode="simulation")
def called_kernel(x):
    return x


@baremetal
def bare_kernel(x):

    # a comment inside the body
    return x


class Holder:
    @staticmethod
    @nki.baremetal()
    def method_kernel(x):
        return x
"""


def test_finds_every_spelling_in_source_order():
    kernels = find_kernels(MODULE)
    assert [k.name for k in kernels] == ["plain_kernel", "called_kernel", "bare_kernel", "method_kernel"]
    plain = kernels[0]
    lines = MODULE.splitlines()
    assert lines[plain.first_line] == "@nki.jit"
    assert lines[plain.def_line].startswith("def plain_kernel")
    assert lines[plain.last_line].strip() == "return out"
    assert lines[plain.def_line][plain.name_start : plain.name_end] == "plain_kernel"
    assert kernels[1].decorator == "nki.jit"
    assert kernels[3].first_line == lines.index("    @staticmethod")


def test_hover_positions_cover_decorator_and_name_only():
    plain = find_kernels(MODULE)[0]
    assert plain.on_header(plain.first_line, 3)
    assert plain.on_header(plain.def_line, plain.name_start + 2)
    assert not plain.on_header(plain.def_line, 0)  # on `def`
    assert not plain.on_header(plain.def_line + 1, plain.name_start)


def test_bare_jit_needs_an_nki_import():
    numba_style = "from numba import jit\n\n@jit\ndef f(x):\n    return x\n"
    assert find_kernels(numba_style) == []
    nki_style = "from neuronxcc.nki import jit\n\n@jit\ndef f(x):\n    return x\n"
    assert [k.name for k in find_kernels(nki_style)] == ["f"]


def test_syntax_error_elsewhere_falls_back_to_the_line_scan():
    broken = MODULE.replace("def helper(x):\n    return x", "def helper(x:\n    return x +")
    kernels = find_kernels(broken)
    assert [k.name for k in kernels] == ["plain_kernel", "called_kernel", "bare_kernel", "method_kernel"]
    exact = {k.name: k for k in find_kernels(MODULE)}
    for kernel in kernels:
        # same lines as the exact parse (the broken helper has the same number of lines)
        assert (kernel.first_line, kernel.def_line, kernel.last_line) == (
            exact[kernel.name].first_line,
            exact[kernel.name].def_line,
            exact[kernel.name].last_line,
        )
