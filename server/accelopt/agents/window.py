"""Fitting a request into the endpoint's context window.

We have no tokenizer for an arbitrary served model (and none may be fetched at run time), so a
prompt's size is estimated from its characters. Code and numbers tokenize densely: about three
characters a token is on the safe side for the BPE vocabularies of current open models, and a
safe-side estimate only costs a little reply room, while an optimistic one gets the request
refused by a server that checks its window strictly.

The order of what gives way when a prompt does not fit: first the optimization memory's lessons
(half, then none), then the profile (its most telling fields only, then the costly lines), never
the kernel itself. The reply then gets what remains of the window, up to the configured maximum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Messages = list[dict[str, str]]

CHARS_PER_TOKEN = 3.0
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators the chat template adds per message
SAFETY_TOKENS = 32  # the template's own preamble and the estimate's error


def estimate_tokens(messages: Sequence[dict[str, str]]) -> int:
    return sum(math.ceil(len(m.get("content", "")) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Trim:
    """How much of the optional context a prompt keeps: `None` = all of it."""

    lessons: int | None = None
    profile_fields: int | None = None
    costly_lines: int = 5

    def describe(self) -> str:
        parts = []
        if self.lessons is not None:
            parts.append(f"{self.lessons} lessons")
        if self.profile_fields is not None:
            parts.append(f"{self.profile_fields} profile fields")
        if self.costly_lines < 5:
            parts.append(f"{self.costly_lines} costly lines")
        return ", ".join(parts) or "nothing"


def trims(lesson_count: int) -> list[Trim]:
    """Successively smaller prompts, the full one first."""
    steps = [Trim()]
    if lesson_count > 1:
        steps.append(Trim(lessons=lesson_count // 2))
    if lesson_count > 0:
        steps.append(Trim(lessons=0))
    steps += [Trim(lessons=0, profile_fields=8), Trim(lessons=0, profile_fields=8, costly_lines=0)]
    return steps


class WindowTooSmall(ValueError):
    """Even the smallest prompt leaves too little room for a useful reply."""


@dataclass(frozen=True)
class Fitted:
    messages: Messages
    max_tokens: int
    prompt_tokens_estimate: int
    trim: Trim


def fit(
    build: Callable[[Trim], Messages],
    *,
    lesson_count: int,
    window: int | None,
    max_output_tokens: int,
    min_reply_tokens: int,
) -> Fitted:
    """The largest prompt that leaves at least `min_reply_tokens` for the reply, and the reply's
    `max_tokens`: what remains of the window, at most `max_output_tokens`."""
    smallest: Fitted | None = None
    for trim in trims(lesson_count):
        messages = build(trim)
        prompt = estimate_tokens(messages)
        if window is None:
            return Fitted(messages, max_output_tokens, prompt, trim)
        room = window - prompt - SAFETY_TOKENS
        fitted = Fitted(messages, min(max_output_tokens, room), prompt, trim)
        if room >= min_reply_tokens:
            return fitted
        smallest = fitted
    assert smallest is not None
    raise WindowTooSmall(
        f"the prompt needs about {smallest.prompt_tokens_estimate} tokens even without lessons and most of "
        f"the profile, and the reply at least {min_reply_tokens}; the endpoint's window is {window} tokens"
    )
