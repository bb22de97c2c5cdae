"""Fake speedups: candidates that reach the trace, the emulator or the host to look faster or to
pass without doing the work. Each class got through before evaluations were verified.

Two layers are attacked:
- end to end, by kernels that reach the emulator's private state the way the red team did (a
  ``match`` class pattern reads any attribute). A stricter static policy may refuse them first;
  either way the evaluation must not be `ok` and must carry no profile;
- the trusted side alone, by tampering with what a real worker returned before the backend reads
  it (what a kernel in full control of its own process could write). This does not depend on
  the static policy: it is the re-run, the trace comparison and the plausibility check at work.
"""

from __future__ import annotations

import json

import pytest

from accelopt.profiling.backend import EvaluationOptions
from accelopt.profiling.task import task_for_kernel
from profiling.kernels import HAND_WRITTEN, body, kernel

OPTIONS = EvaluationOptions(seeds=2, timeout_s=60)
TASK = task_for_kernel(kernel(HAND_WRITTEN))

# Two column halves, so that a trace or a log can lose half of its work.
TWO_HALVES = """
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
for i in nl.affine_range(2):
    t = nl.load(x[:, i * 128 : (i + 1) * 128])
    nl.store(out[:, i * 128 : (i + 1) * 128], value=nl.multiply(t, 2.0))
"""


def assert_refused(evaluation, *fragments: str) -> None:
    assert evaluation.status == "rejected", (evaluation.status, evaluation.message)
    assert evaluation.profile is None and not evaluation.verified
    if evaluation.message.startswith("sandbox policy:"):
        return  # the static check (or the guard) saw it first: also contained
    for fragment in fragments:
        assert fragment in evaluation.message, evaluation.message


# --- end to end: attack kernels -------------------------------------------------------------------


async def test_deleting_trace_records(shared_backend):
    """All the work is done and then all records but the first are deleted: the trace the timing
    model sees is one DMA (hundreds of percent of peak, before)."""
    text = body(
        TWO_HALVES
        + """
match nl:
    case object(_current=current):
        del current().trace.records[1:]
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert_refused(evaluation, "verification: the sandbox returned 1 trace records; the kernel's calls make 6")


async def test_deleting_trace_records_and_their_call_log_entries(shared_backend):
    """The same, consistently: the second half's records and its logged calls both go. The
    re-run then computes half of the output."""
    text = body(
        TWO_HALVES
        + """
match nl:
    case object(_current=current):
        ctx = current()
        del ctx.trace.records[3:]
        match ctx:
            case object(_call_log=log) if log is not None:
                del log.entries[-4:-1]
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert_refused(evaluation, "verification: ")


async def test_computing_the_output_on_the_host_and_issuing_one_dma(shared_backend):
    """The answer is computed with numpy from the input's private array and written straight into
    the output's storage; one DMA marks the output as written."""
    text = body(
        """
match x:
    case object(_data=values):
        pass
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out[0:1, 0:1], value=nl.load(x[0:1, 0:1]))
match out:
    case object(_data=storage):
        storage[...] = values * 2
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert_refused(evaluation, "verification: re-running the kernel's recorded calls on fresh inputs")


async def test_patching_an_nl_function_and_restoring_it(shared_backend):
    """`nl.multiply` is replaced, for the kernel's own calls only, by a copy whose storage is then
    overwritten with the product computed on the host; the original is back before the kernel
    returns, so nothing looks patched afterwards."""
    text = body(
        """
match nl:
    case object(__dict__=namespace):
        pass
real = namespace["multiply"]


def cheap_multiply(a, b):
    r = nl.copy(a)
    match r:
        case object(_data=rd):
            pass
    match a:
        case object(_data=ad):
            pass
    rd[...] = ad * b
    return r


namespace["multiply"] = cheap_multiply
out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
nl.store(out, value=nl.multiply(nl.load(x), 2.0))
namespace["multiply"] = real
return out
"""
    )
    evaluation = await shared_backend.evaluate(kernel(text), TASK, OPTIONS)
    assert_refused(evaluation, "verification: re-running the kernel's recorded calls on fresh inputs")


# --- the trusted side alone: a real worker's results, tampered with ---------------------------------


@pytest.fixture
def tamper(shared_backend, monkeypatch):
    """Install `edit(trace_dict) -> trace_dict` on every candidate run's returned trace."""

    def install(edit):
        real_run = shared_backend.sandbox.run

        async def run(files, timeout_s):
            outcome = await real_run(files, timeout_s)
            if files.job.mode == "kernel" and outcome.trace_json is not None:
                outcome.trace_json = json.dumps(edit(json.loads(outcome.trace_json)))
            return outcome

        monkeypatch.setattr(shared_backend.sandbox, "run", run)

    return install


def honest() -> str:
    return body(TWO_HALVES + "return out\n")


async def test_the_honest_two_halves_kernel_verifies(shared_backend):
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert evaluation.status == "ok" and evaluation.verified, evaluation.message
    assert evaluation.profile is not None and evaluation.profile.percent_of_peak <= 1.0


async def test_returned_trace_missing_records_is_rejected(shared_backend, tamper):
    def drop(trace):
        trace["records"] = trace["records"][:1]
        return trace

    tamper(drop)
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert_refused(evaluation, "the sandbox returned 1 trace records; the kernel's calls make 6")


async def test_returned_trace_with_a_cheaper_record_is_rejected(shared_backend, tamper):
    def shrink(trace):
        trace["records"][0][13] = 4  # the first DMA claims to move 4 bytes
        return trace

    tamper(shrink)
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert_refused(evaluation, "trace record 0 (dma_load, line", "differs from the re-run's")


async def test_a_forged_call_log_that_does_other_work_is_rejected(shared_backend, tamper):
    def forge(trace):
        for entry in trace["calls"]:
            if entry[0] == "call" and entry[1].endswith(".multiply"):
                entry[1] = entry[1].replace(".multiply", ".add")
        return trace

    tamper(forge)
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert_refused(evaluation, "verification: ")


async def test_a_call_log_naming_no_api_function_is_rejected_with_the_reason(shared_backend, tamper):
    def poison(trace):
        trace["calls"][1][1] = "os.system"
        return trace

    tamper(poison)
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert_refused(evaluation, "'os.system' is not an API function of the emulator")


async def test_a_missing_call_log_is_rejected(shared_backend, tamper):
    def strip(trace):
        trace["calls"] = None
        return trace

    tamper(strip)
    evaluation = await shared_backend.evaluate(kernel(honest()), TASK, OPTIONS)
    assert_refused(evaluation, "the run returned no call log")
