"""The LLM agents: planner, executor (and fixer) and summarizer over any OpenAI-compatible
endpoint. Each request becomes independent chat calls (N plans = N calls, K kernels = K calls),
made concurrently; every reply is parsed leniently (`replies.py`) and every call's token usage
and cost is reported in the result so the search can enforce its budgets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from accelopt.agents.chat import ChatClient, ChatReply
from accelopt.agents.llm_config import LLMConfig, Role
from accelopt.agents.prompting import executor_messages, fixer_messages, planner_messages, summarizer_messages
from accelopt.agents.replies import ReplyError, parse_kernel, parse_lesson, parse_plan
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


class _Tally:
    """Adds up usage, notes and errors over the calls behind one agent result."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.dollars = 0.0
        self.notes: list[str] = []
        self.errors: list[str] = []

    def add(self, reply: ChatReply) -> None:
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.dollars += reply.dollars
        self.notes.extend(reply.notes)
        if reply.error:
            self.errors.append(reply.error)

    def result(self, result_type: type[R], *, failed: bool, **payload: Any) -> R:
        """The agent result with this tally's usage and notes; `error` joins the failures when
        `failed` (a partly successful call keeps its failures in the notes only)."""
        return result_type(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            dollars=self.dollars,
            model=self.model,
            notes=self.notes,
            error="; ".join(dict.fromkeys(self.errors)) if failed else None,
            **payload,
        )


async def _ask(
    client: ChatClient, role: Role, messages: list[dict[str, str]], tally: _Tally, parse: Callable[[str], T]
) -> T | None:
    reply = await client.complete(role, messages)
    tally.add(reply)
    if reply.error:
        return None
    try:
        return parse(reply.content)
    except ReplyError as exc:
        tally.errors.append(str(exc))
        tally.notes.append(f"{role}: {exc}")
        return None


async def _ask_many(calls: list[Awaitable[T | None]]) -> list[T]:
    return [r for r in await asyncio.gather(*calls) if r is not None]


class LLMPlanner:
    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def plan(self, request: PlanRequest) -> PlanResult:
        tally = _Tally(self.client.config.role("planner").model)
        known = {e.id for e in request.experiences if e.id is not None}
        calls = []
        for i in range(max(request.count, 1)):
            one = request.model_copy(update={"seed": request.seed + i})
            calls.append(
                _ask(
                    self.client,
                    "planner",
                    planner_messages(one, request.proposal + i + 1),
                    tally,
                    lambda t: parse_plan(t, known),
                )
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

        calls = [
            _ask(self.client, "executor", executor_messages(request, i + 1), tally, parse)
            for i in range(max(request.samples, 1))
        ]
        kernels = await _ask_many(calls)
        return tally.result(ExecuteResult, failed=bool(tally.errors), kernels=kernels)

    async def fix(self, request: FixRequest) -> ExecuteResult:
        tally = _Tally(self.client.config.role("fixer").model)

        def parse(text: str) -> KernelSource:
            parsed = parse_kernel(text, request.original)
            tally.notes.extend(parsed.notes)
            return parsed.kernel

        kernel = await _ask(self.client, "fixer", fixer_messages(request), tally, parse)
        kernels = [kernel] if kernel is not None else []
        return tally.result(ExecuteResult, failed=not kernels, kernels=kernels)


class LLMSummarizer:
    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def summarize(self, request: SummarizeRequest) -> SummarizeResult:
        tally = _Tally(self.client.config.role("summarizer").model)
        positive = request.speedup > 1.0
        lesson = await _ask(
            self.client,
            "summarizer",
            summarizer_messages(request),
            tally,
            lambda t: parse_lesson(t, positive),
        )
        return tally.result(SummarizeResult, failed=lesson is None, lesson=lesson)


def llm_agents(config: LLMConfig) -> Agents:
    """The three roles over one shared client (one connection pool) for `config`'s endpoint."""
    client = ChatClient(config)
    executor = LLMExecutor(client)
    return Agents(
        planner=LLMPlanner(client),
        executor=executor,
        summarizer=LLMSummarizer(client),
        name="llm:" + ",".join(config.models),
    )
