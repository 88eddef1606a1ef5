"""The fake OpenAI server, driven by a bare ``AsyncOpenAI`` over a real socket."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import openai
import pytest
from fake_openai import (
    CREATED,
    FakeOpenAI,
    Recorded,
    Reply,
    call,
    calls,
    fake_openai,
    model_not_found,
    rate_limited,
    raw,
    server_error,
    settle_sdk_generators,
    split,
    text,
)
from openai import AsyncOpenAI

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

Api = Literal["responses", "chat"]
APIS: list[Api] = ["responses", "chat"]
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def client(fake_openai: FakeOpenAI) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0) as c:
        yield c


async def create(client: AsyncOpenAI, api: Api, *, stream: bool, **extra: Any) -> Any:
    """One request to ``api`` with the smallest valid body."""
    if api == "responses":
        return await client.responses.create(model="m", input="hi", stream=stream, **extra)
    messages: Any = MESSAGES
    return await client.chat.completions.create(
        model="m", messages=messages, stream=stream, **extra
    )


async def drain(stream: Any) -> list[Any]:
    return [event async for event in stream]


def test_split_is_contiguous_and_bounded() -> None:
    assert split("abcdefg", 3) == ["abc", "de", "fg"]
    assert split("ab", 5) == ["a", "b"]
    assert split("", 4) == [""]
    assert "".join(split("héllo wörld", 4)) == "héllo wörld"


# --- Responses API ----------------------------------------------------------------------


async def test_responses_stream_text(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(text("Hello, streaming world", pieces=4).with_usage(21, 4))
    events = await drain(await create(client, "responses", stream=True))

    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 4,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len({(e.item_id, e.output_index, e.content_index) for e in deltas}) == 1
    assert "".join(e.delta for e in deltas) == "Hello, streaming world"
    final = events[-1].response
    assert final.status == "completed"
    assert final.output_text == "Hello, streaming world"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (21, 4)
    assert final.usage.total_tokens == 25
    assert events[0].response.output == [] and events[0].response.usage is None
    assert fake_openai.requests[0].path == "/v1/responses"
    assert fake_openai.requests[0].stream
    assert fake_openai.completed == 1


async def test_responses_text_not_streamed(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(text("plain answer").with_usage(7, 2, reasoning=1, cached=3))
    response = await create(client, "responses", stream=False)

    assert response.output_text == "plain answer"
    assert response.status == "completed"
    assert response.model == "m"
    assert response.created_at == CREATED
    assert response.usage.output_tokens_details.reasoning_tokens == 1
    assert response.usage.input_tokens_details.cached_tokens == 3
    assert not fake_openai.requests[0].stream


async def test_responses_parallel_calls_streamed(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    first = {"path": "/tmp/a b.txt", "lines": [1, 2, 3], "nested": {"q": '"quoted"'}}
    second = {"query": "ünïcode ✓", "limit": 10}
    fake_openai.reply_with(
        calls(call("read", first, pieces=7), call("search", second, pieces=9, call_id="call_S"))
    )
    events = await drain(await create(client, "responses", stream=True))

    added = {e.output_index: e.item for e in events if e.type == "response.output_item.added"}
    assert [(item.type, item.name, item.arguments) for item in added.values()] == [
        ("function_call", "read", ""),
        ("function_call", "search", ""),
    ]
    pieces: dict[str, list[str]] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            pieces.setdefault(e.item_id, []).append(e.delta)
    assert [len(p) for p in pieces.values()] == [7, 9]
    assert [json.loads("".join(p)) for p in pieces.values()] == [first, second]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(e.arguments) for e in done] == [first, second]
    output = events[-1].response.output
    assert [o.call_id for o in output] == ["call_1_0", "call_S"]
    assert [o.id for o in output] == list(pieces)
    assert [json.loads(o.arguments) for o in output] == [first, second]


async def test_responses_calls_not_streamed(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(calls(call("a", {"x": 1}), call("b", '{"y": [2]}')))
    response = await create(client, "responses", stream=False)

    assert [(o.type, o.name, json.loads(o.arguments)) for o in response.output] == [
        ("function_call", "a", {"x": 1}),
        ("function_call", "b", {"y": [2]}),
    ]
    assert response.output_text == ""


async def test_responses_reasoning_summary(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    reply = calls(call("go", {}), text="On it.").with_reasoning("Let me think.", pieces=3)
    fake_openai.reply_with(reply, reply)
    events = await drain(await create(client, "responses", stream=True))

    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert deltas == split("Let me think.", 3)
    output = events[-1].response.output
    assert [o.type for o in output] == ["reasoning", "message", "function_call"]
    assert output[0].summary[0].text == "Let me think."
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1, 2]

    whole = await create(client, "responses", stream=False)
    assert whole.output[0].summary[0].text == "Let me think."
    assert whole.output_text == "On it."


async def test_responses_stream_helper_accepts_events(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    """The SDK's stateful ``responses.stream`` accumulator checks ordering and identities."""
    fake_openai.reply_with(
        calls(call("f", {"k": "v"}), text="done", text_pieces=3).with_reasoning("hmm")
    )
    async with client.responses.stream(model="m", input="hi") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()

    assert "response.output_text.delta" in kinds
    assert final.output_text == "done"
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.usage is not None and final.usage.total_tokens == 15


# --- Chat Completions -------------------------------------------------------------------


async def test_chat_stream_text_with_usage(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(text("Hi there, friend", pieces=5).with_usage(30, 6))
    chunks = await drain(
        await create(client, "chat", stream=True, stream_options={"include_usage": True})
    )

    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.id for c in chunks} == {"chatcmpl-1"}
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks if c.choices]
    assert "".join(p for p in content if p) == "Hi there, friend"
    assert len([p for p in content if p]) == 5
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (30, 6)
    assert last.usage.total_tokens == 36
    assert fake_openai.requests[0].path == "/v1/chat/completions"


async def test_chat_stream_without_usage(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(text("no usage"))
    chunks = await drain(await create(client, "chat", stream=True))

    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_chat_text_not_streamed(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(text("whole").with_usage(3, 1))
    completion = await create(client, "chat", stream=False)

    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("whole", "stop")
    assert choice.message.tool_calls is None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 1)


async def test_chat_parallel_tool_calls_streamed(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    first = {"cmd": ["ls", "-la"], "cwd": "/"}
    second = {"text": 'a "quoted" ünïcode string', "n": 3.5}
    fake_openai.reply_with(calls(call("shell", first, pieces=6), call("echo", second, pieces=11)))
    chunks = await drain(await create(client, "chat", stream=True))

    assembled: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for tc in chunk.choices[0].delta.tool_calls or []:
            slot = assembled.setdefault(tc.index, {"id": None, "name": None, "args": []})
            if tc.id is not None:
                assert slot["id"] is None, "id must come in the first piece only"
                slot["id"], slot["name"] = tc.id, tc.function.name
                assert tc.type == "function"
            else:
                assert tc.function.name is None and tc.type is None
            slot["args"].append(tc.function.arguments)
    assert [(s["id"], s["name"]) for s in assembled.values()] == [
        ("call_1_0", "shell"),
        ("call_1_1", "echo"),
    ]
    assert [len(s["args"]) for s in assembled.values()] == [7, 12]  # "" in the first piece
    assert [json.loads("".join(s["args"])) for s in assembled.values()] == [first, second]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_chat_tool_calls_not_streamed(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.reply_with(calls(call("a", {"x": 1}, call_id="call_A"), call("b", {})))
    completion = await create(client, "chat", stream=False)

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert [(t.id, t.function.name, t.function.arguments) for t in choice.message.tool_calls] == [
        ("call_A", "a", '{"x": 1}'),
        ("call_1_1", "b", "{}"),
    ]


async def test_chat_reasoning_content(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    reply = text("42").with_reasoning("Six times seven.", pieces=4)
    fake_openai.reply_with(reply, reply)
    chunks = await drain(await create(client, "chat", stream=True))

    reasoning = [getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks]
    assert [r for r in reasoning if r] == split("Six times seven.", 4)
    whole = await create(client, "chat", stream=False)
    assert whole.choices[0].message.reasoning_content == "Six times seven."


async def test_chat_stream_helper_accepts_chunks(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    """The SDK's ``chat.completions.stream`` accumulator rebuilds the whole message."""
    fake_openai.reply_with(calls(call("f", {"k": [1, 2]}), text="calling", text_pieces=2))
    messages: Any = MESSAGES
    async with client.chat.completions.stream(
        model="m", messages=messages, stream_options={"include_usage": True}
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()

    message = final.choices[0].message
    assert message.content == "calling"
    assert message.tool_calls is not None
    assert json.loads(message.tool_calls[0].function.arguments) == {"k": [1, 2]}
    assert final.usage is not None and final.usage.total_tokens == 15


# --- strict shapes ----------------------------------------------------------------------


def strictly(model: Any) -> None:
    """Re-validate what the SDK built leniently against its own type, with every field."""
    type(model).model_validate(model.to_dict(), strict=True)


async def test_every_shape_passes_the_sdks_strict_validation(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    everything = calls(call("f", {"a": 1}), call("g", {}), text="t", text_pieces=2)
    fake_openai.reply_with(*[everything.with_reasoning("r", pieces=2)] * 4)

    events = await drain(await create(client, "responses", stream=True))
    chunks = await drain(
        await create(client, "chat", stream=True, stream_options={"include_usage": True})
    )
    whole = [
        await create(client, "responses", stream=False),
        await create(client, "chat", stream=False),
    ]

    assert len({e.type for e in events}) == 15
    for model in [*events, *chunks, *whole]:
        strictly(model)
    parts = [e.part for e in events if e.type.startswith("response.reasoning_summary_part.")]
    assert [(p.type, p.text) for p in parts] == [("summary_text", ""), ("summary_text", "r")]


# --- scripting --------------------------------------------------------------------------


async def test_script_sees_request_and_may_be_async(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    async def script(request: Recorded) -> Reply:
        await asyncio.sleep(0)
        return text(f"{request.api}:{request.body['model']}:{request.stream}")

    fake_openai.script = script
    response = await create(client, "responses", stream=False)
    completion = await create(client, "chat", stream=False)

    assert response.output_text == "responses:m:False"
    assert completion.choices[0].message.content == "chat:m:False"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer test"
    assert fake_openai.requests[1].body["messages"] == MESSAGES


async def test_script_failure_is_a_500_and_recorded(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.reply_with(text("only one"))
    await create(client, "chat", stream=False)
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        await create(client.with_options(max_retries=2), "chat", stream=False)

    assert len(fake_openai.requests) == 2  # x-should-retry: false stops the SDK retrying
    assert len(fake_openai.script_errors) == 1
    fake_openai.script_errors.clear()  # the fixture fails a test whose script raised


async def test_unknown_path_is_404(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="Invalid URL"):
        await client.embeddings.create(model="m", input="x")


# --- HTTP errors ------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [True, False])
async def test_rate_limit_then_success_is_retried(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api, stream: bool
) -> None:
    fake_openai.reply_with(rate_limited(retry_after=0.02), text("after retry"))
    started = time.monotonic()
    result = await create(client.with_options(max_retries=1), api, stream=stream)
    if stream:
        await drain(result)

    assert time.monotonic() - started >= 0.015  # Retry-After was honoured
    assert [r.headers["x-stainless-retry-count"] for r in fake_openai.requests] == ["0", "1"]
    assert fake_openai.completed == 1


@pytest.mark.parametrize("api", APIS)
async def test_rate_limit_without_retries_raises(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(rate_limited(retry_after=3))
    with pytest.raises(openai.RateLimitError) as caught:
        await create(client, api, stream=True)

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize("api", APIS)
async def test_model_not_found(fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api) -> None:
    fake_openai.reply_with(model_not_found("x"))
    with pytest.raises(openai.NotFoundError) as caught:
        await create(client, api, stream=True)

    error = caught.value
    assert error.status_code == 404
    assert error.code == "model_not_found"
    assert error.type == "invalid_request_error"
    assert error.body == {
        "message": "The model `x` does not exist",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }


@pytest.mark.parametrize("api", APIS)
async def test_server_error(fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api) -> None:
    fake_openai.reply_with(server_error())
    with pytest.raises(openai.InternalServerError) as caught:
        await create(client, api, stream=False)

    assert caught.value.status_code == 500
    assert caught.value.response.headers["x-request-id"] == "req_1"


# --- broken streams ---------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_dropped_stream_raises_while_iterating(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(text("never finished", pieces=6).drop_after(4), text("unused"))
    stream = await create(client.with_options(max_retries=1), api, stream=True)
    seen: list[Any] = []
    with pytest.raises(openai.APIConnectionError) as caught:
        async for event in stream:
            seen.append(event)

    assert len(seen) == 4
    assert "incomplete chunked read" in str(caught.value.__cause__)
    assert len(fake_openai.requests) == 1  # a stream broken mid-body is never retried
    assert fake_openai.disconnects == 0 and fake_openai.completed == 0


@pytest.mark.parametrize("api", APIS)
async def test_dropped_connection_before_headers_is_retried(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(text("lost").drop_after(0), text("second try"))
    result = await create(client.with_options(max_retries=1), api, stream=False)

    assert len(fake_openai.requests) == 2
    if api == "chat":
        assert result.choices[0].message.content == "second try"
    else:
        assert result.output_text == "second try"


@pytest.mark.parametrize("api", APIS)
async def test_stall_is_cut_by_client_timeout_and_seen_as_disconnect(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(text("stuck", pieces=3).stall_after(3))
    stream = await create(client, api, stream=True)
    seen: list[Any] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            async for event in stream:
                seen.append(event)
    await stream.close()

    assert len(seen) == 3
    await fake_openai.wait_for_disconnects(1)
    assert fake_openai.disconnects == 1
    assert fake_openai.completed == 0


@pytest.mark.parametrize("api", APIS)
async def test_client_closing_stream_early_is_a_disconnect(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(text("more to come", pieces=4).stall_after(3))
    stream = await create(client, api, stream=True)
    async for event in stream:
        if event is not None:
            break
    await stream.close()

    await fake_openai.wait_for_disconnects(1)
    await settle_sdk_generators()
    assert fake_openai.completed == 0


async def test_stall_not_streamed_is_cut_by_sdk_timeout(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.reply_with(text("stuck").stall_after(0))
    with pytest.raises(openai.APITimeoutError):
        await create(client.with_options(timeout=0.2), "responses", stream=False)

    await fake_openai.wait_for_disconnects(1)


@pytest.mark.parametrize("api", APIS)
async def test_bad_json_chunk_raises_while_iterating(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api
) -> None:
    fake_openai.reply_with(text("half good", pieces=4).bad_json_after(2))
    stream = await create(client, api, stream=True)
    seen: list[Any] = []
    with pytest.raises(json.JSONDecodeError):  # raw, not wrapped in an openai error
        async for event in stream:
            seen.append(event)
    await settle_sdk_generators()

    assert len(seen) == 2


@pytest.mark.parametrize("api", APIS)
async def test_bad_json_body_raises(fake_openai: FakeOpenAI, client: AsyncOpenAI, api: Api) -> None:
    fake_openai.reply_with(text("x").bad_json_after(0))
    with pytest.raises(json.JSONDecodeError):
        await create(client, api, stream=False)


@pytest.mark.parametrize("api", APIS)
async def test_stream_ended_by_server_shutdown_ends_quietly(api: Api) -> None:
    """A body that ends cleanly without ``[DONE]`` / ``response.completed`` is no SDK error."""
    async with (
        FakeOpenAI(lambda _: text("cut short", pieces=3).stall_after(2)) as fake,
        AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as client,
    ):
        stream = await create(client, api, stream=True)
        first = await stream.__anext__()
        started = time.monotonic()
        await fake.stop()
        assert time.monotonic() - started < 0.5
        rest = await drain(stream)

    assert len([first, *rest]) == 2
    assert fake.disconnects == 0


async def test_raw_frames_are_sent_verbatim_then_held_open(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    """``raw(...).stall_after(len(frames))``: every frame arrives, the body never ends."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": CREATED, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    fake_openai.reply_with(raw(chunk).stall_after(1))
    stream = await create(client, "chat", stream=True)
    first = await stream.__anext__()
    with pytest.raises(TimeoutError):  # neither [DONE] nor the end of the body comes
        async with asyncio.timeout(0.3):
            await drain(stream)
    await stream.close()

    assert first.choices[0].delta.content == "hi"
    await fake_openai.wait_for_disconnects(1)
    assert fake_openai.completed == 0


async def test_a_chat_only_server_answers_responses_with_404() -> None:
    async with (
        FakeOpenAI(lambda _: text("ok"), apis=("chat",)) as fake,
        AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as client,
    ):
        with pytest.raises(openai.NotFoundError, match="Invalid URL"):
            await create(client, "responses", stream=True)
        answer = await create(client, "chat", stream=False)

    assert answer.choices[0].message.content == "ok"
    assert fake.unknown == ["POST /v1/responses"]
    assert [r.api for r in fake.requests] == ["chat"]
