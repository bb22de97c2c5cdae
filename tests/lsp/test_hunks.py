"""Accepting one change of a candidate, not the whole candidate, in a real LSP session: the
server lists the candidate's changes against the text the search started from, applies only the
chosen ones, and still refuses once the file has moved on."""

from __future__ import annotations

from typing import Any

import pytest
from lsp_editor import Editor

pytestmark = pytest.mark.asyncio(loop_scope="module")


def applied(answer: Any) -> bool:
    return answer["applied"] if isinstance(answer, dict) else answer.applied


def with_hunk(text: str, hunk: dict[str, Any]) -> str:
    lines = text.splitlines()
    start, end = hunk["startLine"], hunk["endLine"]
    return "\n".join(lines[: start - 1] + hunk["added"] + lines[end:]) + "\n"


async def test_one_change_of_a_candidate_is_applied_alone(editor: Editor):
    uri = editor.open("silu.py")
    original = editor.text(uri)
    params = {"uri": uri, "kernelName": "silu_kernel", "options": {"iterations": 1}}
    result = await editor.request("accelopt/optimize", params)
    search_id = result["searchId"]
    # the live search view's tree: every candidate under its parent, the beam marked
    tree = await editor.request("accelopt/searchTree", {"searchId": search_id})
    ids = {node["id"] for node in tree["nodes"]}
    roots = [node for node in tree["nodes"] if node["parentId"] is None]
    assert len(roots) == 1 and roots[0]["title"] == "baseline" and len(ids) > 1
    assert all(node["parentId"] in ids for node in tree["nodes"] if node["parentId"] is not None)
    assert tree["bestByIteration"] and not tree["running"] and any(node["inBeam"] for node in tree["nodes"])
    listed = await editor.request("accelopt/candidates", {"searchId": search_id})
    candidate = next(c for c in listed["candidates"] if c["status"] == "ok" and c["text"] != original)
    hunks = await editor.command("accelopt.candidateHunks", search_id, candidate["id"])
    assert hunks and [h["index"] for h in hunks] == list(range(len(hunks)))
    # applying every change gives the candidate: the changes are the whole difference
    everything = original
    for hunk in reversed(hunks):
        everything = with_hunk(everything, hunk)
    assert everything == candidate["text"]

    # out of range: refused, nothing written
    refused = await editor.command("accelopt.applyHunks", search_id, candidate["id"], [len(hunks)])
    assert not applied(refused) and editor.text(uri) == original

    last = hunks[-1]
    answer = await editor.command("accelopt.applyHunks", search_id, candidate["id"], [last["index"]])
    assert applied(answer), answer
    assert editor.text(uri) == with_hunk(original, last)
    if len(hunks) > 1:
        assert editor.text(uri) != candidate["text"]

    # the file moved on: the next change of that search is refused
    again = await editor.command("accelopt.applyHunks", search_id, candidate["id"], [hunks[0]["index"]])
    assert not applied(again)
    assert editor.text(uri) == with_hunk(original, last)
