"""The engine timeline of a kernel, through a real LSP session: lanes for every engine and DMA
queue, bars that name real source lines of the kernel, the roofline point, the costliest lines;
a kernel that cannot run answers with the reason, not an error."""

from __future__ import annotations

import pytest
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_timeline_of_the_silu_example(client: LanguageClient):
    editor = client.editor  # type: ignore[attr-defined]
    uri = editor.open("silu.py")
    result = await editor.request("accelopt/timeline", {"uri": uri, "kernelName": "silu_kernel"})
    schedule = result["schedule"]
    assert schedule is not None, result["message"]
    assert schedule["label"].startswith("simulated on trn")
    names = [lane["name"] for lane in schedule["lanes"]]
    assert names[:4] == ["tensor", "vector", "scalar", "gpsimd"] and "DMA queue 0" in names
    bars = schedule["bars"]
    # one bar per compute instruction; a DMA transfer is one bar per queue piece it uses
    assert bars and not schedule["coalesced"]
    assert 0 < len([b for b in bars if b[0] < 4]) <= schedule["instructions"]
    lines = editor.text(uri).splitlines()
    for lane, start, end, line, kind in bars[:200]:
        assert 0 <= lane < len(names) and 0 <= start <= end <= schedule["totalUs"] + 1e-6
        assert 1 <= line <= len(lines) and schedule["kinds"][kind]
    # the busiest lanes hold bars, and a DMA lane is among them (SiLU streams its input)
    used = {b[0] for b in bars}
    assert any(lane >= 4 for lane in used) and used & {1, 2}
    roofline = schedule["roofline"]
    assert roofline["intensity"] > 0 and 0 < roofline["achievedFlopsPerS"] <= roofline["computePeakFlopsPerS"]
    assert result["lines"] and all(1 <= entry["line"] <= len(lines) for entry in result["lines"])


async def test_a_kernel_without_inputs_answers_with_the_reason(client: LanguageClient):
    editor = client.editor  # type: ignore[attr-defined]
    uri = editor.open("no_inputs.py")
    name = next(line.split("def ", 1)[1].split("(")[0] for line in editor.text(uri).splitlines() if line.startswith("def "))
    result = await editor.request("accelopt/timeline", {"uri": uri, "kernelName": name})
    assert result["schedule"] is None and result["message"]
