"""Turning "the document should now read like this" into what LSP carries: a unified diff for the
client's diff view and the minimal line-level text edits for `workspace/applyEdit`."""

from __future__ import annotations

import difflib

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec


def unified_diff(before: str, after: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


def _position(lines: list[str], index: int) -> types.Position:
    """The position just before line `index` (or the document's end when index == len(lines)),
    its column in code points like every position the features compute (positions.py)."""
    if index < len(lines) or not lines or lines[-1].endswith(("\n", "\r")):
        return types.Position(line=index, character=0)
    return types.Position(line=len(lines) - 1, character=len(lines[-1]))


def minimal_edits(before: str, after: str) -> list[types.TextEdit]:
    """Line-granular edits that turn `before` into `after`, touching only the changed lines.

    A last line without a newline compares unequal to the same line with one, so anything appended
    at the end replaces that line rather than inserting past the document's end.
    """
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    edits: list[types.TextEdit] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(
            types.TextEdit(
                range=types.Range(start=_position(old, i1), end=_position(old, i2)),
                new_text="".join(new[j1:j2]),
            )
        )
    return edits


def hunk_lines(before: str, edit: types.TextEdit) -> tuple[int, int, list[str], list[str]]:
    """The 1-based line span an edit replaces, the lines it removes and the lines it writes."""
    old = before.splitlines()
    start, end = edit.range.start.line, edit.range.end.line
    return start + 1, end, old[start:end], edit.new_text.splitlines()


def apply_edits(
    text: str, edits: list[types.TextEdit], encoding: str = types.PositionEncodingKind.Utf16
) -> str:
    """Apply non-overlapping edits whose columns count `encoding` units, as a client would (LSP's
    default is UTF-16, VS Code's); used by tests and to check our own edits."""
    lines = text.splitlines(keepends=True)
    codec = PositionCodec(encoding=encoding)

    def offset(position: types.Position) -> int:
        before = sum(len(line) for line in lines[: position.line])
        if position.line >= len(lines):
            return before
        column = codec.position_from_client_units(lines, types.Position(position.line, position.character))
        return before + min(column.character, len(lines[position.line]))

    spans = sorted(((offset(e.range.start), offset(e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new_text in spans:
        text = text[:start] + new_text + text[end:]
    return text
