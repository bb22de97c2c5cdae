"""Which NKI a kernel is written in, read from its source: the legacy ``neuronxcc.nki`` namespace
or the current ``nki.*`` one, and for the latter the release whose rules apply.

Both generations run on the same emulator modules (runtime.install_aliases maps both names), so
the generation is known only from how the kernel imports NKI. It decides the rules that differ:

- block dimensions (a partition dimension that is not leftmost) exist only in legacy kernels;
  the ``nki.*`` language removed them (NKI migration guides, "Removing block dimensions");
- the legacy scoping rule (a tile allocated inside an NKI loop is dead after the loop,
  ``err_local_variable_used_out_of_scope``) is gone from NKI Beta 2 on: loops and lists behave
  as in Python (migration guide Beta 1 -> Beta 2, "Consistent control flow behavior");
- ``nl.affine_range``: iterations must not write the same place until NKI 0.6; from 0.7 on it
  is a deprecated alias of Python's range ("NKI Loops" deep dive, Neuron SDK 2.33);
- the default target: legacy kernels were written for trn1, the ``nki.*`` language targets trn2
  and trn3 only (NKI 0.7 release notes), so trn2 unless the caller picks a target.

The release is the newest one whose API the source is consistent with: ``nl.dynamic_range`` was
removed in NKI 0.7 (so a kernel using it is 0.6), ``fori_loop`` / ``while_loop`` arrived in 0.6,
everything else is read as 0.7, the release the emulator follows (Neuron SDK 2.33).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Literal

from accelopt.nki.python_source import parse_module

Generation = Literal["legacy", "nki"]

LATEST_RELEASE = "0.7"

_LEGACY_IMPORT = re.compile(r"^\s*(?:import|from)\s+neuronxcc\.nki\b", re.MULTILINE)
_NKI_IMPORT = re.compile(r"^\s*(?:import\s+nki\b|from\s+nki(?:\.\w+)*\s+import\b)", re.MULTILINE)


@dataclass(frozen=True)
class KernelApi:
    """The NKI generation (and release, for ``nki.*``) a kernel is read with."""

    generation: Generation
    release: str | None = None  # "0.6", "0.7" for nki.* kernels; None for legacy

    @property
    def legacy(self) -> bool:
        return self.generation == "legacy"

    @property
    def key(self) -> str:
        """How a trace names the rules it ran under ("legacy", "nki 0.7"): the verified re-run
        applies the same ones (`from_key`)."""
        return "legacy" if self.legacy else f"nki {self.release or LATEST_RELEASE}"

    @classmethod
    def from_key(cls, key: str) -> KernelApi:
        if key == "legacy":
            return LEGACY
        generation, _, release = key.partition(" ")
        if generation != "nki" or not re.fullmatch(r"\d+\.\d+", release):
            raise ValueError(f"unknown NKI generation {key!r}")
        return cls("nki", release)

    @property
    def block_dimensions(self) -> bool:
        """Whether a partition dimension may sit right of other (block) dimensions."""
        return self.legacy

    @property
    def loop_scoped_tiles(self) -> bool:
        """Whether a tile made inside an NKI loop is dead once the loop ends (legacy rule)."""
        return self.legacy

    @property
    def affine_iterations_independent(self) -> bool:
        """Whether two iterations of an ``nl.affine_range`` loop writing the same place is an
        error (``err_unexpected_output_dependencies``). From NKI 0.7 on, ``affine_range`` is
        deprecated and is a Python range ("NKI Loops", Neuron SDK 2.33)."""
        return self.legacy or _version(self.release or LATEST_RELEASE) < (0, 7)

    @property
    def default_hardware(self) -> Literal["trn1", "trn2"]:
        return "trn1" if self.legacy else "trn2"

    @property
    def label(self) -> str:
        """How a person is told which rules were applied, e.g. 'NKI 0.7 (nki.*)'."""
        if self.legacy:
            return "legacy NKI (neuronxcc.nki)"
        return f"NKI {self.release or LATEST_RELEASE} (nki.*)"


LEGACY = KernelApi("legacy")
CURRENT = KernelApi("nki", LATEST_RELEASE)


@functools.lru_cache(maxsize=256)
def detect(text: str) -> KernelApi:
    """The API a kernel module's source is written against (legacy when it cannot tell: the
    emulator's historical behaviour, and what NKIBench kernels use)."""
    legacy = _LEGACY_IMPORT.search(text) is not None
    current = _NKI_IMPORT.search(text) is not None
    if legacy or not current:
        return LEGACY
    return KernelApi("nki", _release(text))


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def _release(text: str) -> str:
    try:
        names = {
            node.attr for node in ast.walk(parse_module(text)) if isinstance(node, ast.Attribute)
        }
    except SyntaxError:
        return LATEST_RELEASE
    if "dynamic_range" in names:
        return "0.6"
    return LATEST_RELEASE


def default_hardware(text: str) -> Literal["trn1", "trn2"]:
    """The target a figure for this kernel is produced on when nobody chose one."""
    return detect(text).default_hardware
