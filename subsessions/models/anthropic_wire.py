"""A model client for Anthropic's Messages API (`wire_api = "anthropic"`), streamed.

Through the official SDK (`AsyncAnthropic`, its own retries off: the shared policy of the
OpenAI wires applies, with this wire's classifier). Prompt caching is on unless the provider
says `prompt_cache = false`: the last tool, the system block and the newest message block
carry `cache_control`, so every turn (and every child with the same instructions and tools)
reads the shared prefix from the cache; a fork's copied conversation ends with a fourth mark,
which its forked siblings read. Input counts cache reads and writes.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anthropic

from subsessions.errors import ModelError
from subsessions.models.anthropic_errors import classify
from subsessions.models.anthropic_messages import (
    DEFAULT_MAX_TOKENS,
    Blocks,
    mark_shared,
    may_think,
    to_messages,
    to_tool,
    to_tool_choice,
    whole_blocks,
    with_cache_marks,
)
from subsessions.models.base import ModelRequest
from subsessions.models.openai_common import (
    MAX_COUNT,
    Answer,
    Counts,
    OpenAIModel,
    RetryPolicy,
    answer_events,
    opened_within,
)
from subsessions.models.openai_errors import Endpoint, Retryable

_USAGE = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
          "cache_read_input_tokens")
_CUT = {"max_tokens": "max_tokens", "model_context_window_exceeded": "the context window"}


class AnthropicModel(OpenAIModel[anthropic.AsyncAnthropic]):
    """Streams `POST /v1/messages` through one shared `AsyncAnthropic` client."""

    wire_api = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        provider: str = "anthropic",
        retry: RetryPolicy | None = None,
        stream_idle_timeout: float = 300.0,
        max_output_tokens: int | None = None,
        prompt_cache: bool = True,
        stream: bool = True,
        thinking_budget_tokens: int = 0,
    ) -> None:
        super().__init__(client, provider=provider, retry=retry,
                         stream_idle_timeout=stream_idle_timeout,
                         max_output_tokens=max_output_tokens)
        self.prompt_cache = prompt_cache
        self.stream = stream
        self.thinking_budget_tokens = thinking_budget_tokens

    def _classify(self, exc: BaseException, endpoint: Endpoint) -> BaseException:
        return classify(exc, endpoint)

    def _arguments(self, request: ModelRequest, model: str) -> dict[str, Any]:
        messages = to_messages(request.items, tools=bool(request.tools))
        system = [{"type": "text", "text": request.instructions}] if request.instructions else []
        tools = [to_tool(spec) for spec in request.tools]
        if self.prompt_cache:
            with_cache_marks(system, tools, messages)
            if request.shared_items:
                mark_shared(messages, to_messages(request.items[:request.shared_items],
                                                  tools=bool(request.tools)))
        arguments: dict[str, Any] = {
            "model": model,
            "max_tokens": self.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        if system:
            arguments["system"] = system
        if tools:
            arguments["tools"] = tools
            arguments["tool_choice"] = to_tool_choice(request.tool_choice)
        if self.thinking_budget_tokens and may_think(messages, request.tool_choice, tools):
            arguments["thinking"] = {"type": "enabled",
                                     "budget_tokens": self.thinking_budget_tokens}
        if self.stream:
            arguments["stream"] = True
        return arguments

    async def _stream_once(self, arguments: dict[str, Any]) -> Answer:
        if not arguments.get("stream"):
            return await self._whole_once(arguments)
        stream = await opened_within(
            self.client.messages.create(**arguments), self.stream_idle_timeout
        )
        blocks = Blocks()
        usage: dict[str, Any] = {}
        stop_reason: Any = None
        complete = False
        async with aclosing(answer_events(stream, self.stream_idle_timeout, _ends)) as events:
            async for event in events:
                kind = getattr(event, "type", None)
                if kind == "content_block_delta":
                    blocks.delta(event.index, event.delta)
                elif kind == "content_block_start":
                    blocks.start(event.index, event.content_block)
                elif kind == "content_block_stop":
                    blocks.stop(event.index)
                elif kind == "message_start":
                    _take_usage(usage, getattr(event.message, "usage", None))
                elif kind == "message_delta":
                    stop_reason = getattr(event.delta, "stop_reason", None)
                    _take_usage(usage, getattr(event, "usage", None))
                elif kind == "message_stop":
                    complete = True
        if not complete:
            raise Retryable(f"{self.endpoint} ended the stream before message_stop")
        return _answer(blocks, stop_reason, usage, arguments["max_tokens"])

    async def _whole_once(self, arguments: dict[str, Any]) -> Answer:
        """One whole message (the provider's `stream = false`)."""
        message = await opened_within(
            self.client.messages.create(**arguments), self.stream_idle_timeout
        )
        usage: dict[str, Any] = {}
        _take_usage(usage, getattr(message, "usage", None))
        blocks = whole_blocks(getattr(message, "content", None))
        return _answer(blocks, getattr(message, "stop_reason", None), usage,
                       arguments["max_tokens"])


def _ends(event: Any) -> bool:
    return getattr(event, "type", None) == "message_stop"  # the answer is whole


def _take_usage(usage: dict[str, Any], reported: Any) -> None:
    """Counts present in `reported` replace those known (message_delta's are cumulative)."""
    for name in _USAGE:
        value = getattr(reported, name, None)
        if value is not None:
            usage[name] = value


def _answer(blocks: Blocks, stop_reason: Any, usage: dict[str, Any], max_tokens: int) -> Answer:
    """The items of a finished message, or the task's failure its stop reason says."""
    if stop_reason == "refusal":
        raise ModelError(f"refusal: {blocks.text().strip() or '(the model gave no text)'}")
    if stop_reason in _CUT:
        if not blocks.complete_calls():
            limit = f"max_tokens ({max_tokens})" if stop_reason == "max_tokens" else (
                _CUT[stop_reason])
            raise ModelError(f"model output cut at {limit}")
        return blocks.items(stopped_only=True), _counts(usage)
    return blocks.items(), _counts(usage)


def _counts(usage: dict[str, Any]) -> Counts | None:
    """Input as the API bills it: uncached input, cache writes and cache reads together;
    cache reads are Codex's `cached_input_tokens`. A part that is not a count is passed on
    as it is, for the shared check to refuse (and estimate instead)."""
    if not usage:
        return None
    given: Any = usage.get("input_tokens")
    written: Any = usage.get("cache_creation_input_tokens") or 0
    read: Any = usage.get("cache_read_input_tokens") or 0
    parts = (given, written, read)
    bad = [n for n in parts if type(n) is not int or not 0 <= n <= MAX_COUNT]
    total: Any = bad[0] if bad else given + written + read
    return total, usage.get("output_tokens"), read, 0
