"""A scriptable loopback fake of Anthropic's Messages API, for driving Claude Code in tests.

A real aiohttp server on 127.0.0.1. Each `POST /v1/messages` is recorded and handed to
``FakeAnthropic.script``, which returns a `Turn` (text and tool calls); the answer is streamed
as the API streams it (`message_start`, `content_block_start` / `_delta` / `_stop` per block,
`message_delta` with the stop reason and usage, `message_stop`) when the body says
``"stream": true``, else sent as one message. `count_tokens` is answered with a rough count;
any other path answers 404, as the API does.

    async with FakeAnthropic(lambda request: Turn(text="hi")) as fake:
        env["ANTHROPIC_BASE_URL"] = fake.base_url
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

Json = dict[str, Any]
_ids = itertools.count(1)


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it."""

    path: str
    body: Json

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
    """What the model answers: some text, then tool calls (`name`, `input`)."""

    text: str | None = None
    calls: tuple[tuple[str, Json], ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5


Script = Callable[[Recorded], Turn | Awaitable[Turn]]


@dataclass
class FakeAnthropic:
    script: Script = field(default=lambda request: Turn(text="ok"))
    requests: list[Recorded] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    script_errors: list[BaseException] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _port: int = 0

    @property
    def base_url(self) -> str:
        """Without `/v1`: clients append it (`ANTHROPIC_BASE_URL`)."""
        assert self._runner is not None, "FakeAnthropic is not started"
        return f"http://127.0.0.1:{self._port}"

    @property
    def turns(self) -> list[Recorded]:
        """The requests that asked for a turn with tools (not side requests)."""
        return [r for r in self.requests if r.body.get("tools")]

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner, self._port = runner, runner.addresses[0][1]
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
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
        recorded = Recorded(request.path, body if isinstance(body, dict) else {})
        self.requests.append(recorded)
        try:
            result = self.script(recorded)
            turn = await result if inspect.isawaitable(result) else result
        except Exception as exc:
            self.script_errors.append(exc)
            return web.json_response({"type": "error", "error": {
                "type": "api_error", "message": f"fake_anthropic script failed: {exc!r}"}},
                status=500, headers={"x-should-retry": "false"})
        message = _message(recorded, turn)
        if not recorded.body.get("stream"):
            return web.json_response(message)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event, data in _events(message):
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response


def _message(request: Recorded, turn: Turn) -> Json:
    content: list[Json] = []
    if turn.text is not None:
        content.append({"type": "text", "text": turn.text})
    for name, arguments in turn.calls:
        content.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name,
                        "input": arguments})
    return {
        "id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant",
        "model": request.body.get("model", "claude-fake"), "content": content,
        "stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }


def _events(message: Json) -> list[tuple[str, Json]]:
    """The SSE events of a streamed message: each block opened, filled by deltas, closed."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events: list[tuple[str, Json]] = [("message_start", {"type": "message_start",
                                                         "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": opened}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"],
                                     "stop_sequence": None},
                           "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events
