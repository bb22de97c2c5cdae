"""`accelopt bench` end to end: real CLI process, real simulator backend, small shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt.cli import main
from accelopt.commands.bench import BenchReport, render_table

# A better silu than the baseline: one fused activation per tile and 4x larger transfers.
FUSED_SILU = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def silu_fused(x):
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // 128):
        tile = nl.load(x[i * 128 : (i + 1) * 128, 0:n])
        nl.store(out[i * 128 : (i + 1) * 128, 0:n], value=nl.silu(tile))
    return out
"""


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelopt", "bench", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def json_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    return _bench(
        "--size", "small", "--tasks", "silu,rope_single_freq_apply", "--json", "--out", str(out)
    ), out


def test_bench_prints_json_and_writes_the_report(json_run):
    proc, out = json_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == report
    assert (
        report["backend"] == "simulator"
        and report["latency_kind"] == "simulated"
        and report["size"] == "small"
    )
    assert [t["name"] for t in report["tasks"]] == ["silu", "rope_single_freq_apply"]
    percents = [t["percent_of_peak"] for t in report["tasks"]]
    assert all(t["status"] == "ok" and 0 < t["percent_of_peak"] <= 1 for t in report["tasks"])
    assert report["geomean_percent_of_peak"] == pytest.approx((percents[0] * percents[1]) ** 0.5)
    assert not report["checked_correctness"]  # profiling alone is trace-only


def test_table_labels_simulated_figures_and_the_geomean(json_run, capsys):
    proc, _ = json_run
    report = BenchReport.model_validate_json(proc.stdout)
    render_table(report)
    table = capsys.readouterr().out
    assert "simulated" in table and "geometric mean" in table
    silu = report.tasks[0]
    assert f"{100 * silu.percent_of_peak:.1f}%" in table and f"{silu.latency_ms:.3f}" in table
    assert f"{100 * report.geomean_percent_of_peak:.1f}%" in table


def test_optimized_kernels_from_a_directory_are_profiled_and_checked(tmp_path, capsys):
    base_out, opt_out = tmp_path / "base.json", tmp_path / "opt.json"
    assert main(["bench", "--size", "small", "--tasks", "silu", "--json", "--out", str(base_out)]) == 0
    kernels = tmp_path / "optimized"
    kernels.mkdir()
    (kernels / "silu.py").write_text(FUSED_SILU)
    assert (
        main(
            [
                "bench",
                "--size",
                "small",
                "--tasks",
                "silu",
                "--check",
                "--kernels",
                str(kernels),
                "--json",
                "--out",
                str(opt_out),
            ]
        )
        == 0
    )
    base = json.loads(base_out.read_text())["tasks"][0]
    opt = json.loads(opt_out.read_text())["tasks"][0]
    assert opt["kernel_path"] == str(kernels / "silu.py") and opt["status"] == "ok"
    assert opt["max_error"] <= 2e-5
    assert opt["latency_ms"] < base["latency_ms"] and opt["percent_of_peak"] > base["percent_of_peak"]

    # a wrong kernel is reported as incorrect and fails the run
    (kernels / "silu.py").write_text(FUSED_SILU.replace("nl.silu(tile)", "nl.sigmoid(tile)"))
    assert (
        main(
            [
                "bench",
                "--size",
                "small",
                "--tasks",
                "silu",
                "--check",
                "--kernels",
                str(kernels),
                "--json",
                "--out",
                str(opt_out),
            ]
        )
        == 1
    )
    assert json.loads(opt_out.read_text())["tasks"][0]["status"] == "incorrect"


def test_bad_requests_fail_fast_with_the_reason(tmp_path, capsys):
    out = str(tmp_path / "x.json")
    assert main(["bench", "--tasks", "silu,softmax", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "unknown task(s) softmax" in err and "adamw" in err
    assert main(["bench", "--tasks", "silu", "--kernels", str(tmp_path), "--out", out]) == 2
    assert "no kernel for task 'silu'" in capsys.readouterr().err
    # no Trainium and no Neuron SDK on this machine
    assert main(["bench", "--backend", "neuron", "--tasks", "silu", "--out", out]) == 2
    assert "neuron backend needs the Neuron SDK" in capsys.readouterr().err
    assert not Path(out).exists()


async def test_a_backend_failure_costs_only_its_own_task():
    from accelopt.commands.bench import run_bench, select_tasks
    from accelopt.profiling.backend import EvaluationOptions
    from accelopt.profiling.evaluation import Evaluation
    from accelopt.profiling.profile import Profile

    class FlakyBackend:
        """Stands in for a backend with a bug: raises for one task, answers for the other."""

        name = "simulator"
        closed = False

        async def evaluate(self, kernel, task, options):
            if task.name == "silu":
                raise RuntimeError("timing model crashed")
            return Evaluation(
                status="ok",
                profile=Profile(
                    backend="simulator",
                    hardware="trn1",
                    latency_ms=2.0,
                    peak_latency_ms=1.0,
                    percent_of_peak=0.5,
                ),
            )

        async def aclose(self):
            self.closed = True

    backend = FlakyBackend()
    selection = select_tasks("silu,matmul", "small", None)
    report = await run_bench(
        selection, backend, EvaluationOptions(check_correctness=False), jobs=2, size="small"
    )
    silu, matmul = report.tasks
    assert silu.status == "runtime_error" and "timing model crashed" in silu.message
    assert matmul.status == "ok" and report.geomean_percent_of_peak == 0.5
    assert backend.closed
