"""Contract tests of the `neuron` backend against a FAKE Neuron SDK (tests/contract/fake_neuron_sdk).

Trainium and the Neuron SDK cannot exist here. The fake reproduces only the documented interfaces
the backend relies on on today's SDK: `nki.baremetal(kernel, save_neff_name=,
additional_compile_opt=)` compiling and running the kernel, `neuron-explorer capture -n X.neff -s
X.ntff --profile-nth-exec=2` writing `X_exec_2.ntff`, and `neuron-explorer view -n X.neff -s
X_exec_2.ntff --output-file DIR` writing `DIR/Summary.parquet` (one row, fields as in Neuron
Explorer's "Profile Parquet Schema Reference": `total_time` seconds, `*_percent` in percent).
The backend itself, its worker subprocess and the task code are the real ones.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.neuron import (
    COMPILE_OPTIONS,
    NeuronBackend,
    NeuronResult,
    NeuronUnavailable,
    read_instruction_lines,
    read_summary_table,
)
from accelopt.profiling.task import task_for_kernel

pytestmark = pytest.mark.contract

FAKE_SDK = Path(__file__).resolve().parent / "fake_neuron_sdk"
EXAMPLES = Path(__file__).resolve().parents[2] / "kernels_examples"


@pytest.fixture
def fake_host(tmp_path):
    """An environment in which the fake SDK is importable, the fake profiler is on PATH and a
    stand-in device file exists; returns (env, device_glob, log path)."""
    device = tmp_path / "neuron0"
    device.write_text("")
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKE_SDK), env.get("PYTHONPATH", "")) if p)
    # the fake `neuron-explorer` executable: a launcher for fake_neuron_sdk/neuron_explorer.py
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    profiler = bin_dir / "neuron-explorer"
    profiler.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{FAKE_SDK / "neuron_explorer.py"}" "$@"\n')
    profiler.chmod(0o755)
    env["PATH"] = os.pathsep.join((str(bin_dir), env.get("PATH", "")))
    env["FAKE_NEURON_LOG"] = str(log)
    env["FAKE_NEURON_STATE"] = str(tmp_path / "times.counter")
    env["OPENBLAS_NUM_THREADS"] = "1"  # the emulator behind the fake: no BLAS threads fighting on 2 cores
    return env, str(tmp_path / "neuron*"), log


def _silu(text_edit=None):
    path = EXAMPLES / "silu.py"
    text = path.read_text()
    if text_edit is not None:
        text = text_edit(text)
    kernel = KernelSource(text=text, name="silu_kernel", path=str(path))
    return kernel, task_for_kernel(kernel, size="small")


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_measures_with_the_documented_toolchain_interface(fake_host, tmp_path):
    env, devices, log = fake_host
    # 10 measured runs within 1% of each other (the 2 warm-ups write no trace, so consume none)
    times = [10e-6 * (1 + 0.0008 * i) for i in range(10)]
    env["FAKE_NEURON_TIMES"] = ",".join(f"{t:.9g}" for t in times)
    backend = NeuronBackend(env=env, device_glob=devices, workdir=tmp_path / "jobs")
    kernel, task = _silu()
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(seeds=2, check_correctness=True))
    await backend.aclose()

    assert evaluation.status == "ok", evaluation.message
    assert evaluation.max_error is not None and evaluation.max_error <= 2e-5
    profile = evaluation.profile
    assert profile is not None and profile.backend == "neuron" and profile.label == "measured on trn1"
    assert profile.latency_ms == pytest.approx(statistics.median(times) * 1e3)
    # roofline from the task's work() (silu 256 x 1024: 8 bytes per element at 440.2 GB/s)
    assert profile.work.hbm_bytes == 8 * 256 * 1024
    assert profile.bound == "hbm" and profile.roofline_bound == "hbm"
    assert profile.percent_of_peak == pytest.approx(profile.peak_latency_ms / profile.latency_ms)
    assert profile.hbm_read_bytes == 256 * 1024 * 4 and profile.hbm_write_bytes == 256 * 1024 * 4
    # per-source-line device time from the Instruction table's nki_source_location
    lines = kernel.text.splitlines()
    sigmoid_line = next(i for i, t in enumerate(lines, 1) if "nl.sigmoid(tile)" in t)
    assert profile.lines and profile.lines[0].time_ms >= profile.lines[-1].time_ms
    by_line = {c.line: c for c in profile.lines}
    assert "scalar" in by_line[sigmoid_line].engines and by_line[sigmoid_line].text.startswith("gate =")
    assert sum(c.fraction for c in profile.lines) == pytest.approx(1.0)

    calls = _calls(log)
    compiles = [c for c in calls if "tool" not in c]
    assert all(c["additional_compile_opt"] == COMPILE_OPTIONS for c in compiles)
    assert all(
        c["NEURON_CC_FLAGS"] == "--auto-cast=none" and c["NEURON_RT_NUM_CORES"] == "1" for c in compiles
    )
    checks, warmups = compiles[:2], compiles[2:]
    assert all(c["save_neff_name"] is None for c in checks)
    assert len(warmups) == 2 and all(c["save_neff_name"].endswith(".neff") for c in warmups)
    assert all(c["save_trace_name"] is None for c in compiles)  # traces come from Neuron Explorer
    captures = [c for c in calls if c.get("tool") == "capture"]
    views = [c for c in calls if c.get("tool") == "view"]
    assert len(captures) == len(views) == 10
    for c, v in zip(captures, views):
        assert c["neff"] == warmups[0]["save_neff_name"] and c["nth"] == 2
        assert c["ntff"].endswith("_exec_2.ntff") and v["ntff"] == c["ntff"]


async def test_remeasures_while_the_spread_exceeds_one_percent(fake_host):
    env, devices, log = fake_host
    noisy = [100e-6, 105e-6] + [101e-6] * 8  # 5% spread: measured again
    steady = [90e-6 + 0.05e-6 * i for i in range(10)]  # 0.5% spread: accepted
    env["FAKE_NEURON_TIMES"] = ",".join(f"{t:.9g}" for t in noisy + steady)
    backend = NeuronBackend(env=env, device_glob=devices)
    kernel, task = _silu()
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(check_correctness=False))
    await backend.aclose()

    assert evaluation.status == "ok", evaluation.message
    assert evaluation.profile.latency_ms == pytest.approx(statistics.median(steady) * 1e3)
    assert sum(1 for c in _calls(log) if c.get("tool") == "capture") == 20


async def test_wrong_kernel_is_incorrect_on_hardware_too(fake_host):
    env, devices, _ = fake_host
    backend = NeuronBackend(env=env, device_glob=devices)
    kernel, task = _silu(lambda text: text.replace("nl.multiply(tile, gate)", "nl.add(tile, gate)"))
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(seeds=2))
    await backend.aclose()
    assert evaluation.status == "incorrect"
    assert "exceeds tolerance" in evaluation.message and evaluation.profile is None


async def test_kernel_fault_reports_the_kernel_line(fake_host):
    env, devices, _ = fake_host
    backend = NeuronBackend(env=env, device_glob=devices)
    kernel, task = _silu(
        lambda text: text.replace("gate = nl.sigmoid(tile)", "gate = nl.sigmoid(undefined_tile)")
    )
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(seeds=1))
    await backend.aclose()
    assert evaluation.status == "runtime_error"
    assert "undefined_tile" in evaluation.message
    assert (
        evaluation.line == kernel.text.splitlines().index("            gate = nl.sigmoid(undefined_tile)") + 1
    )


def test_fails_fast_without_the_sdk_a_device_or_the_profiler(fake_host, tmp_path):
    env, devices, _ = fake_host
    without_sdk = {**env, "PYTHONPATH": ""}
    with pytest.raises(NeuronUnavailable, match=r"import nki.*import neuronxcc\.nki"):
        NeuronBackend(env=without_sdk, device_glob=devices)
    with pytest.raises(NeuronUnavailable, match=r"no Neuron device"):
        NeuronBackend(env=env, device_glob=str(tmp_path / "absent*"))
    with pytest.raises(NeuronUnavailable, match=r"neuron-explorer"):
        NeuronBackend(env={**env, "PATH": "/nonexistent"}, device_glob=devices)


async def test_policy_and_syntax_are_checked_before_anything_runs(fake_host):
    env, devices, log = fake_host
    backend = NeuronBackend(env=env, device_glob=devices)
    kernel, task = _silu(
        lambda text: text.replace("    rows, cols = x.shape", "    import os\n    rows, cols = x.shape")
    )
    rejected = await backend.evaluate(kernel, task, EvaluationOptions(seeds=1))
    broken, _ = _silu(lambda text: text.replace("def silu_kernel(x):", "def silu_kernel(x)"))
    syntax = await backend.evaluate(broken, task, EvaluationOptions(seeds=1))
    await backend.aclose()
    assert rejected.status == "rejected" and "os" in rejected.message
    assert (
        syntax.status == "syntax_error"
        and syntax.line == kernel.text.splitlines().index("def silu_kernel(x):") + 1
    )
    assert not log.exists()  # nothing was compiled or run


async def test_compiler_error_codes_become_compile_errors_at_the_kernel_line(fake_host):
    env, devices, _ = fake_host
    backend = NeuronBackend(env=env, device_glob=devices)
    kernel, task = _silu(lambda text: text.replace("TILE_ROWS = 128", "TILE_ROWS = 256"))
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(seeds=1))
    await backend.aclose()
    assert evaluation.status == "compile_error"
    assert evaluation.error_code == "err_num_partition_exceed_arch_limit"
    load_line = next(i for i, t in enumerate(kernel.text.splitlines(), 1) if "tile = nl.load(" in t)
    assert evaluation.line == load_line


def test_summary_parquet_must_be_one_row_with_total_time(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(name: str, columns: dict) -> Path:
        path = tmp_path / name
        pq.write_table(pa.table(columns), path)
        return path

    good = table(
        "good.parquet",
        {
            "total_time": pa.array([1.5e-5], pa.float64()),
            "hbm_read_bytes": pa.array([4096], pa.int64()),
            "dma_active_time_percent": pa.array([87.5], pa.float64()),
            "profile_note": pa.array(["text is dropped"]),
        },
    )
    assert read_summary_table(good) == {
        "total_time": 1.5e-5,
        "hbm_read_bytes": 4096.0,
        "dma_active_time_percent": 0.875,  # the schema's percent, as our fraction
    }
    with pytest.raises(ValueError, match="one row"):
        read_summary_table(table("two.parquet", {"total_time": pa.array([1.0, 2.0], pa.float64())}))
    with pytest.raises(ValueError, match="no total_time"):
        read_summary_table(table("none.parquet", {"hbm_read_bytes": pa.array([1], pa.int64())}))
    # a worker's long compiler output keeps its end, where the error is
    long = NeuronResult(status="compile_error", message="x" * 20000 + " err_tail")
    assert len(long.message) <= 8000 and long.message.endswith("err_tail")


def test_instruction_table_attributes_time_to_the_kernel_file_lines(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "Instruction.parquet"
    pq.write_table(
        pa.table(
            {
                "duration_ns": pa.array([1000, 3000, 500, 800], pa.int64()),
                "engine": pa.array(["vector", "scalar", "tensor", "vector"]),
                "nki_source_location": pa.array(
                    ["/w/kernel.py:7", "['kernel.py:9', 'kernel.py:10']", "other.py:3", None]
                ),
            }
        ),
        path,
    )
    got = {t.line: t for t in read_instruction_lines(path, "/jobs/kernel.py")}
    assert set(got) == {7, 9, 10}  # other files and instructions without a location are skipped
    assert got[7].engines == {"vector": pytest.approx(1e-6)}
    assert got[9].engines == {"scalar": pytest.approx(1.5e-6)}  # fused: an equal share per line


async def test_checks_at_the_small_size_and_times_at_the_full_size(fake_host, tmp_path):
    env, devices, log = fake_host
    times = [40e-6 * (1 + 0.0005 * i) for i in range(10)]
    env["FAKE_NEURON_TIMES"] = ",".join(f"{t:.9g}" for t in times)
    backend = NeuronBackend(env=env, device_glob=devices, workdir=tmp_path / "jobs")
    kernel, _ = _silu()
    task = task_for_kernel(kernel, size="full")  # silu_ref.py offers small (256 x 1024) and full (512 x 2048)
    evaluation = await backend.evaluate(kernel, task, EvaluationOptions(seeds=2, check_correctness=True))
    wrong, _ = _silu(lambda text: text.replace("nl.multiply(tile, gate)", "nl.add(tile, gate)"))
    rejected = await backend.evaluate(wrong, task, EvaluationOptions(seeds=2, check_correctness=True))
    await backend.aclose()

    assert evaluation.status == "ok", evaluation.message
    assert (evaluation.checked_size, evaluation.timed_size) == ("small", "full")
    assert len(evaluation.seeds) == 2 and evaluation.max_error is not None and evaluation.max_error <= 2e-5
    assert any("checked on the device at the small size on 2 seed(s)" in n for n in evaluation.notes)
    assert any("timed on the device at the full size" in n for n in evaluation.notes)
    # The profile and its roofline are the full size's: 8 bytes per element of 512 x 2048.
    assert evaluation.profile.latency_ms == pytest.approx(statistics.median(times) * 1e3)
    assert evaluation.profile.work.hbm_bytes == 8 * 512 * 2048
    compiles = [c for c in _calls(log) if "tool" not in c]
    checks = [c for c in compiles if c["save_neff_name"] is None]
    measured = [c for c in compiles if c["save_neff_name"] is not None]
    # The good kernel's two seeds and the wrong one's first, all at the small size; only the good
    # kernel is compiled for measuring (twice, to warm up), at the full size.
    assert [c["shapes"] for c in checks] == [[[256, 1024]]] * 3
    assert [c["shapes"] for c in measured] == [[[512, 2048]]] * 2
    assert sum(1 for c in _calls(log) if c.get("tool") == "capture") == 10
    assert rejected.status == "incorrect" and rejected.profile is None
    assert (rejected.checked_size, rejected.timed_size) == ("small", "full")
