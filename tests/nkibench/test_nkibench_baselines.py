"""Every NKIBench baseline is correct on 5 random seeds at the small shapes, judged by the real
simulator backend (sandboxed workers, the same path `accelopt bench --check` takes), and gets a
simulated profile with a roofline view."""

from __future__ import annotations

import asyncio

import pytest

from accelopt.commands.bench import BenchReport, TaskResult, run_bench, select_tasks
from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.nkibench import load_index
from accelopt.profiling.simulator import SimulatorBackend

TASKS = [t.name for t in load_index()]


@pytest.fixture(scope="module")
def report() -> BenchReport:
    selection = select_tasks(None, "small", None)
    options = EvaluationOptions(seeds=5, check_correctness=True, timeout_s=300)
    return asyncio.run(run_bench(selection, SimulatorBackend(max_workers=2), options, jobs=2, size="small"))


@pytest.fixture(scope="module")
def results(report: BenchReport) -> dict[str, TaskResult]:
    return {r.name: r for r in report.tasks}


@pytest.mark.parametrize("name", TASKS)
def test_baseline_is_correct_on_five_seeds(results, name):
    result = results[name]
    assert result.status == "ok", f"{name}: {result.message} (line {result.line})"
    assert result.max_error is not None and result.max_error <= 2e-5
    profile = result.profile
    assert profile is not None and profile.backend == "simulator"
    assert profile.latency_ms > 0 and profile.work.source == "task"
    # the roofline view comes from the task's work formula, and no kernel beats its own roofline
    assert 0 < result.percent_of_peak <= 1.0
    assert result.peak_latency_ms == pytest.approx(result.percent_of_peak * result.latency_ms)


def test_report_covers_the_suite_with_a_geometric_mean(report):
    assert [r.name for r in report.tasks] == TASKS
    assert report.latency_kind == "simulated" and report.checked_correctness
    percents = [r.percent_of_peak for r in report.tasks]
    product = 1.0
    for p in percents:
        product *= p
    assert report.geomean_percent_of_peak == pytest.approx(product ** (1 / len(percents)))
