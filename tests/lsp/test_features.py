"""Hover, code lens, diagnostics, quick fix and code actions over a real LSP connection."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import pytest
from lsp_editor import Editor, alive, cmdline, descendants, wait_until
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

BOUND = r"(HBM-bandwidth|Tensor Engine|Vector/Scalar|latency) bound"
# the hover's headline: "**69.2 µs** · 28% of peak (roofline 19.1 µs) · HBM-bandwidth bound"
HEADLINE = (
    r"^\*\*(?P<latency>[\d.]+) (?:ms|µs|ns)\*\* · (?P<percent>\d+)% of peak "
    rf"\(roofline (?P<peak>[\d.]+) (?:ms|µs|ns)\) · {BOUND}  $"
)


def cleared(editor: Editor, uri: str) -> bool:
    found = editor.client.diagnostics.get(uri)
    return found is not None and len(found) == 0


async def test_hover_answers_at_once_then_shows_the_profile_from_cache(editor: Editor):
    uri = editor.open("silu.py")
    started = time.perf_counter()
    first = await editor.hover_kernel(uri, "silu_kernel")
    assert time.perf_counter() - started < 2.0, "the first hover must not wait for the profile"
    assert "silu_kernel" in first

    card = await editor.profiled_hover(uri, "silu_kernel")
    header = card.splitlines()[0]
    assert header == "**`silu_kernel`** · simulated on trn1 · legacy NKI (neuronxcc.nki) · small size"
    headline = re.search(HEADLINE, card, re.MULTILINE)
    assert headline is not None, card
    latency, percent, peak = float(headline["latency"]), int(headline["percent"]), float(headline["peak"])
    assert latency > 0 and peak > 0 and 0 < percent <= 100
    assert re.search(r"^HBM traffic: [\d.]+ \w+ read · [\d.]+ \w+ written  $", card, re.MULTILINE), card
    engines = re.search(r"^Engines busy: (.+)$", card, re.MULTILINE)
    assert engines is not None
    shares = re.findall(r"(Tensor|Vector|Scalar|GpSimd|DMA) (\d+)%", engines[1])
    assert sorted(name for name, _ in shares) == ["DMA", "GpSimd", "Scalar", "Tensor", "Vector"]
    assert [int(v) for _, v in shares] == sorted((int(v) for _, v in shares), reverse=True)
    # compact enough for VS Code to show it whole (a taller card got a scrollbar that hid the
    # costliest lines): header, three headline lines, "Costliest lines:" and three lines
    assert len([line for line in card.splitlines() if line.strip()]) <= 8, card
    assert all(len(line) <= 110 for line in card.splitlines()), card
    # the three costliest lines point into the kernel's body
    lines = [int(n) for n in re.findall(r"^\d\. line (\d+) · \d+% · [\d.]+ (?:ms|µs|ns)", card, re.MULTILINE)]
    assert 1 <= len(lines) <= 3
    kernel_start = editor.line_of(uri, "def silu_kernel(") + 1
    assert all(line > kernel_start for line in lines)
    assert editor.lens_refreshes >= 1, "the server must ask for a refresh when the profile lands"

    # warm: the same document version answers from the cache, on the decorator line too
    started = time.perf_counter()
    warm = await editor.hover(uri, editor.line_of(uri, "@nki.jit"), 2)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"a warm hover took {elapsed:.2f} s"
    assert warm == card

    # a hover off the kernel's header answers nothing
    body = await editor.client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=editor.line_of(uri, "gate = nl.sigmoid"), character=8),
        )
    )
    assert body is None


async def test_code_lens_shows_percent_of_peak_and_optimize(editor: Editor):
    uri = editor.open("silu.py")
    await editor.profiled_hover(uri, "silu_kernel")
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [lens.command.title for lens in lenses if lens.command]
    assert any(re.fullmatch(rf"\d+% of peak · {BOUND}", t) for t in titles), titles
    optimize = next(lens.command for lens in lenses if lens.command and lens.command.title == "Optimize")
    assert optimize.command == "accelopt.optimize"
    assert list(optimize.arguments) == [uri, "silu_kernel"]
    timeline = next(lens.command for lens in lenses if lens.command and lens.command.title == "Timeline")
    assert timeline.command == "accelopt.showTimeline" and list(timeline.arguments) == [uri, "silu_kernel"]
    assert all(lens.range.start.line == editor.line_of(uri, "@nki.jit") for lens in lenses)


async def test_broken_kernel_gets_an_error_at_its_line_refreshed_on_save(editor: Editor):
    uri = editor.open("broken.py")
    diagnostics = await wait_until(lambda: editor.client.diagnostics.get(uri), what="diagnostics")
    assert len(diagnostics) == 1
    error = diagnostics[0]
    assert error.severity == types.DiagnosticSeverity.Error
    assert error.source == "accelopt"
    assert error.range.start.line == editor.line_of(uri, "tile = nl.load(x)")
    assert "partition" in error.message
    assert error.message.endswith("(assuming legacy NKI (neuronxcc.nki) on trn1)")  # the rules applied

    # fix it (two row tiles of 128), save: the diagnostic goes away
    fixed = editor.text(uri).replace(
        "    tile = nl.load(x)\n    nl.store(out, value=tile)\n",
        "    for i in nl.affine_range(2):\n"
        "        tile = nl.load(x[i * 128 : (i + 1) * 128, :])\n"
        "        nl.store(out[i * 128 : (i + 1) * 128, :], value=tile)\n",
    )
    editor.change(uri, fixed)
    editor.save(uri)
    await wait_until(lambda: cleared(editor, uri), what="cleared diagnostics")


async def test_missing_inputs_diagnostic_and_its_quick_fix(editor: Editor):
    uri = editor.open("no_inputs.py")
    diagnostics = await wait_until(lambda: editor.client.diagnostics.get(uri), what="diagnostics")
    (missing,) = diagnostics
    assert missing.code == "missing-inputs"
    assert "# accelopt: inputs" in missing.message and "quick fix" in missing.message
    assert missing.range.start.line == editor.line_of(uri, "def scale_kernel(")

    actions = await editor.code_actions(uri, missing.range.start.line, [missing])
    fix = next(a for a in actions if a.kind == types.CodeActionKind.QuickFix)
    (edit,) = fix.edit.changes[uri]
    assert edit.new_text.startswith("# accelopt: inputs x=")
    assert edit.range.start.line == editor.line_of(uri, "@nki.jit")

    # apply the fix as the editor would and save: the kernel now profiles
    lines = editor.text(uri).splitlines(keepends=True)
    lines.insert(edit.range.start.line, edit.new_text)
    editor.change(uri, "".join(lines))
    editor.save(uri)
    await wait_until(lambda: cleared(editor, uri), what="cleared diagnostics")
    card = await editor.profiled_hover(uri, "scale_kernel")
    assert re.search(HEADLINE, card, re.MULTILINE), card


async def test_optimize_code_action_is_resolved_lazily(editor: Editor):
    uri = editor.open("silu.py")
    actions = await editor.code_actions(uri, editor.line_of(uri, "gate = nl.sigmoid"))
    (optimize,) = [a for a in actions if a.title == "Optimize kernel `silu_kernel` with AccelOpt"]
    assert optimize.kind == types.CodeActionKind.RefactorRewrite
    assert optimize.command is None and optimize.edit is None  # filled in by codeAction/resolve

    resolved = await editor.client.code_action_resolve_async(optimize)
    assert resolved.command is not None
    assert resolved.command.command == "accelopt.optimize"
    assert list(resolved.command.arguments) == [uri, "silu_kernel"]

    outside = await editor.code_actions(uri, editor.line_of(uri, "TILE_ROWS = 128"))
    assert not outside


async def test_a_dead_profile_process_is_replaced(editor: Editor):
    uri = editor.open("silu.py")
    await editor.profiled_hover(uri, "silu_kernel")
    server = editor.client._server
    assert server is not None
    (profiler,) = [pid for pid in descendants(server.pid) if "accelopt.lsp.profile_process" in cmdline(pid)]
    os.kill(profiler, signal.SIGKILL)
    await wait_until(lambda: not alive(profiler), 10, "the profile process to die")
    editor.change(uri, editor.text(uri).replace("TILE_COLS = 512", "TILE_COLS = 256"))
    card = await editor.profiled_hover(uri, "silu_kernel")
    assert re.search(HEADLINE, card, re.MULTILINE), card


async def test_workspace_configuration_overrides_the_initialization_options(editor: Editor):
    uri = editor.open("silu.py")
    assert "simulated on trn1" in await editor.profiled_hover(uri, "silu_kernel")
    editor.client.set_configuration({"hardware": "trn2"}, section="accelopt")
    editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def on_trn2() -> bool:
        return "simulated on trn2" in await editor.profiled_hover(uri, "silu_kernel")

    deadline = time.monotonic() + 60
    while not await on_trn2():
        assert time.monotonic() < deadline, "the new hardware setting never reached the profiles"
        await asyncio.sleep(0.1)


async def test_a_file_with_host_code_offers_and_profiles_each_kernel(editor: Editor):
    uri = editor.open("host_code.py")
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    offered = [lens.command.arguments[1] for lens in lenses if lens.command and lens.command.title == "Optimize"]
    assert offered == ["double_kernel", "square_kernel"]
    card = await editor.profiled_hover(uri, "square_kernel")
    assert re.search(HEADLINE, card, re.MULTILINE), card  # profiled: the torch import never ran
    assert "Note: ran only what the kernel reaches" in card and "`import torch`" in card
