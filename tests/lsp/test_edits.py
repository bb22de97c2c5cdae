"""Minimal text edits: applying them to the old text gives exactly the new one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pygls.workspace.position_codec import PositionCodec

from accelopt.lsp.edits import apply_edits, minimal_edits, unified_diff
from accelopt.lsp.positions import edits_to_client

BEFORE = "import x\n\n@nki.jit\ndef k(a):\n    t = load(a)\n    return t\n"
AFTER = "import x\n\n@nki.jit\ndef k(a):\n    t = load(a, big=True)\n    u = t\n    return u\n"


def test_only_changed_lines_are_touched():
    edits = minimal_edits(BEFORE, AFTER)
    assert apply_edits(BEFORE, edits) == AFTER
    assert all(edit.range.start.line >= 4 for edit in edits)


def test_unified_diff_names_the_file():
    diff = unified_diff(BEFORE, AFTER, "kernels/k.py")
    assert diff.startswith("--- a/kernels/k.py\n+++ b/kernels/k.py\n")
    assert "+    t = load(a, big=True)\n" in diff


line = st.sampled_from(["a", "b", "é", "𝔵 = 1", "", "    return t"])


ENCODINGS = st.sampled_from(["utf-8", "utf-16", "utf-32"])


@given(st.lists(line, max_size=8), st.lists(line, max_size=8), st.booleans(), st.booleans(), ENCODINGS)
def test_round_trip_in_every_position_encoding(old, new, old_newline, new_newline, encoding):
    """What the server sends (its edits in the client's units) is what a client applies."""
    before = "\n".join(old) + ("\n" if old_newline and old else "")
    after = "\n".join(new) + ("\n" if new_newline and new else "")
    edits = edits_to_client(
        PositionCodec(encoding), before.splitlines(keepends=True), minimal_edits(before, after)
    )
    assert apply_edits(before, edits, encoding) == after
