"""Errors an emulated kernel can raise, shaped like the Neuron compiler's.

The error code (e.g. ``err_num_partition_exceed_arch_limit``) is part of the interface: agents
learn from it, so it must match the compiler's spelling. The location is the kernel's own file
and line, never the emulator's.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

_EMULATOR_DIR = os.path.dirname(os.path.abspath(__file__))


class NkiError(Exception):
    """An NKI rule the kernel broke, reported at the kernel line that broke it."""

    def __init__(self, code: str, message: str, path: str | None = None, line: int | None = None) -> None:
        if path is None or line is None:
            found_path, found_line = kernel_location()
            path = found_path if path is None else path
            line = found_line if line is None else line
        self.code = code
        self.message = " ".join(message.split())  # always one line
        self.path = path
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code}: {self.message}"

    def __reduce__(self):  # keep the attributes across pickling (e.g. multiprocessing)
        return (NkiError, (self.code, self.message, self.path, self.line))


def kernel_location(kernel_path: str | None = None) -> tuple[str, int]:
    """The (path, line) of the innermost kernel frame on the current stack.

    With a known kernel path, the innermost frame executing that file wins (helpers in the same
    file report their own line). Otherwise, or if no such frame exists, the innermost frame
    outside the emulator package is used.
    """
    if kernel_path is None:
        from accelopt.nki.context import active_context  # local: context imports this module

        ctx = active_context()
        kernel_path = ctx.kernel_path if ctx is not None else None
    frame: FrameType | None = sys._getframe(1)
    fallback: FrameType | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if kernel_path is not None and filename == kernel_path:
            return filename, frame.f_lineno
        if fallback is None and not filename.startswith(_EMULATOR_DIR) and "/numpy/" not in filename:
            fallback = frame
            if kernel_path is None:
                break
        frame = frame.f_back
    if fallback is None:
        return kernel_path or "<kernel>", 0
    return fallback.f_code.co_filename, fallback.f_lineno
