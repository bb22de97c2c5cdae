"""Contract tests of the `neuron` backend against a FAKE Neuron SDK (tests/contract/fake_neuron_sdk).

Trainium and the Neuron SDK cannot exist here. The fake reproduces only the documented interfaces
the backend relies on (NKI_NOTES §8): `nki.baremetal(kernel, save_neff_name=, save_trace_name=,
additional_compile_opt=)` and `neuron-profile view --output-format summary-json -n X.neff -s X.ntff`
printing one top-level key whose value is the flat metric dict with `total_time` in seconds.
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
    read_summary,
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
    # the fake `neuron-profile` executable: a launcher for fake_neuron_sdk/neuron_profile.py
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    profiler = bin_dir / "neuron-profile"
    profiler.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{FAKE_SDK / "neuron_profile.py"}" "$@"\n')
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

    calls = _calls(log)
    assert all(c["additional_compile_opt"] == COMPILE_OPTIONS for c in calls)
    assert all(c["NEURON_CC_FLAGS"] == "--auto-cast=none" and c["NEURON_RT_NUM_CORES"] == "1" for c in calls)
    checks, warmups, measured = calls[:2], calls[2:4], calls[4:]
    assert all(c["save_trace_name"] is None for c in checks + warmups)
    assert all(c["save_neff_name"] for c in warmups)
    assert len(measured) == 10
    for c in measured:
        assert c["save_neff_name"].endswith(".neff") and c["save_trace_name"].endswith(".ntff")
        assert Path(c["save_neff_name"]).stem == Path(c["save_trace_name"]).stem


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
    assert sum(1 for c in _calls(log) if c["save_trace_name"]) == 20


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
    with pytest.raises(NeuronUnavailable, match=r"import neuronxcc\.nki"):
        NeuronBackend(env=without_sdk, device_glob=devices)
    with pytest.raises(NeuronUnavailable, match=r"no Neuron device"):
        NeuronBackend(env=env, device_glob=str(tmp_path / "absent*"))
    with pytest.raises(NeuronUnavailable, match=r"neuron-profile"):
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


def test_summary_json_must_have_one_top_level_key_and_total_time(tmp_path):
    def profiler_printing(payload: dict) -> str:
        script = tmp_path / f"profiler{len(list(tmp_path.iterdir()))}"
        script.write_text(f"#!/bin/sh\ncat <<'JSON'\n{json.dumps(payload)}\nJSON\n")
        script.chmod(0o755)
        return str(script)

    neff, ntff = tmp_path / "k.neff", tmp_path / "k.ntff"
    good = profiler_printing(
        {"k": {"total_time": 1.5e-5, "hbm_read_bytes": 4096, "label": "text is dropped"}}
    )
    assert read_summary(good, neff, ntff) == {"total_time": 1.5e-5, "hbm_read_bytes": 4096.0}
    with pytest.raises(ValueError, match="one top-level key"):
        read_summary(profiler_printing({"a": {"total_time": 1.0}, "b": {"total_time": 2.0}}), neff, ntff)
    with pytest.raises(ValueError, match="no total_time"):
        read_summary(profiler_printing({"k": {"hbm_read_bytes": 1}}), neff, ntff)
    # a worker's long compiler output keeps its end, where the error is
    long = NeuronResult(status="compile_error", message="x" * 20000 + " err_tail")
    assert len(long.message) <= 8000 and long.message.endswith("err_tail")
