"""One chat completion against an OpenAI-compatible endpoint, made robust to what real endpoints
do: rate limits and 5xx bursts (retried with exponential backoff, honouring Retry-After),
timeouts, dropped connections, truncated or malformed JSON, empty `choices`, runaway replies.

`ChatClient.complete` never raises for an endpoint fault: it returns a `ChatReply` whose `error`
says what went wrong and whose `notes` list every failed attempt (the search records them on the
candidate). Only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, Field

from accelopt.agents.llm_config import LLMConfig, Role

Messages = list[ChatCompletionMessageParam]

log = logging.getLogger(__name__)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


class ChatReply(BaseModel):
    content: str = ""
    reasoning: str = ""
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0
    error: str | None = None
    notes: list[str] = Field(default_factory=list)


class _Retryable(Exception):
    """A fault worth another attempt (the reason goes into the notes)."""

    def __init__(self, reason: str, retry_after_s: float | None = None):
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class _Fatal(Exception):
    """A fault another attempt will not fix (bad key, unknown model, bad request)."""


class ChatClient:
    def __init__(self, config: LLMConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        self._rng = rng or random.Random()
        # Retries are ours (max_retries=0) so that every failed attempt is recorded and counted.
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key(), timeout=config.timeout_s, max_retries=0
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, role: Role, messages: Messages) -> ChatReply:
        settings = self.config.role(role)
        reply = ChatReply(model=settings.model)
        attempts = self.config.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                await self._attempt(
                    reply, settings.model, settings.temperature, settings.max_tokens, settings.top_p, messages
                )
                reply.error = None
                return reply
            except _Fatal as exc:
                reply.error = str(exc)
                reply.notes.append(f"{role} attempt {attempt}: {exc}; not retried")
                return reply
            except _Retryable as exc:
                reply.error = str(exc)
                if attempt == attempts:
                    reply.notes.append(
                        f"{role} attempt {attempt}: {exc}; giving up after {attempts} attempts"
                    )
                    return reply
                delay = self._backoff(attempt, exc.retry_after_s)
                reply.notes.append(f"{role} attempt {attempt}: {exc}; retrying in {delay:.2f} s")
                log.info("%s call failed (%s), retrying in %.2f s", role, exc, delay)
                await asyncio.sleep(delay)
        return reply

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        cap = self.config.backoff_max_s
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), cap)
        base = self.config.backoff_initial_s * 2 ** (attempt - 1)
        return min(base * self._rng.uniform(0.75, 1.25), cap)

    async def _attempt(
        self,
        reply: ChatReply,
        model: str,
        temperature: float,
        max_tokens: int,
        top_p: float | None,
        messages: Messages,
    ) -> None:
        extra: dict[str, Any] = {} if top_p is None else {"top_p": top_p}
        try:
            response = await self._client.chat.completions.create(
                model=model,
                messages=messages,
                temperature=temperature,
                max_tokens=max_tokens,
                **extra,
            )
        except openai.APITimeoutError as exc:
            raise _Retryable(f"timed out after {self.config.timeout_s:g} s") from exc
        except openai.APIConnectionError as exc:
            raise _Retryable(f"cannot reach {self.config.base_url or 'the endpoint'}: {_cause(exc)}") from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            detail = _short(str(exc.message))
            if status == 429 or status == 408 or status == 409 or status >= 500:
                label = "rate limited" if status == 429 else "server error"
                raise _Retryable(f"{label} ({status}): {detail}", _retry_after(exc)) from exc
            hint = ""
            if status in (401, 403):
                variable = self.config.api_key_env
                hint = f"; the key is read from ${variable}" + (
                    "" if os.environ.get(variable) else ", which is not set"
                )
            raise _Fatal(f"endpoint refused the request ({status}): {detail}{hint}") from exc
        except ValueError as exc:  # the body was not the JSON the API promises (truncated, garbage)
            raise _Retryable(f"malformed reply from the endpoint: {_short(str(exc))}") from exc

        usage = getattr(response, "usage", None)
        if usage is not None:
            prompt, completion = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        else:
            prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4  # ~4 characters a token
            completion = 0
        choices = getattr(response, "choices", None) or []
        message = choices[0].message if choices else None
        content = (message.content or "") if message is not None else ""
        if usage is None:
            completion = len(content) // 4
            reply.notes.append("the endpoint reported no token usage; tokens estimated from text length")
        reply.prompt_tokens += prompt
        reply.completion_tokens += completion
        reply.dollars += self.config.price_table.cost(model, prompt, completion)
        if message is None:
            raise _Retryable("reply had no choices")
        reasoning = _reasoning_of(message)
        content, inline_reasoning = _split_think(content)
        reply.reasoning = "\n".join(part for part in (reasoning, inline_reasoning) if part)
        if len(content) > self.config.max_reply_chars:
            raise _Retryable(
                f"reply of {len(content)} characters exceeds the {self.config.max_reply_chars} limit"
            )
        if not content.strip():
            finish = getattr(choices[0], "finish_reason", None)
            raise _Retryable(f"reply had no content (finish_reason={finish})")
        reply.content = content


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
