"""How a candidate reaches the agent: a unified diff to read and line edits to apply. The server
never writes the user's files; the agent applies these itself."""

from __future__ import annotations

import difflib
from pathlib import Path

from accelopt.mcp.models import KernelEdit


def unified_diff(before: str, after: str, path: str | None) -> str:
    """`git apply`-style names (a/ b/ relative to the server's directory) for a file under it,
    the path itself otherwise."""
    old, new = _diff_names(path)
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=old, tofile=new
        )
    )


def _diff_names(path: str | None) -> tuple[str, str]:
    if path is None:
        return "a/kernel.py", "b/kernel.py"
    try:
        relative = Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path, path
    return f"a/{relative.as_posix()}", f"b/{relative.as_posix()}"


def line_edits(before: str, after: str) -> list[KernelEdit]:
    """Line-range replacements turning `before` into `after`, last first (so each edit's line
    numbers still refer to the original file when the earlier ones have been applied)."""
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    edits = [
        KernelEdit(start_line=i1 + 1, end_line=i2, new_text="".join(new[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]
    return edits[::-1]


def apply_line_edits(text: str, edits: list[KernelEdit]) -> str:
    """What an agent does with `line_edits` (in the order given)."""
    lines = text.splitlines(keepends=True)
    for edit in edits:
        lines[edit.start_line - 1 : edit.end_line] = edit.new_text.splitlines(keepends=True)
    return "".join(lines)
