"""`accelopt optimize` and `accelopt memory` as a user runs them (in-process `main`), with the
real simulator and LLM agents against the loopback chat server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from chat_server import ChatRequest, Reply
from scripted_endpoint import WIDEN, ScriptedEndpoint, code, lesson_reply
from silu_variants import BASELINE, WIDE

from accelopt.cli import main
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.events import Finished, search_event_adapter
from accelopt.search.memory import Memory


def steady(role: str, request: ChatRequest) -> Reply:
    if role == "planner":
        return Reply(content=json.dumps(WIDEN))
    if role in ("executor", "fixer"):
        return code(WIDE)
    return lesson_reply()


def test_optimize_writes_best_kernel_report_and_events(chat_server, tmp_path: Path, capsys):
    server = chat_server(ScriptedEndpoint(steady))
    kernel_file = tmp_path / "silu_small.py"
    kernel_file.write_text(BASELINE)
    config = tmp_path / "accelopt.toml"
    config.write_text(
        f'agents = "llm"\nmemory = "{tmp_path / "memory.sqlite"}"\n'
        f'[llm]\nbase_url = "{server.base_url}"\nmodel = "test-model"\ntimeout_s = 5\n'
        '[llm.prices."test-model"]\nprompt_per_million = 3.0\ncompletion_per_million = 15.0\n'
        "[search]\nfix_attempts = 0\n"
    )
    out = tmp_path / "out"
    code_ = main(
        [
            "optimize",
            str(kernel_file),
            "--config",
            str(config),
            "-T",
            "1",
            "-B",
            "1",
            "-N",
            "1",
            "-K",
            "1",
            "--seeds",
            "2",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code_ == 0
    best = (out / "best.py").read_text()
    assert (
        KernelSource(text=best, name="silu_kernel").normalized_hash()
        == KernelSource(text=WIDE, name="silu_kernel").normalized_hash()
    )
    events = [
        search_event_adapter.validate_json(line) for line in (out / "events.jsonl").read_text().splitlines()
    ]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "completed"
    assert finished.ranked[0].candidate.speedup > 1
    assert "completed" in printed and WIDEN["title"] in printed and "simulated on trn1" in printed
    assert (
        "against the baseline" in printed
        and "+            tile = nl.load(x[i * 128 : (i + 1) * 128, j * 512 : (j + 1) * 512])\n" in printed
    )  # the whole line: output that is not a terminal is not cut at 80 columns
    report = (out / "report.html").read_text()
    for fragment in (
        "Candidate tree",
        "simulated on trn1",
        "<span class='add'>",
        WIDEN["title"],
        "$0.00",
        "<svg",
    ):
        assert fragment in report, fragment
    with Memory(tmp_path / "memory.sqlite") as memory:
        assert memory.count() == 1


def test_optimize_explains_missing_inputs_with_file_and_line(tmp_path: Path, capsys):
    kernel_file = tmp_path / "bare.py"
    kernel_file.write_text(BASELINE.replace("# accelopt: inputs x=float32[256,512]\n", ""))
    assert main(["optimize", str(kernel_file), "--agents", "offline", "--no-memory"]) == 2
    err = capsys.readouterr().err
    assert f"{kernel_file}:5:" in err and "accelopt: inputs" in err


def test_optimize_rejects_a_bad_config_file(tmp_path: Path, capsys):
    kernel_file = tmp_path / "k.py"
    kernel_file.write_text(BASELINE)
    config = tmp_path / "bad.toml"
    config.write_text("[search]\nbeam_width = 0\n")
    assert main(["optimize", str(kernel_file), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "search.beam_width" in err


def test_memory_command_lists_shows_and_prunes(tmp_path: Path, capsys, monkeypatch):
    from accelopt.search.candidate import Experience, Lesson

    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: table cells unwrapped

    path = tmp_path / "m.sqlite"
    with Memory(path) as memory:
        ids = [
            memory.add(
                Experience(
                    slow_kernel="a = 1\n",
                    fast_kernel="b = 2\n",
                    speedup=s,
                    lesson=Lesson(title=t, plan=f"plan {t}", before="old()", after="new()", positive=s > 1),
                    kernel_family="silu",
                )
            )
            for t, s in (("Widen tiles", 1.4), ("Fuse badly", 0.8))
        ]
    assert main(["memory", "--memory", str(path), "list"]) == 0
    listing = capsys.readouterr().out
    assert "Widen tiles" in listing and "Fuse badly" in listing and "1.400x" in listing
    assert main(["memory", "--memory", str(path), "show", str(ids[0])]) == 0
    shown = capsys.readouterr().out
    assert "plan Widen tiles" in shown and "new()" in shown and "positive" in shown
    assert main(["memory", "--memory", str(path), "rm", str(ids[1])]) == 0
    # the older spelling still works, and says so
    assert main(["memory", "--path", str(path), "show", str(ids[1])]) == 1
    err = capsys.readouterr().err
    assert "no experience" in err and "--path is deprecated; use --memory FILE" in err
    assert main(["memory", "--path", str(path), "clear", "--yes"]) == 0
    with Memory(path) as memory:
        assert memory.count() == 0


def test_memory_listing_into_a_pipe_keeps_whole_cells(tmp_path: Path, capsys, monkeypatch):
    from accelopt.search.candidate import Experience, Lesson

    monkeypatch.delenv("COLUMNS", raising=False)  # not a terminal: rich would assume 80 columns
    path = tmp_path / "m.sqlite"
    with Memory(path) as memory:
        memory.add(
            Experience(
                slow_kernel="a = 1\n",
                fast_kernel="b = 2\n",
                speedup=1.25,
                lesson=Lesson(title="Keep the rhs tile resident across output tiles", plan="p", positive=True),
                kernel_family="add_rmsnorm_matmul",
            )
        )
    assert main(["memory", "--memory", str(path), "list"]) == 0
    listing = capsys.readouterr().out
    assert "add_rmsnorm_matmul" in listing and "Keep the rhs tile resident across output tiles" in listing
    assert "…" not in listing


def test_ctrl_c_stops_cleanly_and_still_writes_the_results(chat_server, tmp_path: Path):
    def slow_executor(role: str, request: ChatRequest) -> Reply:
        reply = steady(role, request)
        if role == "executor":
            reply.delay_s = 30.0  # the search is waiting on the model when the user presses Ctrl-C
        return reply

    server = chat_server(ScriptedEndpoint(slow_executor))
    kernel_file = tmp_path / "silu_small.py"
    kernel_file.write_text(BASELINE)
    config = tmp_path / "accelopt.json"
    config.write_text(
        json.dumps(
            {"agents": "llm", "llm": {"base_url": server.base_url, "model": "test-model", "timeout_s": 60}}
        )
    )
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "accelopt",
        "optimize",
        str(kernel_file),
        "--config",
        str(config),
        "--no-memory",
        "--seeds",
        "2",
        "-T",
        "3",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    deadline = time.monotonic() + 90
    while not server.requests_for("executor") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert server.requests_for("executor"), proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "cancelled" in stdout
    events = [
        search_event_adapter.validate_json(line) for line in (out / "events.jsonl").read_text().splitlines()
    ]
    assert isinstance(events[-1], Finished) and events[-1].reason == "cancelled"
    assert [r.candidate.id for r in events[-1].ranked] == ["c0"]
    assert (out / "best.py").read_text() == BASELINE and (out / "report.html").exists()
