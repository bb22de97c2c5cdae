"""What a search has spent so far, against its Budget."""

from __future__ import annotations

import time

from accelopt.search.config import Budget
from accelopt.search.events import EndpointCalls
from accelopt.search.roles import AgentOutput


class Spending:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.dollars = 0.0
        self.evaluations = 0
        self.agent_calls = 0
        self.endpoint = EndpointCalls()

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def record(self, output: AgentOutput) -> None:
        self.agent_calls += 1
        self.prompt_tokens += output.prompt_tokens
        self.completion_tokens += output.completion_tokens
        self.dollars += output.dollars
        endpoint = self.endpoint
        endpoint.calls += output.calls
        endpoint.failed += sum(output.failures.values())
        for cause, count in output.failures.items():
            endpoint.failures[cause] = endpoint.failures.get(cause, 0) + count
        endpoint.prompt_tokens += output.prompt_tokens
        endpoint.completion_tokens += output.completion_tokens

    def exhausted(self) -> str | None:
        """Why no further agent call may start, or None."""
        b = self.budget
        if b.max_dollars is not None and self.dollars >= b.max_dollars:
            return f"dollar budget reached: ${self.dollars:.4f} of ${b.max_dollars:.4f}"
        if b.max_tokens is not None and self.tokens >= b.max_tokens:
            return f"token budget reached: {self.tokens} of {b.max_tokens} tokens"
        if b.max_wall_time_s is not None and self.elapsed_s >= b.max_wall_time_s:
            return f"wall-time budget reached: {self.elapsed_s:.1f} s of {b.max_wall_time_s:g} s"
        return None

    def reserve_evaluation(self) -> str | None:
        """Count one more backend evaluation, or say why it may not start."""
        limit = self.budget.max_evaluations
        if limit is not None and self.evaluations >= limit:
            return f"evaluation budget reached: {self.evaluations} of {limit} evaluations"
        self.evaluations += 1
        return None
