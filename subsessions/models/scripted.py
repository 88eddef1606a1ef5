"""A model that answers from a script: for tests, benchmarks and the offline demo."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeAlias

import orjson

from subsessions.errors import ModelError
from subsessions.items import Item, assistant_message, function_call
from subsessions.models.base import ModelRequest, ModelResponse, TokenUsage

ScriptItem: TypeAlias = str | dict[str, Any]
ScriptResponse: TypeAlias = Sequence[ScriptItem] | ScriptItem | BaseException
ScriptFunction: TypeAlias = Callable[
    [ModelRequest], ScriptResponse | Awaitable[ScriptResponse]
]


class ScriptedModel:
    """Answers each request from `script`.

    `script` is a list of responses consumed in order (across every session that
    shares this client), or a function called with each `ModelRequest`, sync or
    async. A response is a list of output items: a `str` is assistant text, a dict
    is a Responses item such as `{"type": "function_call", "name": ..., "arguments":
    {...}}` (`call_id` generated when absent, `arguments` a dict or JSON text). A
    response that is an exception instance is raised, to model a failing model;
    `latency` seconds are slept before each answer, to model a slow one.
    Every request is kept in `requests` for tests to look at; `keep_requests=False`
    keeps none (a load test of many children must not measure its own double).

    Usage: each answer reports an estimate (about four characters a token), or `usage`
    when given; an item `{"type": "usage", "input_tokens": n, "output_tokens": m}` in a
    response reports exactly that for it (and is not output).
    """

    provider = "scripted"

    def __init__(
        self, script: Iterable[ScriptResponse] | ScriptFunction, *, latency: float = 0.0,
        usage: TokenUsage | None = None, keep_requests: bool = True,
    ) -> None:
        if latency < 0:
            raise ValueError("latency must be >= 0")
        if usage is not None and not isinstance(usage, TokenUsage):
            raise ValueError("usage must be a TokenUsage or None")
        self._usage = usage
        self._function: ScriptFunction | None = None
        self._responses: list[ScriptResponse] = []
        if callable(script):
            self._function = script
        else:
            self._responses = list(script)
        self._next = 0
        self._latency = latency
        self._call_ids = itertools.count(1)
        self.requests: list[ModelRequest] = []
        self._keep_requests = keep_requests

    def __repr__(self) -> str:
        kind = "function" if self._function else f"{len(self._responses) - self._next} left"
        return f"<ScriptedModel {kind} latency={self._latency}>"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if self._keep_requests:
            self.requests.append(request)
        if self._latency:
            await asyncio.sleep(self._latency)
        raw = self._script_response(request)
        if inspect.isawaitable(raw):  # awaited here: no frame of its own while it waits
            raw = await raw
        if isinstance(raw, BaseException):
            raise raw
        if isinstance(raw, str | dict):  # one item given without its list
            raw = [raw]
        if not isinstance(raw, list | tuple):
            raise ModelError(
                f"scripted response must be a list of items, a str or an exception: {raw!r:.200}"
            )
        items: list[Item] = []
        reported: dict[str, Any] | None = None
        for item in raw:
            if isinstance(item, dict) and item.get("type") == "usage":
                reported = item  # what this answer reports, not output
            else:
                items.append(self._normalise(item))
        output = tuple(items)
        if reported is not None:
            usage = _reported_usage(reported)
        else:
            usage = self._usage or _estimate_usage(request, output)
        return ModelResponse(output=output, usage=usage)

    def _script_response(
        self, request: ModelRequest
    ) -> ScriptResponse | Awaitable[ScriptResponse]:
        if self._function is None:
            if self._next >= len(self._responses):
                raise ModelError(
                    f"scripted model has no response left for request {self._next + 1}"
                )
            self._next += 1
            return self._responses[self._next - 1]
        return self._function(request)

    def _normalise(self, item: ScriptItem) -> Item:
        if isinstance(item, str):
            return assistant_message(item)
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise ModelError(f"scripted output item must be a str or a dict with a type: {item!r}")
        if item["type"] != "function_call":
            return dict(item)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ModelError(f"scripted function_call has no name: {item!r}")
        arguments = item.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        call_id = item.get("call_id") or f"call_{next(self._call_ids)}"
        return function_call(name, arguments, str(call_id))


def _reported_usage(item: dict[str, Any]) -> TokenUsage:
    counts = {key: item.get(key, 0) for key in ("input_tokens", "output_tokens")}
    for key, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ModelError(f"scripted usage {key} must be a non-negative integer: {item!r}")
    return TokenUsage(**counts)


def _estimate_usage(request: ModelRequest, output: tuple[Item, ...]) -> TokenUsage:
    """About four characters a token, so usage figures are plausible and deterministic."""
    seen = len(request.instructions) + sum(len(orjson.dumps(i)) for i in request.items)
    made = sum(len(orjson.dumps(i)) for i in output)
    return TokenUsage(input_tokens=seen // 4 + 1, output_tokens=made // 4 + 1)


ECHO = "echo: "


class EchoModel(ScriptedModel):
    """The offline model: `--model-provider echo` answers every task with its latest prompt
    (`echo: ...`), so `run`, `batch`, `mcp` and `serve` can be tried without a key or a
    server. Usage is estimated, as for any scripted answer."""

    provider = "echo"

    def __init__(self) -> None:
        super().__init__(_echo, keep_requests=False)

    async def respond_as(self, request: ModelRequest, model: str) -> ModelResponse:
        response = await self.respond(request)
        return ModelResponse(response.output, response.usage, model)

    async def aclose(self) -> None:
        """Nothing to close: no connection was opened."""


def _echo(request: ModelRequest) -> str:
    for item in reversed(request.items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            return ECHO + "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    return ECHO.strip()
