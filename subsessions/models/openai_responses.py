"""A model client for the OpenAI Responses API (`wire_api = "responses"`), streamed."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import openai

from subsessions.errors import MalformedStream, ModelError
from subsessions.items import Item, assistant_message, function_call
from subsessions.models.base import TOOL_CHOICE_WORDS, ModelRequest
from subsessions.models.openai_common import (
    Answer,
    Counts,
    OpenAIModel,
    answer_events,
    opened_within,
    required,
)
from subsessions.models.openai_errors import Retryable


def to_responses_input(items: tuple[Item, ...]) -> list[dict[str, Any]]:
    """Our items as Responses input: drop what the API does not accept back."""
    converted: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call_output":
            converted.append(
                {
                    "type": kind,
                    "call_id": required(item, "call_id"),
                    "output": required(item, "output"),
                }
            )
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                required(item, key)
            converted.append(item)
        elif kind == "message":
            converted.append(item)
        # reasoning items are not sent back: without encrypted content they are not accepted
    return converted


def from_responses_output(raw: dict[str, Any]) -> Item | None:
    """One Responses output item as ours, or None for kinds we do not use."""
    kind = raw.get("type")
    if kind == "message":
        parts = raw.get("content") or []
        text = "".join(
            str(p.get("text") or p.get("refusal") or "") for p in parts if isinstance(p, dict)
        )
        return assistant_message(text)
    if kind == "function_call":
        name, arguments, call_id = raw.get("name"), raw.get("arguments"), raw.get("call_id")
        if not isinstance(name, str) or not isinstance(call_id, str):
            raise MalformedStream(f"function_call without name or call_id: {raw!r:.200}")
        return function_call(name, arguments if isinstance(arguments, str) else "{}", call_id)
    if kind == "reasoning":
        summary = [
            {"type": "summary_text", "text": str(s.get("text", ""))}
            for s in raw.get("summary") or []
            if isinstance(s, dict)
        ]
        return {"type": "reasoning", "summary": summary}
    return None


class OpenAIResponsesModel(OpenAIModel[openai.AsyncOpenAI]):
    """Streams `POST /responses` through one shared `AsyncOpenAI` client."""

    wire_api = "responses"

    def _arguments(self, request: ModelRequest, model: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": model,
            "input": to_responses_input(request.items),
            "stream": True,
            "store": False,
        }
        if request.instructions:
            arguments["instructions"] = request.instructions
        if self.max_output_tokens is not None:
            arguments["max_output_tokens"] = self.max_output_tokens
        if request.reasoning_effort is not None:
            arguments["reasoning"] = {"effort": request.reasoning_effort}
        if request.tools:
            arguments["tools"] = list(request.tools)
            arguments["parallel_tool_calls"] = True
            choice = request.tool_choice
            arguments["tool_choice"] = (choice if choice in TOOL_CHOICE_WORDS
                                        else {"type": "function", "name": choice})
        return arguments

    async def _stream_once(self, arguments: dict[str, Any]) -> Answer:
        stream = await opened_within(
            self.client.responses.create(**arguments), self.stream_idle_timeout
        )
        items: list[Item] = []
        counts: Counts | None = None
        completed = False
        async with aclosing(answer_events(stream, self.stream_idle_timeout, _ends)) as events:
            async for event in events:
                kind = getattr(event, "type", None)
                if kind == "response.output_item.done":
                    item = from_responses_output(event.item.model_dump(mode="json"))
                    if item is not None:
                        items.append(item)
                elif kind in _WHOLE:
                    response = event.response
                    if response.usage is not None:
                        counts = _counts(response.usage)
                    if not items:  # a server that only reports the final response
                        for raw in response.output:
                            item = from_responses_output(raw.model_dump(mode="json"))
                            if item is not None:
                                items.append(item)
                    completed = True
                elif kind in ("response.failed", "error"):
                    raise ModelError(f"{self.provider} reported an error: {_event_error(event)}")
        if not completed:
            raise Retryable(f"{self.endpoint} ended the stream before response.completed")
        return tuple(items), counts


_WHOLE = ("response.completed", "response.incomplete")


def _ends(event: Any) -> bool:
    return getattr(event, "type", None) in _WHOLE  # the answer is whole


def _event_error(event: Any) -> str:
    response = getattr(event, "response", None)
    error = getattr(response, "error", None) if response is not None else None
    if error is not None:
        return str(getattr(error, "message", error))
    return str(getattr(event, "message", "") or event)


def _counts(reported: Any) -> Counts:
    """Responses' usage as sent, whatever it holds (checked by `OpenAIModel`)."""
    details = getattr(reported, "input_tokens_details", None)
    made = getattr(reported, "output_tokens_details", None)
    return (getattr(reported, "input_tokens", None), getattr(reported, "output_tokens", None),
            getattr(details, "cached_tokens", None), getattr(made, "reasoning_tokens", None))
