"""``neuronxcc.nki.typing`` (``nt``) and the nki.* annotations ``nki.tensor`` / ``nki.dtype``:
annotations kernels use for their parameters. They carry no behaviour in the emulator;
``nt.tensor[[128, 512], nl.float32]`` and ``x: nki.tensor`` just have to evaluate."""

from __future__ import annotations

from typing import Any


class _Annotation:
    """A subscriptable annotation: ``nt.tensor[shape, dtype]`` returns a description of itself."""

    def __init__(self, name: str, args: Any = None) -> None:
        self._name = name
        self._args = args

    def __getitem__(self, args: Any) -> _Annotation:
        return _Annotation(self._name, args)

    def __call__(self, *args: Any, **kwargs: Any) -> _Annotation:
        return _Annotation(self._name, (args, kwargs))

    def __repr__(self) -> str:
        return f"nt.{self._name}" if self._args is None else f"nt.{self._name}[{self._args!r}]"


tensor = _Annotation("tensor")
mutable_tensor = _Annotation("mutable_tensor")
scalar = _Annotation("scalar")
dtype = _Annotation("dtype")
