"""The line edits get_candidate returns: applied in the order given, they turn the original file
into the candidate, whatever changed (insertions, deletions, the last line's newline)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from accelopt.mcp.edits import apply_line_edits, line_edits, unified_diff

LINES = st.lists(st.sampled_from(["a\n", "b\n", "    c = 1\n", "\n", "d"]), max_size=12)


@given(LINES, LINES)
def test_edits_turn_the_original_into_the_candidate(before: list[str], after: list[str]) -> None:
    old, new = "".join(before), "".join(after)
    edits = line_edits(old, new)
    assert apply_line_edits(old, edits) == new
    assert (edits == []) == (old.splitlines(keepends=True) == new.splitlines(keepends=True))
    starts = [edit.start_line for edit in edits]
    assert starts == sorted(starts, reverse=True)  # bottom-up: earlier edits keep later line numbers


def test_an_insertion_is_an_empty_range_before_its_line() -> None:
    [edit] = line_edits("x = 1\ny = 2\n", "x = 1\nz = 3\ny = 2\n")
    assert (edit.start_line, edit.end_line, edit.new_text) == (2, 1, "z = 3\n")


def test_diff_names_a_file_under_the_working_directory_relatively(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    kernel = tmp_path / "k.py"
    assert unified_diff("a\n", "b\n", str(kernel)).startswith("--- a/k.py\n+++ b/k.py\n")
    assert unified_diff("a\n", "b\n", "/elsewhere/k.py").startswith("--- /elsewhere/k.py\n")
