"""Lenient reading of model replies: code blocks, renamed kernels, bare functions, plans, lessons."""

from __future__ import annotations

import pytest

from accelopt.agents.replies import ReplyError, parse_kernel, parse_lesson, parse_plan
from accelopt.profiling.evaluation import KernelSource

ORIGINAL = KernelSource(
    name="silu_kernel",
    text=(
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "\n"
        "\n"
        "def helper(t):\n"
        "    return t\n"
        "\n"
        "\n"
        "@nki.jit\n"
        "def silu_kernel(x):\n"
        "    return x\n"
        "\n"
        "\n"
        "TAIL = 1\n"
    ),
)

MODULE = "import neuronxcc.nki as nki\n\n@nki.jit\ndef silu_kernel(x):\n    return x * 2\n"


def test_single_block_is_taken_whole():
    parsed = parse_kernel(f"Here it is:\n```python\n{MODULE}```\nDone.", ORIGINAL)
    assert parsed.kernel.text == MODULE and parsed.kernel.name == "silu_kernel"
    assert parsed.notes == []


def test_several_blocks_pick_the_one_defining_the_kernel():
    reply = f"Before:\n```python\nx = load(a)\n```\nAfter:\n```python\n{MODULE}```\nalso ```bash\nrun it\n```"
    parsed = parse_kernel(reply, ORIGINAL)
    assert "return x * 2" in parsed.kernel.text
    assert "code blocks" in parsed.notes[0]


def test_reply_without_fence_is_used_when_it_is_python():
    parsed = parse_kernel(MODULE, ORIGINAL)
    assert "return x * 2" in parsed.kernel.text
    assert "no code block" in parsed.notes[0]


def test_reply_without_code_is_an_error():
    with pytest.raises(ReplyError, match="no code"):
        parse_kernel("I would widen the tiles, but I am not sure how.", ORIGINAL)


def test_renamed_kernel_is_renamed_back():
    reply = "```python\n" + MODULE.replace("silu_kernel", "silu_kernel_fast") + "```"
    parsed = parse_kernel(reply, ORIGINAL)
    assert "def silu_kernel(x):" in parsed.kernel.text and "silu_kernel_fast" not in parsed.kernel.text
    assert "renamed" in parsed.notes[0]


def test_bare_function_is_spliced_into_the_original_module():
    reply = "```python\ndef silu_kernel(x):\n    return helper(x) * 3\n```"
    parsed = parse_kernel(reply, ORIGINAL)
    text = parsed.kernel.text
    assert text.startswith("import neuronxcc.nki as nki\n")
    assert "@nki.jit\ndef silu_kernel(x):\n    return helper(x) * 3\n" in text
    assert "def helper(t)" in text and "TAIL = 1" in text
    assert "spliced" in parsed.notes[-1]


def test_unterminated_fence_runs_to_the_end():
    parsed = parse_kernel("```python\n" + MODULE, ORIGINAL)
    assert "return x * 2" in parsed.kernel.text


def test_plan_from_json_keeps_only_known_lessons():
    plan = parse_plan(
        '```json\n{"title": "Widen tiles", "description": "use 512", "lessons": [3, 99]}\n```', {3, 4}
    )
    assert (plan.title, plan.description, plan.lesson_ids) == ("Widen tiles", "use 512", [3])


def test_plan_from_free_text():
    plan = parse_plan("**Title: Hoist the load**\nMove it out of the loop, as lesson 4 suggests.", {4})
    assert plan.title == "Hoist the load" and plan.lesson_ids == [4]
    assert "Move it out" in plan.description


def test_empty_plan_is_an_error():
    with pytest.raises(ReplyError):
        parse_plan("   \n", set())


def test_lesson_from_json_and_from_text():
    lesson = parse_lesson('{"title": "Wider tiles", "plan": "fewer DMAs", "before": "a", "after": "b"}', True)
    assert (lesson.title, lesson.plan, lesson.before, lesson.after, lesson.positive) == (
        "Wider tiles",
        "fewer DMAs",
        "a",
        "b",
        True,
    )
    text = parse_lesson(
        "Fusing hurt\nIt serialised the engines.\n```python\nold\n```\n```python\nnew\n```", False
    )
    assert (text.title, text.before, text.after, text.positive) == ("Fusing hurt", "old", "new", False)
    assert "serialised" in text.plan


def test_titles_that_are_not_plans_are_refused():
    from accelopt.agents.replies import title_problem

    for garbage in ("42", "3.5x", "# pylint: disable=all", '"""', "x = nl.load(a)", "<short imperative title>",
                    "import numpy as np", "Vectorize"):
        assert title_problem(garbage) is not None, garbage
    for plan in ("Widen the tiles to 512 columns", "Fuse exp and multiply into one activation",
                 "Hoist nl.load(w) out of the k loop"):
        assert title_problem(plan) is None, plan
    echo = {"- Keep the kernel's signature unchanged."}
    assert title_problem("Keep the kernel's signature unchanged.", echo) == "it repeats the instructions"


def test_a_plan_reply_that_is_garbage_is_a_reply_error():
    with pytest.raises(ReplyError, match="not a plan"):
        parse_plan('{"title": "42", "description": ""}', set())
    with pytest.raises(ReplyError, match="not a lesson"):
        parse_lesson('{"title": "Wider tiles help", "plan": ""}', True)
