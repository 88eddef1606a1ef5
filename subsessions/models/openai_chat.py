"""A model client for Chat Completions (`wire_api = "chat"`): vLLM, Ollama, llama.cpp, ...

Streams `POST /chat/completions` and reassembles tool calls whose arguments arrive in
pieces, keyed by their index; reasoning arrives as `reasoning_content` (vLLM,
DeepSeek) or `reasoning` (Ollama) deltas and becomes a `reasoning` item.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import openai

from subsessions.errors import MalformedStream
from subsessions.items import Item, assistant_message, function_call, message_text
from subsessions.models.base import TOOL_CHOICE_WORDS, ModelRequest
from subsessions.models.openai_common import (
    END_GRACE,
    Answer,
    Counts,
    OpenAIModel,
    next_event,
    opened_within,
    required,
)
from subsessions.models.openai_errors import Retryable
from subsessions.tools.schema import to_chat_tool

_ROLES = {"user": "user", "developer": "system", "system": "system", "assistant": "assistant"}


def to_chat_messages(instructions: str, items: tuple[Item, ...]) -> list[dict[str, Any]]:
    """Our items as chat messages; an assistant's text and calls of one turn share a message."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = _ROLES.get(str(item.get("role")), "user")
            messages.append({"role": role, "content": message_text(item) or ""})
        elif kind == "function_call":
            call = {
                "id": required(item, "call_id"),
                "type": "function",
                "function": {
                    "name": required(item, "name"), "arguments": required(item, "arguments")
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                # "", not null: llama.cpp's server refuses null (pydantic, HTTP 500), and
                # its chatml-function-calling template fails on a message without content
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": required(item, "call_id"),
                    "content": required(item, "output"),
                }
            )
    return messages


def _chat_tool_choice(choice: str) -> str | dict[str, Any]:
    """`auto`, `required`, `none`, or Chat's shape naming one function."""
    if choice in TOOL_CHOICE_WORDS:
        return choice
    return {"type": "function", "function": {"name": choice}}


class _Call:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.arguments: list[str] = []


class OpenAIChatModel(OpenAIModel[openai.AsyncOpenAI]):
    """Streams Chat Completions through one shared `AsyncOpenAI` client."""

    wire_api = "chat"

    def _arguments(self, request: ModelRequest, model: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": model,
            "messages": to_chat_messages(request.instructions, request.items),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_output_tokens is not None:
            arguments["max_tokens"] = self.max_output_tokens  # what llama.cpp's server reads
        if request.reasoning_effort is not None:
            arguments["reasoning_effort"] = request.reasoning_effort
        if request.tools:
            arguments["tools"] = [to_chat_tool(spec) for spec in request.tools]
            arguments["tool_choice"] = _chat_tool_choice(request.tool_choice)
        return arguments

    async def _stream_once(self, arguments: dict[str, Any]) -> Answer:
        stream = await opened_within(
            self.client.chat.completions.create(**arguments), self.stream_idle_timeout
        )
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, _Call] = {}
        counts: Counts | None = None
        finished = said_anything = False
        async with stream:  # leaving it closes the connection, whether the body ended or not
            iterator = aiter(stream)
            while True:
                # The answer is whole at its finish_reason; the usage we asked for follows in
                # a chunk of its own, then the end: neither is waited for long.
                if not finished:
                    wait = self.stream_idle_timeout
                else:
                    wait = self.usage_grace if counts is None else END_GRACE
                chunk = await next_event(iterator, wait, complete=finished)
                if chunk is None:
                    break
                said_anything = True
                if chunk.usage is not None:
                    counts = _counts(chunk.usage)
                for choice in chunk.choices or ():
                    delta = choice.delta
                    if delta is not None:
                        _take_delta(delta, text, reasoning, calls)
                    if choice.finish_reason is not None:
                        finished = True
        if not said_anything:
            return await self._unstreamed(arguments)
        if not finished:
            raise Retryable(f"{self.endpoint} ended the stream before a finish_reason")
        return _items(text, reasoning, calls), counts

    async def _unstreamed(self, arguments: dict[str, Any]) -> Answer:
        """The same request, not streamed, after a stream that ended before its first chunk.

        llama.cpp's server fails a stream after its `200` (a chat template error; `tool_choice`
        auto under chatml-function-calling, which it cannot stream) with an empty body and
        the reason in its own log only; asked whole, it answers, or says why in an HTTP error.
        """
        whole = {k: v for k, v in arguments.items() if k not in ("stream", "stream_options")}
        try:
            completion = await opened_within(
                self.client.chat.completions.create(**whole), self.stream_idle_timeout
            )
        except openai.APIConnectionError:  # the server closes the failed stream's connection,
            completion = await opened_within(  # which the pool may have handed out again
                self.client.chat.completions.create(**whole), self.stream_idle_timeout
            )
        if not completion.choices:
            raise Retryable(f"{self.endpoint} answered with no choices")
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, _Call] = {}
        for choice in completion.choices:
            if choice.message is not None:
                _take_delta(choice.message, text, reasoning, calls)
        reported = completion.usage
        return _items(text, reasoning, calls), None if reported is None else _counts(reported)


def _take_delta(
    delta: Any, text: list[str], reasoning: list[str], calls: dict[int, _Call]
) -> None:
    if delta.content:
        text.append(delta.content)
    extra = getattr(delta, "model_extra", None) or {}
    thought = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(thought, str):
        reasoning.append(thought)
    for piece in delta.tool_calls or ():
        index = getattr(piece, "index", None)  # a whole message's calls have none
        call = calls.setdefault(len(calls) if index is None else index, _Call())
        if piece.id:
            call.call_id = piece.id
        function = piece.function
        if function is not None:
            if function.name and function.name != call.name:  # llama.cpp repeats it each time
                call.name += function.name
            if function.arguments:
                call.arguments.append(function.arguments)


def _items(text: list[str], reasoning: list[str], calls: dict[int, _Call]) -> tuple[Item, ...]:
    items: list[Item] = []
    if reasoning:
        items.append(
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "".join(reasoning)}]}
        )
    if text:
        items.append(assistant_message("".join(text)))
    for index in sorted(calls):
        call = calls[index]
        if not call.name:
            raise MalformedStream(f"tool call {index} arrived without a function name")
        items.append(
            function_call(
                call.name, "".join(call.arguments) or "{}", call.call_id or f"call_{uuid4().hex}"
            )
        )
    return tuple(items)


def _counts(reported: Any) -> Counts:
    """Chat's usage as sent, whatever it holds (checked by `OpenAIModel`)."""
    details = getattr(reported, "prompt_tokens_details", None)
    made = getattr(reported, "completion_tokens_details", None)
    return (getattr(reported, "prompt_tokens", None),
            getattr(reported, "completion_tokens", None),
            getattr(details, "cached_tokens", None), getattr(made, "reasoning_tokens", None))
