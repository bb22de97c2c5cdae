"""`accelopt profile` as a user runs it: a real subprocess of the installed entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from accelopt.profiling.isolation import detect

from .kernels import HAND_WRITTEN


def accelopt(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "accelopt", "profile", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_table_json_and_trace_out(tmp_path):
    (tmp_path / "double.py").write_text(HAND_WRITTEN)
    table = accelopt("double.py", "--seeds", "1", "--trace-out", "trace.json", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "ok double_kernel: correct on 1 seed(s)" in out and "trace verified by a re-run on unseen inputs" in out
    assert "Profile (simulated on trn1)" in out and "percent of peak" in out and "Hottest lines" in out
    assert "nl.store(out, value=nl.multiply(t, 2.0))" in out  # hottest lines show their source
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)

    as_json = accelopt("double.py", "--no-check", "--json", "--hardware", "trn2", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    evaluation = json.loads(as_json.stdout)
    assert evaluation["status"] == "ok" and evaluation["max_error"] is None and not evaluation["verified"]
    assert evaluation["profile"]["hardware"] == "trn2" and evaluation["profile"]["latency_ms"] > 0


NKI07_DOUBLE = """import nki
import nki.isa as nisa
import nki.language as nl


# accelopt: inputs x=float32[128,256]
@nki.jit
def double_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def test_the_default_target_follows_the_kernels_nki_generation(tmp_path):
    (tmp_path / "legacy.py").write_text(HAND_WRITTEN)
    (tmp_path / "current.py").write_text(NKI07_DOUBLE)
    runs = {
        name: json.loads(accelopt(f"{name}.py", "--seeds", "1", "--json", *extra, cwd=tmp_path).stdout)
        for name, extra in (("legacy", ()), ("current", ()))
    }
    forced = json.loads(accelopt("current.py", "--seeds", "1", "--json", "--hardware", "trn1", cwd=tmp_path).stdout)
    assert runs["legacy"]["status"] == runs["current"]["status"] == forced["status"] == "ok"
    assert runs["legacy"]["profile"]["hardware"] == "trn1"
    assert runs["legacy"]["assumed"] == "legacy NKI (neuronxcc.nki) on trn1"
    assert runs["current"]["profile"]["hardware"] == "trn2"
    assert runs["current"]["assumed"] == "NKI 0.7 (nki.*) on trn2"
    assert runs["current"]["profile"]["nki_api"] == "NKI 0.7 (nki.*)"
    assert forced["profile"]["hardware"] == "trn1" and forced["assumed"] == "NKI 0.7 (nki.*) on trn1"


def test_failing_kernel_exits_1_with_file_and_line(tmp_path):
    (tmp_path / "bad.py").write_text(
        HAND_WRITTEN.replace("t = nl.load(x)", "t = nl.load(x)\n    ratio = 1 / 0")
    )
    done = accelopt("bad.py", "--seeds", "1", "--kernel", "double_kernel", cwd=tmp_path)
    assert done.returncode == 1
    assert f"{tmp_path / 'bad.py'}:11: runtime_error: ZeroDivisionError" in done.stdout


def test_usage_errors_name_the_file_and_line(tmp_path):
    missing = accelopt("nowhere.py", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere.py: no such file" in missing.stderr

    (tmp_path / "plain.py").write_text("def f(x):\n    return x\n")
    no_kernel = accelopt("plain.py", cwd=tmp_path)
    assert no_kernel.returncode == 2 and "no @nki.jit kernel found" in no_kernel.stderr

    (tmp_path / "undeclared.py").write_text(
        HAND_WRITTEN.replace("# accelopt: inputs x=float32[128,256]\n", "")
    )
    undeclared = accelopt("undeclared.py", cwd=tmp_path)
    assert undeclared.returncode == 2
    assert f"{tmp_path / 'undeclared.py'}:6: error: no way to get inputs" in undeclared.stderr
    assert "# accelopt: inputs x=float32[128,512]" in undeclared.stderr


def test_the_tool_says_at_start_when_kernels_run_without_os_isolation(tmp_path):
    """No bubblewrap on the PATH (as on macOS, or before `make setup`): the profile still runs,
    and the first line on stderr says what the sandbox lacks and where to read what holds."""
    (tmp_path / "double.py").write_text(HAND_WRITTEN)
    bare = {"PATH": str(tmp_path / "no-tools"), "HOME": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    done = accelopt("double.py", "--seeds", "1", cwd=tmp_path, env=bare)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert "OS isolation OFF" in first and "bubblewrap is not installed" in first and "SECURITY.md" in first
    if detect().kernel_enforced:  # this machine has it: then nothing is said
        with_tools = accelopt("double.py", "--seeds", "1", cwd=tmp_path)
        assert with_tools.returncode == 0 and "OS isolation OFF" not in with_tools.stderr


def test_syntax_error_without_kernel_name_gives_the_line(tmp_path):
    (tmp_path / "broken.py").write_text(HAND_WRITTEN.replace("t = nl.load(x)", "t = nl.load(x"))
    done = accelopt("broken.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "broken.py:10: error: syntax error:" in done.stderr, done.stderr


def test_hottest_lines_keep_slices_and_long_lines_whole(tmp_path):
    long_comment = "# " + "the whole row block, " * 6
    text = HAND_WRITTEN.replace(
        "    t = nl.load(x)\n", f"    r0 = 0\n    t = nl.load(x[r0 : r0 + 128, 0:256])  {long_comment.strip()}\n"
    )
    (tmp_path / "sliced.py").write_text(text)
    done = accelopt("sliced.py", "--seeds", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"t = nl.load(x[r0 : r0 + 128, 0:256])  {long_comment.strip()}" in done.stdout


def test_host_code_is_left_out_with_a_note(tmp_path):
    text = "import argparse\n" + HAND_WRITTEN + '\nif __name__ == "__main__":\n    argparse.ArgumentParser().parse_args()\n'
    (tmp_path / "harness.py").write_text(text)
    done = accelopt("harness.py", "--seeds", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: ran only what the kernel reaches" in done.stdout and "line 1 (`import argparse`)" in done.stdout
