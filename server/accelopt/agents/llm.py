"""The LLM agents: planner, executor (and fixer) and summarizer over any OpenAI-compatible
endpoint. Each request becomes independent chat calls (N plans = N calls, K kernels = K calls),
made concurrently; every reply is parsed leniently (`replies.py`) and every call's token usage
and cost is reported in the result so the search can enforce its budgets."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from accelopt.agents.chat import ChatClient, ChatReply, Prompt
from accelopt.agents.llm_config import LLMConfig, Role
from accelopt.agents.prompting import executor_messages, fixer_messages, planner_messages, summarizer_messages
from accelopt.agents.replies import ReplyError, parse_kernel, parse_lesson, parse_plan
from accelopt.agents.transcript import Transcript
from accelopt.agents.window import Messages, Trim, text_tokens
from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Plan
from accelopt.search.roles import (
    AgentOutput,
    Agents,
    ExecuteRequest,
    ExecuteResult,
    FixRequest,
    PlanRequest,
    PlanResult,
    SummarizeRequest,
    SummarizeResult,
)

__all__ = ["LLMConfig", "LLMExecutor", "LLMPlanner", "LLMSummarizer", "llm_agents"]

T = TypeVar("T")
R = TypeVar("R", bound=AgentOutput)

# Structured replies, where the endpoint constrains output to a schema: the same fields the
# prompts ask for in prose.
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "description": {"type": "string"},
        "lessons": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["title", "description"],
}
LESSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "plan": {"type": "string"},
        "before": {"type": "string"},
        "after": {"type": "string"},
    },
    "required": ["title", "plan"],
}

# The least room a reply needs to be any use: a plan or lesson is a short JSON object; a kernel
# reply restates the whole module, so it needs the module's size and some.
PLAN_REPLY_TOKENS = 256
LESSON_REPLY_TOKENS = 256


def kernel_reply_tokens(kernel: KernelSource) -> int:
    return text_tokens(kernel.text) + 128


class _Tally:
    """Adds up usage, notes and errors over the calls behind one agent result."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.dollars = 0.0
        self.calls = 0
        self.failures: dict[str, int] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []

    def add(self, reply: ChatReply) -> None:
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.dollars += reply.dollars
        self.notes.extend(reply.notes)
        if reply.error:
            self.errors.append(reply.error)
            self.fail(reply.cause or "error")

    def fail(self, cause: str) -> None:
        self.failures[cause] = self.failures.get(cause, 0) + 1

    def result(self, result_type: type[R], *, failed: bool, **payload: Any) -> R:
        """The agent result with this tally's usage and notes; `error` joins the failures when
        `failed` (a partly successful call keeps its failures in the notes only)."""
        return result_type(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            dollars=self.dollars,
            model=self.model,
            calls=self.calls,
            failures=self.failures,
            notes=self.notes,
            error="; ".join(dict.fromkeys(self.errors)) if failed else None,
            **payload,
        )


async def _ask(client: ChatClient, role: Role, prompt: Prompt, tally: _Tally, parse: Callable[[str], T]) -> T | None:
    reply = await client.complete(role, prompt)
    tally.add(reply)
    if reply.error:
        return None
    try:
        return parse(reply.content)
    except ReplyError as exc:
        tally.errors.append(str(exc))
        tally.fail("unusable_reply")
        tally.notes.append(f"{role}: {exc}")
        return None


async def _ask_many(calls: Sequence[Awaitable[T | None]]) -> list[T]:
    return [r for r in await asyncio.gather(*calls) if r is not None]


def _system_lines(messages: Messages) -> set[str]:
    """The system prompt's lines, so that a reply echoing them is not taken for a plan."""
    return {
        line.strip().lower()
        for m in messages
        if m["role"] == "system"
        for line in m["content"].splitlines()
        if line.strip()
    }


class LLMPlanner:
    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def plan(self, request: PlanRequest) -> PlanResult:
        tally = _Tally(self.client.config.role("planner").model)
        known = {e.id for e in request.experiences if e.id is not None}
        calls = []
        for i in range(max(request.count, 1)):
            one = request.model_copy(update={"seed": request.seed + i})

            def build(trim: Trim, one: PlanRequest = one, proposal: int = request.proposal + i + 1) -> Messages:
                return planner_messages(one, proposal, trim)

            echo = _system_lines(build(Trim()))
            prompt = Prompt(
                build,
                lesson_count=len(request.experiences),
                min_reply_tokens=PLAN_REPLY_TOKENS,
                schema=PLAN_SCHEMA,
                schema_name="plan",
            )
            calls.append(
                _ask(self.client, "planner", prompt, tally, functools.partial(parse_plan, known_lessons=known, echo=echo))
            )
        plans: list[Plan] = await _ask_many(calls)
        return tally.result(PlanResult, failed=not plans, plans=plans)


class LLMExecutor:
    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        tally = _Tally(self.client.config.role("executor").model)

        def parse(text: str) -> KernelSource:
            parsed = parse_kernel(text, request.kernel)
            tally.notes.extend(parsed.notes)
            return parsed.kernel

        calls = []
        for i in range(max(request.samples, 1)):

            def build(trim: Trim, variant: int = i + 1) -> Messages:
                return executor_messages(request, variant, trim)

            prompt = Prompt(build, min_reply_tokens=kernel_reply_tokens(request.kernel))
            calls.append(_ask(self.client, "executor", prompt, tally, parse))
        kernels = await _ask_many(calls)
        return tally.result(ExecuteResult, failed=bool(tally.errors), kernels=kernels)

    async def fix(self, request: FixRequest) -> ExecuteResult:
        tally = _Tally(self.client.config.role("fixer").model)

        def parse(text: str) -> KernelSource:
            parsed = parse_kernel(text, request.original)
            tally.notes.extend(parsed.notes)
            return parsed.kernel

        prompt = Prompt(lambda trim: fixer_messages(request, trim), min_reply_tokens=kernel_reply_tokens(request.kernel))
        kernel = await _ask(self.client, "fixer", prompt, tally, parse)
        kernels = [kernel] if kernel is not None else []
        return tally.result(ExecuteResult, failed=not kernels, kernels=kernels)


class LLMSummarizer:
    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def summarize(self, request: SummarizeRequest) -> SummarizeResult:
        tally = _Tally(self.client.config.role("summarizer").model)
        positive = request.failure is None and request.speedup > 1.0
        prompt = Prompt(
            lambda trim: summarizer_messages(request, trim),
            min_reply_tokens=LESSON_REPLY_TOKENS,
            schema=LESSON_SCHEMA,
            schema_name="lesson",
        )
        echo = _system_lines(summarizer_messages(request))
        lesson = await _ask(self.client, "summarizer", prompt, tally, lambda t: parse_lesson(t, positive, echo))
        return tally.result(SummarizeResult, failed=lesson is None, lesson=lesson)


def llm_agents(
    config: LLMConfig,
    *,
    transcript: Transcript | None = None,
    on_status: Callable[[str], None] | None = None,
) -> Agents:
    """The three roles over one shared client (one connection pool, one set of endpoint slots)
    for `config`'s endpoint; every exchange goes to `transcript` when given."""
    client = ChatClient(config, transcript=transcript, on_status=on_status)
    executor = LLMExecutor(client)
    return Agents(
        planner=LLMPlanner(client),
        executor=executor,
        summarizer=LLMSummarizer(client),
        name="llm:" + ",".join(config.models),
    )
