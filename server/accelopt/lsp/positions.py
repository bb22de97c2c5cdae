"""Columns in the client's position encoding.

The features compute columns as Python string indexes (code points). LSP counts them in the
encoding the server and client agreed on at `initialize`: UTF-16 by default (VS Code), UTF-8 when
the client offers it first (Neovim 0.10+, Helix), or UTF-32. The two differ on any line with
non-ASCII text before the column (a kernel named `softmax_ядро`, a trailing `# π ≈ 3.14` comment):
so every position goes through pygls' codec for the negotiated encoding, in and out.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec


def from_client(codec: PositionCodec, lines: Sequence[str], position: types.Position) -> types.Position:
    """A client position as a line and a code-point column."""
    converted = codec.position_from_client_units(lines, position)
    return types.Position(line=converted.line, character=converted.character)


def range_to_client(codec: PositionCodec, lines: Sequence[str], span: types.Range) -> types.Range:
    return codec.range_to_client_units(lines, span)


def diagnostics_to_client(
    codec: PositionCodec, lines: Sequence[str], diagnostics: list[types.Diagnostic]
) -> list[types.Diagnostic]:
    for diagnostic in diagnostics:
        diagnostic.range = range_to_client(codec, lines, diagnostic.range)
    return diagnostics


def edits_to_client(
    codec: PositionCodec, lines: Sequence[str], edits: list[types.TextEdit]
) -> list[types.TextEdit]:
    return [types.TextEdit(range=range_to_client(codec, lines, e.range), new_text=e.new_text) for e in edits]
