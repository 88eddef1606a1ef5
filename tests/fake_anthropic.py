"""A scriptable loopback fake of Anthropic's Messages API: for Claude Code as an MCP host, and
for the engine's own `anthropic` wire (driven through the real `anthropic` SDK).

A real aiohttp server on 127.0.0.1. Each `POST /v1/messages` is recorded and handed to
``FakeAnthropic.script``, which returns a `Turn` (thinking, text and tool calls), a `Failure`
(an HTTP error with the API's error body) or `Frames` (bytes sent as they are). A turn is
streamed as the API streams it (`message_start`, `ping`, `content_block_start` / `_delta` /
`_stop` per block, with `text_delta`, `input_json_delta`, `thinking_delta`, `signature_delta`,
`message_delta` with the stop reason and usage, `message_stop`) when the body says
``"stream": true``, else sent as one message; a turn's `fault` misbehaves after `after`
events. `count_tokens` is answered with a rough count; any other path answers 404.

    async with FakeAnthropic(lambda request: Turn(text="hi")) as fake:
        env["ANTHROPIC_BASE_URL"] = fake.base_url
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from aiohttp import web

Json = dict[str, Any]
_ids = itertools.count(1)
Fault = Literal["drop", "stall", "bad_json", "overloaded"]


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    body: Json
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def api_key(self) -> str | None:
        """The key the SDK sent: `x-api-key` (SDK 1.x), or `Authorization: Bearer` (2.x)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, key = self.headers.get("authorization", "").partition(" ")
        return key if scheme == "Bearer" and key else None

    @property
    def tool_names(self) -> list[str]:
        return [str(tool.get("name")) for tool in self.body.get("tools") or []]

    def tool_results(self) -> list[Json]:
        """Every `tool_result` block of the conversation so far, oldest first (the host may
        add messages of its own after them)."""
        return [block for message in self.body.get("messages") or []
                if isinstance(message.get("content"), list)
                for block in message["content"] if block.get("type") == "tool_result"]


@dataclass(frozen=True)
class Turn:
    """What the model answers: thinking blocks, some text, then tool calls (`name`, `input`).

    `thinking` holds blocks as the API sends them (`{"type": "thinking", "thinking",
    "signature"}` or `{"type": "redacted_thinking", "data"}`). Counts may be any JSON, for a
    client to cope with. `pieces`: deltas per text, thinking and tool input."""

    text: str | None = None
    calls: tuple[tuple[str, Json], ...] = ()
    input_tokens: Any = 10
    output_tokens: Any = 5
    cache_read: Any = None
    cache_write: Any = None
    thinking: tuple[Json, ...] = ()
    stop_reason: str | None = None  # default: tool_use with calls, else end_turn
    pieces: int = 1
    fault: Fault | None = None
    after: int = 0  # events sent before the fault


@dataclass(frozen=True)
class Failure:
    """An HTTP error with the API's body (`{"type": "error", "error": {type, message}}`),
    or `body` as it is."""

    status: int
    error_type: str = "invalid_request_error"
    message: str = "bad request"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass(frozen=True)
class Frames:
    """A 200 stream of exactly these bytes; `stall`: then the body never ends."""

    frames: tuple[bytes, ...]
    stall: bool = False


Answer = Turn | Failure | Frames
Script = Callable[[Recorded], Answer | Awaitable[Answer]]


def replies(*answers: Answer) -> Script:
    """A script answering successive requests with `answers` in order."""
    pending = list(answers)

    def script(request: Recorded) -> Answer:
        if not pending:
            raise AssertionError("fake_anthropic: script exhausted")
        return pending.pop(0)

    return script


def overloaded(retry_after: float | None = 0.01) -> Failure:
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return Failure(529, "overloaded_error", "Overloaded", headers)


def rate_limited(retry_after: float = 0.01) -> Failure:
    return Failure(429, "rate_limit_error", "Number of request tokens has exceeded your "
                   "per-minute rate limit", {"retry-after": f"{retry_after:g}"})


def sse(event: str, data: Json | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"event: {event}\ndata: {text}\n\n".encode()


@dataclass
class FakeAnthropic:
    script: Script = field(default=lambda request: Turn(text="ok"))
    requests: list[Recorded] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    script_errors: list[BaseException] = field(default_factory=list)
    disconnects: int = 0  # answers the client left before their end
    _runner: web.AppRunner | None = None
    _port: int = 0
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def base_url(self) -> str:
        """Without `/v1`: clients append it (`ANTHROPIC_BASE_URL`)."""
        assert self._runner is not None, "FakeAnthropic is not started"
        return f"http://127.0.0.1:{self._port}"

    @property
    def turns(self) -> list[Recorded]:
        """The requests that asked for a turn with tools (not side requests)."""
        return [r for r in self.requests if r.body.get("tools")]

    def reply_with(self, *answers: Answer) -> None:
        self.script = replies(*answers)

    async def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while self.disconnects < count:
                self._changed.clear()
                await self._changed.wait()

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        # handler_cancellation: a client that goes away cancels the handler of its stream
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                               handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner, self._port = runner, runner.addresses[0][1]
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _unknown(self, request: web.Request) -> web.Response:
        self.unknown.append(f"{request.method} {request.path}")
        return web.json_response({"type": "error", "error": {
            "type": "not_found_error", "message": f"Not found: {request.path}"}}, status=404)

    async def _count(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"input_tokens": len(json.dumps(body)) // 4})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = Recorded(request.path, body if isinstance(body, dict) else {}, headers)
        self.requests.append(recorded)
        try:
            result = self.script(recorded)
            answer = await result if inspect.isawaitable(result) else result
        except Exception as exc:
            self.script_errors.append(exc)
            return web.json_response({"type": "error", "error": {
                "type": "api_error", "message": f"fake_anthropic script failed: {exc!r}"}},
                status=500, headers={"x-should-retry": "false"})
        if isinstance(answer, Failure):
            if answer.body is not None:
                return web.Response(body=answer.body, status=answer.status,
                                    headers=answer.headers, content_type="application/json")
            return web.json_response({"type": "error", "error": {
                "type": answer.error_type, "message": answer.message}},
                status=answer.status, headers=answer.headers)
        if isinstance(answer, Frames):
            return await self._stream(request, list(answer.frames), "stall" if answer.stall
                                      else None, len(answer.frames))
        message = _message(recorded, answer)
        if not recorded.body.get("stream"):
            if answer.fault == "bad_json":
                return web.Response(body=b'{"id": "msg_broken", "content": [',
                                    content_type="application/json")
            return web.json_response(message)
        return await self._stream(request, _events(message, answer.pieces), answer.fault,
                                  answer.after)

    async def _stream(self, request: web.Request, frames: list[bytes], fault: Fault | None,
                      after: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
            for index, frame in enumerate(frames):
                if fault is not None and index == after:
                    if fault == "drop":
                        if request.transport is not None:
                            request.transport.close()  # the body never ends
                        return response
                    if fault == "stall":
                        await self._stopping.wait()
                        return response
                    if fault == "overloaded":
                        await response.write(sse("error", {"type": "error", "error": {
                            "type": "overloaded_error", "message": "Overloaded"}}))
                        await response.write_eof()
                        return response
                    await response.write(sse("content_block_delta", '{"type": "content_'))
                await response.write(frame)
            if fault == "stall":
                await self._stopping.wait()
                return response
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            if not self._stopping.is_set():
                self.disconnects += 1
                self._changed.set()
            raise
        return response


def _message(request: Recorded, turn: Turn) -> Json:
    content: list[Json] = list(turn.thinking)
    if turn.text is not None:
        content.append({"type": "text", "text": turn.text})
    for name, arguments in turn.calls:
        content.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name,
                        "input": arguments})
    usage: Json = {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}
    if turn.cache_read is not None:
        usage["cache_read_input_tokens"] = turn.cache_read
    if turn.cache_write is not None:
        usage["cache_creation_input_tokens"] = turn.cache_write
    return {
        "id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant",
        "model": request.body.get("model", "claude-fake"), "content": content,
        "stop_reason": turn.stop_reason or ("tool_use" if turn.calls else "end_turn"),
        "stop_sequence": None, "usage": usage,
    }


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _events(message: Json, pieces: int) -> list[bytes]:
    """The SSE frames of a streamed message: each block opened, filled by deltas, closed."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    frames = [sse("message_start", {"type": "message_start", "message": start}),
              sse("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            opened: Json = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _split(block["text"], pieces)]
        elif kind == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t}
                      for t in _split(block["thinking"], pieces)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "redacted_thinking":
            opened, deltas = block, []
        else:
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": t}
                      for t in _split(json.dumps(block["input"]), pieces)]
        frames.append(sse("content_block_start", {"type": "content_block_start",
                                                  "index": index, "content_block": opened}))
        frames += [sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": delta}) for delta in deltas]
        frames.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    frames += [
        sse("message_delta", {"type": "message_delta",
                              "delta": {"stop_reason": message["stop_reason"],
                                        "stop_sequence": None},
                              "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return frames
