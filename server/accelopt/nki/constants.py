"""``nki.language.constants`` (also ``neuronxcc.nki.language.constants``): constants kernels
import by name. ``sizeinbytes`` is implemented; the alignment constants of the allocation APIs
are listed in api_index.txt and refused as not supported yet (their values are not in the
reference pages the emulator follows)."""

from __future__ import annotations

from accelopt.nki.dtypes import sizeinbytes
from accelopt.nki.unsupported import module_getattr as _module_getattr

__getattr__ = _module_getattr("nki.language.constants")

__all__ = ["sizeinbytes"]
