"""One chat completion against an OpenAI-compatible endpoint, made robust to what real endpoints
do: rate limits and 5xx bursts (retried with exponential backoff, honouring Retry-After),
timeouts, dropped connections, truncated or malformed JSON, empty `choices`, runaway replies,
replies cut at the length limit, windows smaller than the request, templates that drop system
messages, servers that take one request at a time.

`ChatClient.complete` never raises for an endpoint fault: it returns a `ChatReply` whose `error`
says what went wrong, whose `cause` classifies it and whose `notes` list every failed attempt (the
search records them on the candidate). Only cancellation propagates.

Requests wait for a free slot of the endpoint (its `concurrency`) before they are sent, and the
timeout counts from the moment a request is sent: a queued request does not time out while a
single-slot server is busy with the one before it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import openai
from pydantic import BaseModel, Field

from accelopt.agents.endpoint import EndpointLimits, ServerFacts, discover, resolve_limits
from accelopt.agents.llm_config import LLMConfig, Role
from accelopt.agents.transcript import Exchange, Transcript
from accelopt.agents.window import Fitted, Messages, Trim, WindowTooSmall, fit

log = logging.getLogger(__name__)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)

FailureCause = Literal[
    "timeout",
    "unreachable",
    "rate_limited",
    "server_error",
    "refused",
    "context_window",
    "cut_off",
    "malformed",
    "empty",
    "runaway",
]


class ChatReply(BaseModel):
    content: str = ""
    reasoning: str = ""
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_estimated: bool = Field(
        False, description="some tokens are estimated: the server reported none, or a call was abandoned"
    )
    dollars: float = 0.0
    finish_reason: str | None = None
    error: str | None = None
    cause: FailureCause | None = None
    queued_s: float = 0.0
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Prompt:
    """What to ask, in a form that can shrink: `build(trim)` renders the messages with less optional
    context for a smaller window; `schema` is the JSON schema of a structured reply, if any."""

    build: Callable[[Trim], Messages]
    lesson_count: int = 0
    min_reply_tokens: int = 256
    schema: dict[str, Any] | None = None
    schema_name: str = "reply"

    @staticmethod
    def fixed(messages: Messages) -> Prompt:
        return Prompt(build=lambda _trim: messages)


class _Failure(Exception):
    def __init__(self, reason: str, cause: FailureCause) -> None:
        super().__init__(reason)
        self.cause: FailureCause = cause


class _Retryable(_Failure):
    """A fault worth another attempt (the reason goes into the notes)."""

    def __init__(self, reason: str, cause: FailureCause, retry_after_s: float | None = None) -> None:
        super().__init__(reason, cause)
        self.retry_after_s = retry_after_s


class _Fatal(_Failure):
    """A fault another attempt will not fix (bad key, unknown model, a reply cut at the limit)."""


class _TooLarge(_Failure):
    """The server refused the request's size; `window` or `max_output` is what it said it takes."""

    def __init__(self, reason: str, window: int | None, max_output: int | None) -> None:
        super().__init__(reason, "context_window")
        self.window = window
        self.max_output = max_output


class _SchemaRefused(_Failure):
    """The server does not take `response_format` with a JSON schema."""


_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"['\"]?n_ctx['\"]?\s*[:=]\s*(\d+)"),
    re.compile(r"context (?:size|window|length)[^0-9.]{0,30}(\d{3,})", re.IGNORECASE),
)
_OUTPUT_LIMIT = re.compile(r"at most (\d+) (?:completion|output) tokens|max_tokens[^0-9]{0,40}(?:<=|≤|at most) ?(\d+)")
_SIZE_REFUSAL = re.compile(
    r"context|too (?:long|large|many tokens)|exceeds|maximum.{0,40}tokens|max_tokens", re.IGNORECASE
)


class ChatClient:
    def __init__(
        self,
        config: LLMConfig,
        *,
        rng: random.Random | None = None,
        transcript: Transcript | None = None,
        on_status: Callable[[str], None] | None = None,
        facts: ServerFacts | None = None,
    ) -> None:
        self.config = config
        self.transcript = transcript
        self._rng = rng or random.Random()
        self._on_status = on_status
        self._facts = facts
        self._limits: EndpointLimits | None = None
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._learned_window: int | None = None
        self._learned_max_output: int | None = None
        self._schema_refused = False
        # Retries are ours (max_retries=0) so that every failed attempt is recorded and counted.
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key(), timeout=config.timeout_s, max_retries=0
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def limits(self) -> EndpointLimits:
        """The endpoint's limits, asking the server once where the configuration leaves them open."""
        if self._limits is None:
            facts = self._facts
            if facts is None:
                facts = ServerFacts()
                wants = (
                    self.config.context_window is None
                    or self.config.system_messages == "auto"
                    or self.config.structured_output == "auto"
                )
                if self.config.discover and self.config.base_url and wants:
                    facts = await discover(self.config.base_url, self.config.model, self.config.api_key())
            limits = resolve_limits(
                preset=self.config.preset,
                context_window=self.config.context_window,
                max_output_tokens=self.config.max_tokens,
                concurrency=self.config.concurrency,
                system_messages=self.config.system_messages,
                structured_output=self.config.structured_output,
                facts=facts,
            )
            if self._limits is None:  # another call may have resolved them meanwhile
                self._limits = limits
                self._slots = asyncio.Semaphore(limits.concurrency)
                log.info("endpoint %s: %s", self.config.base_url, limits)
        return self._limits

    async def complete(self, role: Role, prompt: Prompt | Messages) -> ChatReply:
        if not isinstance(prompt, Prompt):
            prompt = Prompt.fixed(prompt)
        limits = await self.limits()
        assert self._slots is not None
        settings = self.config.role(role)
        reply = ChatReply(model=settings.model)
        queued_at = time.monotonic()
        waited = self._slots.locked()
        if waited:
            self._waiting += 1
            self._status(
                f"{role}: waiting for the endpoint ({self._waiting} queued, {limits.concurrency} at a time)"
            )
        try:
            async with self._slots:
                if waited:
                    self._waiting -= 1
                    waited = False
                reply.queued_s = time.monotonic() - queued_at
                return await self._complete(role, prompt, limits, reply)
        finally:
            if waited:
                self._waiting -= 1

    def _status(self, message: str) -> None:
        log.info(message)
        if self._on_status is not None:
            self._on_status(message)

    async def _complete(self, role: Role, prompt: Prompt, limits: EndpointLimits, reply: ChatReply) -> ChatReply:
        settings = self.config.role(role)
        attempts = self.config.max_retries + 1
        for attempt in range(1, attempts + 1):
            window = self._learned_window or limits.context_window
            max_output = min(settings.max_tokens, self._learned_max_output or settings.max_tokens)
            try:
                fitted = fit(
                    prompt.build,
                    lesson_count=prompt.lesson_count,
                    window=window,
                    max_output_tokens=max_output,
                    min_reply_tokens=min(prompt.min_reply_tokens, max_output),
                )
            except WindowTooSmall as exc:
                reply.error, reply.cause = str(exc), "context_window"
                reply.notes.append(f"{role}: {exc}; not sent")
                return reply
            if fitted.trim != Trim():
                reply.notes.append(f"{role}: prompt trimmed to fit a {window}-token window (kept {fitted.trim.describe()})")
            try:
                await self._attempt(role, attempt, reply, settings.model, settings.temperature, settings.top_p,
                                    fitted, prompt, limits)
                reply.error = reply.cause = None
                return reply
            except _TooLarge as exc:
                reply.error, reply.cause = str(exc), exc.cause
                smaller = self._learn_size(exc, fitted, window)
                if not smaller or attempt == attempts:
                    reply.notes.append(f"{role} attempt {attempt}: {exc}; not retried")
                    return reply
                reply.notes.append(f"{role} attempt {attempt}: {exc}; retrying with {smaller}")
            except _SchemaRefused as exc:
                self._schema_refused = True
                reply.error, reply.cause = str(exc), exc.cause
                reply.notes.append(f"{role} attempt {attempt}: {exc}; retrying with free-text replies")
            except _Fatal as exc:
                reply.error, reply.cause = str(exc), exc.cause
                reply.notes.append(f"{role} attempt {attempt}: {exc}; not retried")
                return reply
            except _Retryable as exc:
                reply.error, reply.cause = str(exc), exc.cause
                if attempt == attempts:
                    reply.notes.append(f"{role} attempt {attempt}: {exc}; giving up after {attempts} attempts")
                    return reply
                delay = self._backoff(attempt, exc.retry_after_s)
                reply.notes.append(f"{role} attempt {attempt}: {exc}; retrying in {delay:.2f} s")
                log.info("%s call failed (%s), retrying in %.2f s", role, exc, delay)
                await asyncio.sleep(delay)
        return reply

    def _learn_size(self, exc: _TooLarge, fitted: Fitted, window: int | None) -> str | None:
        """Shrink the next request from what the refusal said; None when nothing smaller is left."""
        if exc.max_output is not None and exc.max_output < fitted.max_tokens:
            self._learned_max_output = exc.max_output
            return f"max_tokens {exc.max_output} (the endpoint's output limit)"
        if exc.window is not None and (window is None or exc.window < window):
            self._learned_window = exc.window
            return f"a {exc.window}-token window (the endpoint's)"
        if fitted.max_tokens > 256:  # the server said no numbers: halve the reply's room
            self._learned_window = fitted.prompt_tokens_estimate + fitted.max_tokens // 2
            return f"max_tokens {fitted.max_tokens // 2}"
        return None

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        cap = self.config.backoff_max_s
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), cap)
        base = self.config.backoff_initial_s * 2 ** (attempt - 1)
        return min(base * self._rng.uniform(0.75, 1.25), cap)

    async def _attempt(
        self,
        role: Role,
        attempt: int,
        reply: ChatReply,
        model: str,
        temperature: float,
        top_p: float | None,
        fitted: Fitted,
        prompt: Prompt,
        limits: EndpointLimits,
    ) -> None:
        messages = merge_system(fitted.messages) if limits.merge_system else fitted.messages
        extra: dict[str, Any] = {} if top_p is None else {"top_p": top_p}
        if prompt.schema is not None and limits.structured_output and not self._schema_refused:
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.schema_name, "schema": prompt.schema},
            }
        exchange = Exchange(
            role=role,
            attempt=attempt,
            model=model,
            request={"messages": messages, "max_tokens": fitted.max_tokens, "temperature": temperature, **extra},
            queued_s=reply.queued_s,
            status="ok",
        )
        sent = time.monotonic()
        try:
            await self._send(reply, model, temperature, messages, fitted, extra, exchange)
        except _Failure as exc:
            exchange.status, exchange.error = exc.cause, str(exc)
            raise
        finally:
            exchange.elapsed_s = time.monotonic() - sent
            if self.transcript is not None:
                self.transcript.write(exchange)

    async def _send(
        self,
        reply: ChatReply,
        model: str,
        temperature: float,
        messages: Messages,
        fitted: Fitted,
        extra: dict[str, Any],
        exchange: Exchange,
    ) -> None:
        try:
            response = await self._client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=fitted.max_tokens,
                **extra,
            )
        except openai.APITimeoutError as exc:
            self._count_abandoned(reply, model, fitted, exchange)
            raise _Retryable(
                f"timed out after {self.config.timeout_s:g} s (counted as about {fitted.prompt_tokens_estimate} "
                f"prompt + {fitted.max_tokens} reply tokens: the server may still generate the reply)",
                "timeout",
            ) from exc
        except openai.APIConnectionError as exc:
            raise _Retryable(
                f"cannot reach {self.config.base_url or 'the endpoint'}: {_cause(exc)}", "unreachable"
            ) from exc
        except openai.APIStatusError as exc:
            raise self._status_failure(exc, "response_format" in extra) from exc
        except ValueError as exc:  # the body was not the JSON the API promises (truncated, garbage)
            raise _Retryable(f"malformed reply from the endpoint: {_short(str(exc))}", "malformed") from exc

        usage = getattr(response, "usage", None)
        choices = getattr(response, "choices", None) or []
        message = choices[0].message if choices else None
        content = (message.content or "") if message is not None else ""
        if usage is not None:
            prompt_tokens, completion = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        else:
            prompt_tokens, completion = fitted.prompt_tokens_estimate, len(content) // 3
            reply.tokens_estimated = True
            reply.notes.append("the endpoint reported no token usage; tokens estimated from text length")
        self._add_usage(reply, model, prompt_tokens, completion, exchange, estimated=usage is None)
        if message is None:
            raise _Retryable("reply had no choices", "empty")
        finish = getattr(choices[0], "finish_reason", None)
        reply.finish_reason = exchange.finish_reason = finish
        reasoning = _reasoning_of(message)
        content, inline_reasoning = _split_think(content)
        reply.reasoning = exchange.reasoning = "\n".join(part for part in (reasoning, inline_reasoning) if part)
        exchange.content = content
        if finish == "length":
            # What came back stops mid-answer: not a kernel with a syntax error, not worth a fixer.
            raise _Fatal(f"reply cut at {fitted.max_tokens} tokens (finish_reason: length)", "cut_off")
        if len(content) > self.config.max_reply_chars:
            raise _Retryable(
                f"reply of {len(content)} characters exceeds the {self.config.max_reply_chars} limit", "runaway"
            )
        if not content.strip():
            raise _Retryable(f"reply had no content (finish_reason={finish})", "empty")
        reply.content = content

    def _add_usage(
        self, reply: ChatReply, model: str, prompt: int, completion: int, exchange: Exchange, *, estimated: bool
    ) -> None:
        reply.prompt_tokens += prompt
        reply.completion_tokens += completion
        reply.dollars += self.config.price_table.cost(model, prompt, completion)
        exchange.prompt_tokens, exchange.completion_tokens = prompt, completion
        exchange.tokens_estimated = estimated

    def _count_abandoned(self, reply: ChatReply, model: str, fitted: Fitted, exchange: Exchange) -> None:
        """A request we stopped waiting for may still be generated in full by the server: count its
        prompt and its whole reply allowance (an upper bound), so budgets do not undercount."""
        reply.tokens_estimated = True
        self._add_usage(reply, model, fitted.prompt_tokens_estimate, fitted.max_tokens, exchange, estimated=True)

    def _status_failure(self, exc: openai.APIStatusError, with_schema: bool) -> _Failure:
        status = exc.status_code
        detail = _short(str(exc.message))
        everything = f"{exc.message} {exc.body}"
        if status == 429 or status == 408 or status == 409 or status >= 500:
            label = "rate limited" if status == 429 else "server error"
            cause: FailureCause = "rate_limited" if status == 429 else "server_error"
            return _Retryable(f"{label} ({status}): {detail}", cause, _retry_after(exc))
        if status in (400, 413, 422) and with_schema and re.search("response_format|json_schema|schema", everything):
            return _SchemaRefused(f"endpoint refused structured output ({status}): {detail}", "refused")
        if status in (400, 413) and _SIZE_REFUSAL.search(everything):
            output = _OUTPUT_LIMIT.search(everything)
            window = next((m for p in _WINDOW_PATTERNS if (m := p.search(everything))), None)
            return _TooLarge(
                f"endpoint refused the request's size ({status}): {detail}",
                int(window.group(1)) if window else None,
                int(next(g for g in output.groups() if g)) if output else None,
            )
        hint = ""
        if status in (401, 403):
            variable = self.config.api_key_env
            hint = f"; the key is read from ${variable}" + ("" if os.environ.get(variable) else ", which is not set")
        return _Fatal(f"endpoint refused the request ({status}): {detail}{hint}", "refused")


def merge_system(messages: Messages) -> Messages:
    """System messages folded into the first user message, for chat templates that drop them."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{system}\n\n{message['content']}"
            return rest
    return [{"role": "user", "content": system}, *rest]


def _reasoning_of(message: Any) -> str:
    """Reasoning models return their thinking in a separate field (its name varies by server)."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None) or extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _split_think(content: str) -> tuple[str, str]:
    """Separate <think>...</think> reasoning from the answer; a reply may also start inside an
    unterminated think block that the server opened in the prompt (only '</think>' appears)."""
    thoughts = [m.group(0)[7:-8] for m in _THINK.finditer(content)]
    answer = _THINK.sub("", content)
    lowered = answer.lower()
    if "</think>" in lowered:
        cut = lowered.rindex("</think>")
        thoughts.append(answer[:cut])
        answer = answer[cut + len("</think>") :]
    elif lowered.lstrip().startswith("<think>"):
        thoughts.append(answer)  # the model never finished thinking: no answer
        answer = ""
    return answer.strip(), "\n".join(t.strip() for t in thoughts)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return _short(str(inner)) if inner else type(exc).__name__


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
