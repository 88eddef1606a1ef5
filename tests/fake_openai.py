"""A scriptable OpenAI-compatible HTTP server for tests: Responses and Chat Completions.

A real aiohttp server on 127.0.0.1 that the real openai SDK talks to over the socket.
Each request is recorded, handed to ``FakeOpenAI.script`` and answered with the ``Reply``
it returns: SSE when the body says ``"stream": true``, one JSON body otherwise.

    async def test_x(fake_openai: FakeOpenAI) -> None:
        fake_openai.reply_with(rate_limited(), calls(call("f", {"a": 1}, pieces=5)))
        async with AsyncOpenAI(base_url=fake_openai.base_url, api_key="t") as client:
            stream = await client.responses.create(model="m", input="hi", stream=True)
            events = [e async for e in stream]
        assert events[-1].response.output[0].arguments == '{"a": 1}'
        assert len(fake_openai.requests) == 2  # the 429 was retried
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal

import pytest
from aiohttp import web

__all__ = [
    "CREATED",
    "DEFAULT_USAGE",
    "Call",
    "Count",
    "FakeOpenAI",
    "Fault",
    "Recorded",
    "Reply",
    "Script",
    "Usage",
    "call",
    "calls",
    "error",
    "fake_openai",
    "model_not_found",
    "rate_limited",
    "raw",
    "replies",
    "server_error",
    "settle_sdk_generators",
    "split",
    "text",
]

CREATED = 1_700_000_000
"""The fixed ``created`` / ``created_at`` timestamp of every reply."""

Json = dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it; header names are lower-cased."""

    path: str
    body: Json
    headers: dict[str, str]
    client_port: int = 0
    """The client's port: two requests with the same one came over one connection."""

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def api(self) -> Literal["responses", "chat"]:
        return "chat" if self.path.endswith("/chat/completions") else "responses"


Count = int | float | str | None
"""A count as sent: a server may send any JSON value where a count belongs."""


@dataclass(frozen=True)
class Usage:
    """Token counts; reported in the units of whichever API is asked, as they are (a count
    that is not a number is sent too, for a client to cope with)."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    reasoning_tokens: Count = 0
    cached_tokens: Count = 0

    @property
    def total_tokens(self) -> Count:
        counts = (self.input_tokens, self.output_tokens)
        if all(isinstance(n, int | float) for n in counts):
            return sum(counts)  # type: ignore[arg-type]
        return None


DEFAULT_USAGE = Usage(input_tokens=10, output_tokens=5)


@dataclass(frozen=True)
class Call:
    """A function call; ``arguments`` is the JSON text, streamed in ``pieces`` deltas."""

    name: str
    arguments: str
    call_id: str | None = None
    pieces: int = 4


@dataclass(frozen=True)
class Fault:
    """Misbehave after ``after`` SSE events (a non-streaming reply misbehaves at once).

    Events count from ``response.created`` (Responses) or the role chunk (Chat).
    """

    kind: Literal["drop", "stall", "bad_json"]
    after: int = 0


@dataclass(frozen=True)
class Reply:
    """What to answer: an assistant turn, or an HTTP error when ``status`` is not 200."""

    text: str | None = None
    text_pieces: int = 1
    reasoning: str | None = None
    reasoning_pieces: int = 1
    calls: tuple[Call, ...] = ()
    usage: Usage | None = DEFAULT_USAGE
    """None: no usage at all, as llama.cpp's server streams (no usage chunk even when asked)."""
    status: int = 200
    error: Json | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    fault: Fault | None = None
    frames: tuple[bytes, ...] | None = None
    """Streamed verbatim instead of the frames built from the fields (see ``raw``)."""

    def with_reasoning(self, reasoning: str, *, pieces: int = 1) -> Reply:
        return replace(self, reasoning=reasoning, reasoning_pieces=pieces)

    def with_usage(
        self, input_tokens: Count, output_tokens: Count, *, reasoning: Count = 0,
        cached: Count = 0
    ) -> Reply:
        return replace(self, usage=Usage(input_tokens, output_tokens, reasoning, cached))

    def without_usage(self) -> Reply:
        """Report no usage: no usage chunk (Chat), `usage: null` (Responses)."""
        return replace(self, usage=None)

    def drop_after(self, events: int) -> Reply:
        """Close the connection after ``events`` SSE events, without ending the body."""
        return replace(self, fault=Fault("drop", events))

    def stall_after(self, events: int) -> Reply:
        """Send ``events`` SSE events, then hold the stream open until the client leaves.

        ``events`` may be the number of frames: everything is sent, the end never comes.
        """
        return replace(self, fault=Fault("stall", events))

    def bad_json_after(self, events: int) -> Reply:
        """Send ``events`` SSE events, then one whose data is not JSON, then the rest."""
        return replace(self, fault=Fault("bad_json", events))


Script = Callable[[Recorded], "Reply | Awaitable[Reply]"]


# --- builders ---------------------------------------------------------------------------


def text(content: str, *, pieces: int = 1) -> Reply:
    """An assistant message streamed in ``pieces`` deltas."""
    return Reply(text=content, text_pieces=pieces)


def call(
    name: str, arguments: Mapping[str, Any] | str, *, pieces: int = 4, call_id: str | None = None
) -> Call:
    """A function call; a mapping is serialised to JSON. ``call_id`` defaults per request."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Call(name=name, arguments=args, call_id=call_id, pieces=pieces)


def calls(*function_calls: Call, text: str | None = None, text_pieces: int = 1) -> Reply:
    """One response carrying parallel function calls, optionally after some text."""
    return Reply(text=text, text_pieces=text_pieces, calls=function_calls)


def error(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An HTTP error with OpenAI's ``{"error": {...}}`` body."""
    body = {"message": message, "type": error_type, "param": param, "code": code}
    return Reply(status=status, error={"error": body}, headers=dict(headers or {}))


def raw(*frames: bytes | Json) -> Reply:
    """A stream of exactly these frames: bytes as they are, a dict as one ``data:`` frame.

    Nothing is added, not even ``data: [DONE]``; with ``.stall_after(len(frames))`` the
    connection then stays open, as a server that never finishes its body.
    """
    return Reply(frames=tuple(f if isinstance(f, bytes) else _sse(f) for f in frames))


def rate_limited(retry_after: float = 0.01) -> Reply:
    """A 429 with ``Retry-After`` in seconds (the SDK accepts fractions)."""
    return error(
        429,
        "Rate limit reached for requests",
        error_type="requests",
        code="rate_limit_exceeded",
        headers={"Retry-After": f"{retry_after:g}"},
    )


def server_error() -> Reply:
    return error(
        500,
        "The server had an error while processing your request. Sorry about that!",
        error_type="server_error",
    )


def model_not_found(model: str) -> Reply:
    return error(404, f"The model `{model}` does not exist", code="model_not_found")


def replies(*answers: Reply) -> Script:
    """A script answering successive requests with ``answers`` in order."""
    pending = list(answers)
    total = len(pending)

    def script(request: Recorded) -> Reply:
        if not pending:
            raise AssertionError(f"fake_openai: script exhausted after {total} replies")
        return pending.pop(0)

    return script


def split(content: str, pieces: int) -> list[str]:
    """Cut ``content`` into ``pieces`` contiguous non-empty parts (fewer if it is shorter)."""
    n = max(1, min(pieces, len(content)))
    size, extra = divmod(len(content), n)
    parts: list[str] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(content[start:end])
        start = end
    return parts


async def settle_sdk_generators() -> None:
    """Wait out the ``aclose()`` tasks asyncio runs for async generators the SDK abandoned.

    When a stream fails outside the socket read (invalid JSON) or the consumer stops early,
    the SDK leaves its inner generators suspended; they are closed later by the garbage
    collector's finalizer hook, one task per generator. This collects and awaits them.
    """
    gc.collect()
    current = asyncio.current_task()
    while True:
        await asyncio.sleep(0)  # the finalizer hook creates its tasks via call_soon
        pending = [
            t
            for t in asyncio.all_tasks()
            if t is not current and type(t.get_coro()).__name__ == "async_generator_athrow"
        ]
        if not pending:
            return
        await asyncio.wait(pending)


def _no_script(request: Recorded) -> Reply:
    raise AssertionError(f"fake_openai: no script set for {request.path}")


# --- Responses API wire format ----------------------------------------------------------


def _responses_usage(u: Usage) -> Json:
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens,
    }


def _response(req: Recorded, n: int, status: str, output: list[Json], usage: Usage | None) -> Json:
    body = req.body
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "completed_at": CREATED if status == "completed" else None,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model", "fake-model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning", {"effort": None, "summary": None}),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text", {"format": {"type": "text"}}),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": None if usage is None else _responses_usage(usage),
        "user": None,
        "metadata": body.get("metadata", {}),
    }


def _responses_items(reply: Reply, n: int) -> list[tuple[Json, list[Json]]]:
    """Each output item when done, with the events that stream it (seq numbers added later)."""
    out: list[tuple[Json, list[Json]]] = []
    if reply.reasoning is not None:
        i = len(out)
        item_id = f"rs_{n}_{i}"
        ref = {"item_id": item_id, "output_index": i, "summary_index": 0}
        summary = {"type": "summary_text", "text": reply.reasoning}
        done = {"id": item_id, "type": "reasoning", "summary": [summary], "status": "completed"}
        events = [
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {**done, "summary": [], "status": "in_progress"},
            },
            {
                "type": "response.reasoning_summary_part.added",
                **ref,
                "part": {"type": "summary_text", "text": ""},
            },
            *(
                {"type": "response.reasoning_summary_text.delta", **ref, "delta": d}
                for d in split(reply.reasoning, reply.reasoning_pieces)
            ),
            {"type": "response.reasoning_summary_text.done", **ref, "text": reply.reasoning},
            {"type": "response.reasoning_summary_part.done", **ref, "part": summary},
            {"type": "response.output_item.done", "output_index": i, "item": done},
        ]
        out.append((done, events))
    if reply.text is not None:
        i = len(out)
        item_id = f"msg_{n}_{i}"
        ref = {"item_id": item_id, "output_index": i, "content_index": 0}
        text_part: Json = {
            "type": "output_text",
            "annotations": [],
            "logprobs": [],
            "text": reply.text,
        }
        done = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [text_part],
        }
        events = [
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {**done, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **ref, "part": {**text_part, "text": ""}},
            *(
                {"type": "response.output_text.delta", **ref, "delta": d, "logprobs": []}
                for d in split(reply.text, reply.text_pieces)
            ),
            {"type": "response.output_text.done", **ref, "text": reply.text, "logprobs": []},
            {"type": "response.content_part.done", **ref, "part": text_part},
            {"type": "response.output_item.done", "output_index": i, "item": done},
        ]
        out.append((done, events))
    for k, fc in enumerate(reply.calls):
        i = len(out)
        item_id = f"fc_{n}_{i}"
        ref = {"item_id": item_id, "output_index": i}
        done = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "name": fc.name,
            "call_id": fc.call_id or f"call_{n}_{k}",
            "arguments": fc.arguments,
        }
        events = [
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {**done, "status": "in_progress", "arguments": ""},
            },
            *(
                {"type": "response.function_call_arguments.delta", **ref, "delta": d}
                for d in split(fc.arguments, fc.pieces)
            ),
            {"type": "response.function_call_arguments.done", **ref, "arguments": fc.arguments},
            {"type": "response.output_item.done", "output_index": i, "item": done},
        ]
        out.append((done, events))
    return out


def _responses_body(reply: Reply, req: Recorded, n: int) -> Json:
    output = [done for done, _ in _responses_items(reply, n)]
    return _response(req, n, "completed", output, reply.usage)


def _responses_frames(reply: Reply, req: Recorded, n: int) -> list[bytes]:
    items = _responses_items(reply, n)
    events: list[Json] = [
        {"type": "response.created", "response": _response(req, n, "in_progress", [], None)},
        {"type": "response.in_progress", "response": _response(req, n, "in_progress", [], None)},
    ]
    for _, item_events in items:
        events.extend(item_events)
    output = [done for done, _ in items]
    events.append(
        {
            "type": "response.completed",
            "response": _response(req, n, "completed", output, reply.usage),
        }
    )
    return [
        _sse({**event, "sequence_number": seq}, event=event["type"])
        for seq, event in enumerate(events)
    ]


# --- Chat Completions wire format -------------------------------------------------------


def _chat_usage(u: Usage | None) -> Json | None:
    if u is None:
        return None
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": u.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_body(reply: Reply, req: Recorded, n: int, reasoning_field: str) -> Json:
    message: Json = {"role": "assistant", "content": reply.text, "refusal": None, "annotations": []}
    if reply.reasoning is not None:
        message[reasoning_field] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": fc.call_id or f"call_{n}_{k}",
                "type": "function",
                "function": {"name": fc.name, "arguments": fc.arguments},
            }
            for k, fc in enumerate(reply.calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": CREATED,
        "model": req.body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": _chat_usage(reply.usage),
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _chat_frames(reply: Reply, req: Recorded, n: int, reasoning_field: str) -> list[bytes]:
    options = req.body.get("stream_options") or {}
    with_usage = bool(options.get("include_usage"))
    deltas: list[Json] = [
        {"role": "assistant", "content": "" if reply.text is not None else None, "refusal": None},
    ]
    if reply.reasoning is not None:
        deltas += [{reasoning_field: d} for d in split(reply.reasoning, reply.reasoning_pieces)]
    if reply.text is not None:
        deltas += [{"content": d} for d in split(reply.text, reply.text_pieces)]
    for k, fc in enumerate(reply.calls):
        first = {
            "index": k,
            "id": fc.call_id or f"call_{n}_{k}",
            "type": "function",
            "function": {"name": fc.name, "arguments": ""},
        }
        deltas.append({"tool_calls": [first]})
        deltas += [
            {"tool_calls": [{"index": k, "function": {"arguments": d}}]}
            for d in split(fc.arguments, fc.pieces)
        ]

    def chunk(choices: list[Json], usage: Json | None = None) -> bytes:
        body: Json = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": req.body.get("model", "fake-model"),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }
        if with_usage:
            body["usage"] = usage
        return _sse(body)

    finish = "tool_calls" if reply.calls else "stop"
    frames = [
        chunk([{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]) for d in deltas
    ]
    frames.append(chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]))
    if with_usage and reply.usage is not None:
        frames.append(chunk([], _chat_usage(reply.usage)))
    frames.append(b"data: [DONE]\n\n")
    return frames


# --- the server -------------------------------------------------------------------------


def _sse(data: Json, *, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


_BAD_JSON_FRAME = b'data: {"broken": \n\n'


class FakeOpenAI:
    """The server. ``base_url`` is valid between ``start()`` and ``stop()``."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        chat_reasoning_field: str = "reasoning_content",
        apis: tuple[Literal["responses", "chat"], ...] = ("responses", "chat"),
    ) -> None:
        """``apis``: the wire APIs served; any other path answers 404, as OpenAI does for
        an unknown URL (``("chat",)`` is a chat-only server: Ollama, vLLM, llama.cpp)."""
        self.script: Script = script or _no_script
        self.apis = apis
        self.chat_reasoning_field = chat_reasoning_field
        self.requests: list[Recorded] = []
        self.unknown: list[str] = []
        """Requests for a path not served, as "METHOD /path"; they answered 404."""
        self.disconnects = 0
        """Requests the client abandoned before the server had finished answering."""
        self.completed = 0
        """Replies the server sent in full."""
        self.script_errors: list[BaseException] = []
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()

    @property
    def base_url(self) -> str:
        assert self._runner is not None, "FakeOpenAI is not started"
        return f"http://127.0.0.1:{self._port}/v1"

    def reply_with(self, *answers: Reply) -> None:
        """Answer the next requests with ``answers``, in order."""
        self.script = replies(*answers)

    async def wait_for_disconnects(self, count: int = 1, timeout: float = 1.0) -> None:
        """Wait until at least ``count`` disconnects are recorded."""
        async with asyncio.timeout(timeout):
            while self.disconnects < count:
                self._changed.clear()
                await self._changed.wait()

    async def start(self) -> None:
        app = web.Application()
        for api in self.apis:
            path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
            app.router.add_post(path, self._handle)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        # handler_cancellation: a client that goes away cancels its handler, which is how
        # a stalled stream learns it was abandoned.
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def stop(self) -> None:
        """Release stalled replies, close every connection and the listening socket."""
        self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _disconnected(self) -> None:
        if not self._stopping.is_set():
            self.disconnects += 1
            self._changed.set()

    async def _unknown(self, request: web.Request) -> web.Response:
        self.unknown.append(f"{request.method} {request.path}")
        message = f"Invalid URL ({request.method} {request.path})"
        body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
        return web.json_response(body, status=404)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        peer = request.transport.get_extra_info("peername") if request.transport else None
        port = peer[1] if isinstance(peer, tuple) else 0
        rec = Recorded(request.path, body if isinstance(body, dict) else {}, headers, port)
        self.requests.append(rec)
        n = len(self.requests)
        try:
            result = self.script(rec)
            reply = await result if inspect.isawaitable(result) else result
        except Exception as exc:
            self.script_errors.append(exc)
            message = f"fake_openai script failed: {exc!r}"
            return web.json_response(
                {
                    "error": {
                        "message": message,
                        "type": "fake_openai_script_error",
                        "param": None,
                        "code": None,
                    }
                },
                status=500,
                headers={"x-should-retry": "false"},  # the SDK must not call the script again
            )
        request_id = {"x-request-id": f"req_{n}"}
        if reply.status != 200:
            return web.json_response(
                reply.error or {}, status=reply.status, headers={**request_id, **reply.headers}
            )
        if rec.stream:
            if reply.frames is not None:
                frames = list(reply.frames)
            elif rec.api == "chat":
                frames = _chat_frames(reply, rec, n, self.chat_reasoning_field)
            else:
                frames = _responses_frames(reply, rec, n)
            return await self._stream(request, frames, reply, request_id)
        if rec.api == "chat":
            payload = _chat_body(reply, rec, n, self.chat_reasoning_field)
        else:
            payload = _responses_body(reply, rec, n)
        return await self._whole(request, payload, reply, request_id)

    async def _whole(
        self, request: web.Request, payload: Json, reply: Reply, headers: dict[str, str]
    ) -> web.StreamResponse:
        fault = reply.fault
        if fault is None:
            self.completed += 1
            return web.json_response(payload, headers={**headers, **reply.headers})
        if fault.kind == "bad_json":
            self.completed += 1
            return web.Response(
                body=b'{"id": "broken", "object": ',
                content_type="application/json",
                headers={**headers, **reply.headers},
            )
        if fault.kind == "drop":
            _close(request)
            return web.Response()
        try:
            await self._stopping.wait()
        except asyncio.CancelledError:
            self._disconnected()
            raise
        return web.json_response(payload, headers={**headers, **reply.headers})

    async def _stream(
        self, request: web.Request, frames: list[bytes], reply: Reply, headers: dict[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                **headers,
                **reply.headers,
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        fault = reply.fault
        finished = False
        try:
            await response.prepare(request)
            for i, frame in enumerate(frames):
                if fault is not None and i == fault.after:
                    if fault.kind == "drop":
                        finished = True
                        _close(request)
                        return response
                    if fault.kind == "stall":
                        await self._stopping.wait()
                        finished = True
                        return response
                    await response.write(_BAD_JSON_FRAME)
                await response.write(frame)
            if fault is not None and fault.kind == "stall" and fault.after >= len(frames):
                await self._stopping.wait()  # all sent; the body never ends
                finished = True
                return response
            finished = True
            self.completed += 1
        except ConnectionError:
            self._disconnected()
        except asyncio.CancelledError:
            if not finished:
                self._disconnected()
            raise
        return response


def _close(request: web.Request) -> None:
    """Close the socket after what is already written, leaving the HTTP body unfinished."""
    if request.transport is not None:
        request.transport.close()


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A started ``FakeOpenAI``; fails the test if its script raised."""
    async with FakeOpenAI() as fake:
        yield fake
    assert not fake.script_errors, f"fake_openai script raised: {fake.script_errors}"
