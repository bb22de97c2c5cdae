"""What an OpenAI-compatible endpoint can take: its context window, how many requests it serves at
once, whether its chat template keeps `system` messages, whether it constrains replies to a JSON
schema. Presets give sensible values for the common servers; what the server reports about itself
(`GET /v1/models`, llama.cpp's `/props`) fills what the configuration leaves open.

Why each preset is what it is:
- llama.cpp's `llama-server` and Ollama serve one request per slot and, by default, one slot:
  concurrent requests queue inside the server, where a client-side timeout keeps counting while
  the server still generates the abandoned reply. So concurrency 1.
- vLLM and SGLang batch many requests; 8 in flight keeps them busy without flooding them.
- Hosted APIs (OpenAI and compatible) take many requests; their windows are large.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

Preset = Literal["openai", "vllm", "sglang", "ollama", "llamacpp"]
SystemHandling = Literal["keep", "merge", "auto"]
StructuredOutput = Literal["off", "json_schema", "auto"]


class EndpointLimits(BaseModel):
    """The resolved limits of one endpoint and model (configuration, preset, then the server)."""

    model_config = ConfigDict(frozen=True)

    context_window: int | None = Field(None, description="tokens of prompt + reply; None: unknown")
    max_output_tokens: int = Field(description="the most tokens a reply may be asked for")
    concurrency: int = Field(ge=1, description="requests in flight at once")
    merge_system: bool = Field(description="fold system messages into the first user message")
    structured_output: bool = Field(description="send response_format with a JSON schema")
    source: str = Field("configuration", description="where the window came from, for messages")


class _PresetValues(BaseModel):
    concurrency: int
    system_messages: SystemHandling
    structured_output: StructuredOutput


PRESETS: dict[Preset, _PresetValues] = {
    "openai": _PresetValues(concurrency=8, system_messages="keep", structured_output="json_schema"),
    "vllm": _PresetValues(concurrency=8, system_messages="keep", structured_output="json_schema"),
    "sglang": _PresetValues(concurrency=8, system_messages="keep", structured_output="json_schema"),
    "ollama": _PresetValues(concurrency=1, system_messages="keep", structured_output="off"),
    "llamacpp": _PresetValues(concurrency=1, system_messages="auto", structured_output="json_schema"),
}

# Without a preset: be conservative about concurrency (a local server is the common case for an
# unknown endpoint) and leave the reply format free-text, which every server accepts.
DEFAULT_VALUES = _PresetValues(concurrency=4, system_messages="keep", structured_output="off")


class ServerFacts(BaseModel):
    """What a server said about itself; every field may be missing."""

    context_window: int | None = None
    chat_template: str | None = None
    source: str = ""


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def window_from_models(body: Any, model: str) -> int | None:
    """The context window in a `/v1/models` listing: vLLM and SGLang put `max_model_len` on each
    model card, llama.cpp a `meta` object (`n_ctx` is the server's window, `n_ctx_train` the
    model's), some servers `context_length` or `context_window`."""
    entries = body.get("data") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    cards = [e for e in entries if isinstance(e, dict)]
    matching = [c for c in cards if c.get("id") == model or model in (c.get("aliases") or [])]
    for card in matching or cards[:1]:
        meta = card.get("meta")
        if not isinstance(meta, dict):
            meta = {}
        for value in (
            card.get("max_model_len"),
            meta.get("n_ctx"),
            card.get("context_length"),
            card.get("context_window"),
            meta.get("n_ctx_train"),
        ):
            window = _positive_int(value)
            if window is not None:
                return window
    return None


def facts_from_props(body: Any) -> ServerFacts:
    """llama.cpp's `/props`: the slot's window and the chat template the server applies."""
    if not isinstance(body, dict):
        return ServerFacts()
    settings = body.get("default_generation_settings")
    window = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    template = body.get("chat_template")
    return ServerFacts(
        context_window=window, chat_template=template if isinstance(template, str) else None, source="/props"
    )


def template_drops_system(template: str | None) -> bool:
    """A chat template that never mentions the system role has nowhere to put a system message:
    servers then drop it silently (llama.cpp with a Gemma template, for one)."""
    return template is not None and "system" not in template


def _get_json(url: str, api_key: str, timeout_s: float) -> Any:
    """GET `url` as JSON; None for anything but a 200 with a JSON body."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if response.status != 200:
                return None
            return json.loads(response.read(1_000_000))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.info("endpoint: nothing at %s (%s)", url, exc)
        return None


async def discover(base_url: str, model: str, api_key: str, *, timeout_s: float = 5.0) -> ServerFacts:
    """Ask the server about itself; a server that says nothing (or is down) gives empty facts, and
    the first chat call reports the real problem."""
    root = base_url.rstrip("/")
    server_root = root[: -len("/v1")] if root.endswith("/v1") else root
    listing = await asyncio.to_thread(_get_json, f"{root}/models", api_key, timeout_s)
    window = window_from_models(listing, model)
    facts = ServerFacts(context_window=window, source="/v1/models" if window else "")
    if listing is None:
        return facts  # nothing answers at all: no point asking for more
    for url in dict.fromkeys((f"{root}/props", f"{server_root}/props")):
        body = await asyncio.to_thread(_get_json, url, api_key, timeout_s)
        if isinstance(body, dict):
            props = facts_from_props(body)
            return ServerFacts(
                context_window=facts.context_window or props.context_window,
                chat_template=props.chat_template,
                source=facts.source or props.source,
            )
    return facts


def resolve_limits(
    *,
    preset: Preset | None,
    context_window: int | None,
    max_output_tokens: int,
    concurrency: int | None,
    system_messages: SystemHandling | None,
    structured_output: StructuredOutput | None,
    facts: ServerFacts,
) -> EndpointLimits:
    """Configuration first, then the preset, then what the server said."""
    base = PRESETS[preset] if preset else DEFAULT_VALUES
    system = system_messages or base.system_messages
    structured = structured_output or base.structured_output
    window = context_window or facts.context_window
    return EndpointLimits(
        context_window=window,
        max_output_tokens=max_output_tokens,
        concurrency=concurrency or base.concurrency,
        merge_system=system == "merge" or (system == "auto" and template_drops_system(facts.chat_template)),
        structured_output=structured == "json_schema" or (structured == "auto" and facts.source == "/props"),
        source="configuration" if context_window else (facts.source or "unknown"),
    )
