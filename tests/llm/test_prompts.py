"""The prompts as the model sees them: every placeholder filled, the facts and rules present,
profile fields in an order that varies between the N planner calls, lessons with their ids."""

from __future__ import annotations

import re

from silu_variants import BASELINE

from accelopt.agents.prompting import executor_messages, fixer_messages, planner_messages, summarizer_messages
from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import LineCost, Profile
from accelopt.search.candidate import Experience, Lesson, Plan
from accelopt.search.roles import ExecuteRequest, FixRequest, PlanRequest, SummarizeRequest

KERNEL = KernelSource(text=BASELINE, name="silu_kernel", path="silu.py")
PROFILE = Profile(
    backend="simulator",
    hardware="trn1",
    latency_ms=0.0165,
    hbm_read_bytes=524288,
    dma_active_time_percent=0.8,
    percent_of_peak=0.31,
    bound="hbm",
    lines=[LineCost(line=12, time_ms=0.01, fraction=0.6, instructions=16, text="tile = nl.load(x[...])")],
)
PLAN = Plan(title="Widen the tiles", description="use 512 columns")
LESSONS = [
    Experience(
        id=7,
        slow_kernel="a",
        fast_kernel="b",
        speedup=1.5,
        kernel_family="silu",
        lesson=Lesson(
            title="Bigger DMAs", plan="fewer, larger transfers", before="x[0:128]", after="x[0:512]"
        ),
    ),
    Experience(
        id=9,
        slow_kernel="a",
        fast_kernel="b",
        speedup=0.5,
        kernel_family="silu",
        lesson=Lesson(title="Tiny tiles hurt", plan="64-column tiles doubled the DMAs", positive=False),
    ),
]


def all_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def assert_filled(messages: list[dict[str, str]]) -> None:
    text = all_text(messages)
    assert not re.search(r"\$[a-z_]+", text), re.findall(r"\$[a-z_]+", text)
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("ROLE: ")


def test_planner_prompt_has_kernel_profile_facts_rules_and_lessons():
    messages = planner_messages(PlanRequest(kernel=KERNEL, profile=PROFILE, experiences=LESSONS, seed=3), 2)
    assert_filled(messages)
    system, user = messages[0]["content"], messages[1]["content"]
    assert "at most 128" in system and "nc_matmul" in system and "affine_range" in system
    assert "err_num_partition_exceed_arch_limit" in system and "signature" in system and "precision" in system
    assert "percent_of_peak" in system  # the glossary
    assert "def silu_kernel(x):" in user and "simulated on trn1" in user and "Proposal 2" in user
    assert "line 12 (60% of engine time)" in user
    assert "lesson 7 (helped, 1.50x faster" in user and "lesson 9 (hurt, 2.00x slower" in user


def field_order(messages: list[dict[str, str]]) -> list[str]:
    return re.findall(r"^- ([a-z_]+): ", messages[1]["content"], re.MULTILINE)


def test_profile_field_order_varies_with_the_seed():
    orders = {
        tuple(field_order(planner_messages(PlanRequest(kernel=KERNEL, profile=PROFILE, seed=s), 1)))
        for s in range(6)
    }
    assert len(orders) > 1
    assert all(sorted(order) == sorted(next(iter(orders))) for order in orders)
    assert "latency_ms" in next(iter(orders)) and "bound" in next(iter(orders))


def test_executor_fixer_and_summarizer_prompts_are_complete():
    execute = executor_messages(ExecuteRequest(kernel=KERNEL, plan=PLAN, profile=PROFILE, samples=2), 1)
    assert_filled(execute)
    assert "Widen the tiles" in all_text(execute) and "variant 1 of 2" in all_text(execute)
    assert "`silu_kernel`" in execute[0]["content"]
    fix = fixer_messages(
        FixRequest(
            kernel=KERNEL,
            original=KERNEL,
            plan=PLAN,
            status="compile_error",
            message="256 partitions",
            line=9,
        )
    )
    assert_filled(fix)
    assert "`compile_error` at line 9" in all_text(fix) and "256 partitions" in all_text(fix)
    summary = summarizer_messages(
        SummarizeRequest(
            slow=KERNEL,
            fast=KERNEL,
            plan=PLAN,
            speedup=1.7,
            slow_profile=PROFILE,
            fast_profile=PROFILE.model_copy(update={"latency_ms": 0.0097}),
        )
    )
    assert_filled(summary)
    assert "speedup 1.700 x (it helped)" in all_text(summary) and "latency_ms: 0.0165 -> 0.0097" in all_text(
        summary
    )


def test_summarizer_prompt_of_a_failed_candidate_shows_the_failure_not_a_speedup():
    summary = summarizer_messages(
        SummarizeRequest(
            slow=KERNEL,
            fast=KERNEL,
            plan=PLAN,
            speedup=1 / 1.15,
            slow_profile=PROFILE,
            fast_profile=None,
            failure="incorrect at line 12: rel L2 0.4",
        )
    )
    assert_filled(summary)
    text = all_text(summary)
    assert "speedup n/a x (the new kernel failed: incorrect at line 12: rel L2 0.4)" in text
    assert "0.870" not in text
