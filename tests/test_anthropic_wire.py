"""The `anthropic` wire (DESIGN 3.14) through the real `anthropic` SDK against the loopback
Messages API fake (tests/fake_anthropic.py): what goes over the wire, what comes back as our
items and usage, and every way a server can fail. Nothing is monkeypatched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic", reason="pip install 'subsessions[anthropic]'")

from fake_anthropic import (  # noqa: E402
    Failure,
    FakeAnthropic,
    Frames,
    Recorded,
    Turn,
    overloaded,
    rate_limited,
    sse,
)

from subsessions.errors import MalformedStream, ModelError  # noqa: E402
from subsessions.items import (  # noqa: E402
    assistant_message,
    function_call,
    function_call_output,
    user_message,
)
from subsessions.models.anthropic_wire import AnthropicModel  # noqa: E402
from subsessions.models.base import ModelRequest, TokenUsage  # noqa: E402
from subsessions.models.openai_common import RetryPolicy  # noqa: E402

ADD = {"type": "function", "name": "add", "description": "Adds.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}
MUL = {**ADD, "name": "mul", "description": "Multiplies."}
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+" * 3


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server
    assert not server.script_errors


def client_for(fake: FakeAnthropic, **options: Any) -> AnthropicModel:
    retry = options.pop("retry", RetryPolicy(max_retries=2, base_delay=0.001))
    return AnthropicModel(
        anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="sk-test", max_retries=0),
        provider="claude", retry=retry, stream_idle_timeout=options.pop("idle", 5.0), **options)


async def ask(fake: FakeAnthropic, *items: dict[str, Any], tools: tuple[Any, ...] = (ADD, MUL),
              choice: str = "auto", fallback: tuple[str, ...] = (), **options: Any) -> Any:
    client = client_for(fake, **options)
    try:
        return await client.respond(ModelRequest(
            session_id="s", model="claude-test", instructions="Be brief.",
            items=items or (user_message("hi"),), tools=tools, tool_choice=choice,
            fallback_models=fallback))
    finally:
        await client.aclose()


HISTORY = (
    user_message("add 1"),
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "I add."}],
     "encrypted_content": SIGNATURE, "anthropic_block": "thinking"},
    {"type": "reasoning", "summary": [], "encrypted_content": "opaque==",
     "anthropic_block": "redacted_thinking"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "an OpenAI thought"}]},
    function_call("add", '{"a": 1}', "toolu_1"),
    function_call("mul", "not json", "toolu_2"),
    function_call_output("toolu_1", "2", True),
    function_call_output("toolu_2", "bad arguments", False),
)


# -- the request ----------------------------------------------------------------------------
async def test_the_request_has_system_tools_max_tokens_and_cache_marks(
    fake: FakeAnthropic,
) -> None:
    await ask(fake, *HISTORY)
    [request] = fake.requests
    body = request.body
    assert request.api_key == "sk-test"
    assert body["stream"] is True and body["max_tokens"] == 8192
    assert body["system"] == [{"type": "text", "text": "Be brief.",
                               "cache_control": {"type": "ephemeral"}}]
    assert body["tools"] == [
        {"name": "add", "description": "Adds.", "input_schema": ADD["parameters"]},
        {"name": "mul", "description": "Multiplies.", "input_schema": ADD["parameters"],
         "cache_control": {"type": "ephemeral"}},
    ]
    assert body["tool_choice"] == {"type": "auto"}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "add 1"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I add.", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
            {"type": "tool_use", "id": "toolu_2", "name": "mul", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad arguments",
             "is_error": True, "cache_control": {"type": "ephemeral"}},
        ]},
    ]


async def test_prompt_cache_off_sends_no_marks_but_the_same_blocks(fake: FakeAnthropic) -> None:
    await ask(fake, *HISTORY, prompt_cache=False, max_output_tokens=100)
    body = fake.requests[0].body
    assert "cache_control" not in json.dumps(body)
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["messages"][-1]["content"][-1]["type"] == "tool_result"
    assert body["max_tokens"] == 100


@pytest.mark.parametrize(("ours", "theirs"), [
    ("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}),
    ("mul", {"type": "tool", "name": "mul"})])
async def test_tool_choice_maps(fake: FakeAnthropic, ours: str, theirs: dict[str, str]) -> None:
    await ask(fake, choice=ours)
    assert fake.requests[0].body["tool_choice"] == theirs


async def test_no_tools_no_tool_fields_and_a_steer_after_outputs_follows_them(
    fake: FakeAnthropic,
) -> None:
    dangling = function_call("add", "{}", "toolu_9")  # cancelled: no output, not sent
    await ask(fake, user_message("a"), dangling, user_message("b"), tools=())
    body = fake.requests[0].body
    assert "tools" not in body and "tool_choice" not in body
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]}]


# -- the answer -----------------------------------------------------------------------------
THOUGHT = {"type": "thinking", "thinking": "Let me add these.", "signature": SIGNATURE}
HIDDEN = {"type": "redacted_thinking", "data": "c2VjcmV0"}


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
async def test_thinking_text_and_calls_come_back_as_items_and_go_back_unchanged(
    fake: FakeAnthropic, stream: bool,
) -> None:
    fake.reply_with(Turn(text="Adding.", calls=(("add", {"a": 1}), ("mul", {"a": 2})),
                         thinking=(THOUGHT, HIDDEN), pieces=5, cache_read=100, cache_write=7),
                    Turn(text="3"))
    response = await ask(fake, stream=stream)
    reasoning, hidden, message, add, mul = response.output
    assert reasoning == {"type": "reasoning", "anthropic_block": "thinking",
                         "summary": [{"type": "summary_text", "text": "Let me add these."}],
                         "encrypted_content": SIGNATURE}
    assert hidden["encrypted_content"] == "c2VjcmV0"
    assert message["content"][0]["text"] == "Adding."
    assert (add["name"], json.loads(add["arguments"])) == ("add", {"a": 1})
    assert (mul["name"], json.loads(mul["arguments"])) == ("mul", {"a": 2})
    assert response.usage == TokenUsage(input_tokens=117, output_tokens=5,
                                        cached_input_tokens=100)
    assert ("stream" in fake.requests[0].body) is stream
    outputs = (function_call_output(add["call_id"], "1", True),
               function_call_output(mul["call_id"], "2", True))
    await ask(fake, user_message("hi"), *response.output, *outputs)
    sent = fake.requests[1].body["messages"][1]["content"]
    assert sent[:2] == [THOUGHT, HIDDEN]
    assert [b["type"] for b in sent[2:]] == ["text", "tool_use", "tool_use"]


async def test_max_tokens_without_a_complete_call_fails_the_task(fake: FakeAnthropic) -> None:
    fake.reply_with(Turn(text="Once upon a", stop_reason="max_tokens"))
    with pytest.raises(ModelError, match=r"^model output cut at max_tokens \(8192\)$"):
        await ask(fake)
    assert len(fake.requests) == 1  # not retried


def cut_frames() -> Frames:
    """A complete call, then a second cut at max_tokens (its block never stops)."""
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1}}}
    frames = [sse("message_start", start)]
    for index, name in enumerate(("add", "mul")):
        frames.append(sse("content_block_start", {
            "type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}}))
        frames.append(sse("content_block_delta", {
            "type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": 1' if index else
                      '{"a": 1}'}}))
        if index == 0:
            frames.append(sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    frames.append(sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": "max_tokens", "stop_sequence": None}, "usage": {"output_tokens": 9}}))
    frames.append(sse("message_stop", {"type": "message_stop"}))
    return Frames(tuple(frames))


async def test_max_tokens_keeps_the_complete_calls(fake: FakeAnthropic) -> None:
    fake.reply_with(cut_frames())
    response = await ask(fake)
    [call] = response.output
    assert (call["name"], call["arguments"], call["call_id"]) == ("add", '{"a": 1}', "toolu_0")
    assert response.usage == TokenUsage(3, 9)


async def test_a_refusal_fails_with_the_models_text(fake: FakeAnthropic) -> None:
    fake.reply_with(Turn(text="I can't help with that.", stop_reason="refusal"))
    with pytest.raises(ModelError, match=r"^refusal: I can't help with that\.$"):
        await ask(fake)


@pytest.mark.parametrize("counts", [
    {"input_tokens": "ten"}, {"output_tokens": -1}, {"input_tokens": 2**70},
    {"cache_read": 1.5}, {"cache_write": -5}, {"input_tokens": None}])
async def test_usage_that_is_not_counts_is_estimated(fake: FakeAnthropic,
                                                     counts: dict[str, Any]) -> None:
    fake.reply_with(Turn(text="fine", **counts))
    response = await ask(fake)
    assert response.output[0]["content"][0]["text"] == "fine"
    assert response.usage.estimated and response.usage.input_tokens > 0


# -- failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("failure", [rate_limited(), overloaded(),
                                     Failure(500, "api_error", "Internal server error")],
                         ids=["429", "529", "500"])
async def test_retried_statuses_honour_retry_after(fake: FakeAnthropic, failure: Failure) -> None:
    fake.reply_with(failure, Turn(text="after"))
    slow_backoff = RetryPolicy(max_retries=2, base_delay=0.001)
    if failure.headers:  # retry-after (0.01 s) is waited, not a 30 s backoff
        slow_backoff = RetryPolicy(max_retries=2, base_delay=30.0)
    response = await ask(fake, retry=slow_backoff)
    assert response.output[0]["content"][0]["text"] == "after"
    assert len(fake.requests) == 2


async def test_an_overloaded_event_inside_a_200_stream_is_retried(fake: FakeAnthropic) -> None:
    fake.reply_with(Turn(text="lost", fault="overloaded", after=3), Turn(text="kept"))
    response = await ask(fake)
    assert response.output[0]["content"][0]["text"] == "kept"
    assert len(fake.requests) == 2


async def test_giving_up_says_so_in_one_line(fake: FakeAnthropic) -> None:
    fake.reply_with(*[overloaded()] * 3)
    with pytest.raises(ModelError) as raised:
        await ask(fake)
    text = str(raised.value)
    assert text == (f"claude at {fake.base_url} returned HTTP 529 overloaded_error: "
                    "Overloaded (gave up after 3 attempts)")


@pytest.mark.parametrize(("status", "kind", "message"), [
    (400, "invalid_request_error", "messages.1.content.0: unexpected `tool_use_id`"),
    (401, "authentication_error", "invalid x-api-key"),
    (403, "permission_error", "Your API key does not have permission\nto use this"),
])
async def test_a_client_error_is_one_line_naming_provider_status_type_and_message(
    fake: FakeAnthropic, status: int, kind: str, message: str,
) -> None:
    fake.reply_with(Failure(status, kind, message))
    with pytest.raises(ModelError) as raised:
        await ask(fake)
    one = " ".join(message.split())
    assert str(raised.value) == f"claude at {fake.base_url} returned HTTP {status} {kind}: {one}"
    assert len(fake.requests) == 1


async def test_a_missing_model_falls_back(fake: FakeAnthropic) -> None:
    def script(request: Recorded) -> Turn | Failure:
        if request.body["model"] == "claude-test":
            return Failure(404, "not_found_error", "model: claude-test")
        return Turn(text=request.body["model"])

    fake.script = script
    response = await ask(fake, fallback=("claude-other",))
    assert (response.model, response.output[0]["content"][0]["text"]) == (
        "claude-other", "claude-other")


@pytest.mark.parametrize("body", [b"<html>Bad Gateway</html>", b"{" * 5000, b"x" * 100_000])
async def test_an_error_body_that_is_not_the_apis_is_still_one_bounded_line(
    fake: FakeAnthropic, body: bytes,
) -> None:
    fake.reply_with(Failure(418, body=body))
    with pytest.raises(ModelError) as raised:
        await ask(fake)
    text = str(raised.value)
    assert "\n" not in text and len(text) < 700 and "HTTP 418" in text


async def test_a_stream_cut_mid_tool_call_is_asked_again(fake: FakeAnthropic) -> None:
    answer = Turn(calls=(("add", {"a": 1}),), pieces=4)
    fake.reply_with(Turn(calls=(("add", {"a": 1}),), pieces=4, fault="drop", after=5), answer)
    response = await ask(fake)
    [call] = response.output
    assert json.loads(call["arguments"]) == {"a": 1}
    assert len(fake.requests) == 2


async def test_a_stream_that_ends_early_every_time_gives_up(fake: FakeAnthropic) -> None:
    fake.reply_with(*[Frames((sse("ping", {"type": "ping"}), b"garbage\n\n"))] * 3)
    with pytest.raises(ModelError, match="ended the stream before message_stop"):
        await ask(fake)


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
async def test_bad_json_is_malformed_and_not_retried(fake: FakeAnthropic, stream: bool) -> None:
    fake.reply_with(Turn(text="x", fault="bad_json", after=2))
    with pytest.raises(MalformedStream, match="malformed response from claude"):
        await ask(fake, stream=stream)
    assert len(fake.requests) == 1


async def test_a_delta_for_a_block_never_started_is_malformed(fake: FakeAnthropic) -> None:
    fake.reply_with(Frames((sse("content_block_delta", {
        "type": "content_block_delta", "index": 7,
        "delta": {"type": "text_delta", "text": "x"}}),)))
    with pytest.raises(MalformedStream, match="block 7, never started"):
        await ask(fake)


async def test_a_stalled_stream_is_asked_again(fake: FakeAnthropic) -> None:
    fake.reply_with(Turn(text="slow", fault="stall", after=2), Turn(text="quick"))
    response = await ask(fake, idle=0.3)
    assert response.output[0]["content"][0]["text"] == "quick"
    await fake.wait_for_disconnects(1)


def message_start(**usage: Any) -> bytes:
    return sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1, **usage}}})


def text_block(index: int, text: str) -> list[bytes]:
    return [sse("content_block_start", {"type": "content_block_start", "index": index,
                                        "content_block": {"type": "text", "text": ""}}),
            sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                        "delta": {"type": "text_delta", "text": text}}),
            sse("content_block_stop", {"type": "content_block_stop", "index": index})]


END = (sse("message_delta", {"type": "message_delta", "delta": {
    "stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 4}}),
    sse("message_stop", {"type": "message_stop"}))


async def test_unknown_events_and_blocks_are_passed_over(fake: FakeAnthropic) -> None:
    fake.reply_with(Frames((
        message_start(), b": a comment line\n\n",
        sse("future_event", {"type": "future_event", "x": 1}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "web_search_tool_result",
                                                      "tool_use_id": "srvtoolu_1",
                                                      "content": []}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        *text_block(1, "still here"), *END)))
    response = await ask(fake)
    assert [item["type"] for item in response.output] == ["message"]
    assert response.output[0]["content"][0]["text"] == "still here"


async def test_an_error_event_that_is_not_json_is_one_line_and_final(fake: FakeAnthropic) -> None:
    fake.reply_with(Frames((message_start(), b"event: error\ndata: upstream <b>broke</b>\n\n")))
    with pytest.raises(ModelError) as raised:
        await ask(fake)
    assert str(raised.value) == (f"claude at {fake.base_url} returned HTTP 200 in its stream "
                                 "error: upstream <b>broke</b>")
    assert len(fake.requests) == 1


async def test_huge_text_and_tool_input_arrive_whole(fake: FakeAnthropic) -> None:
    big = "é" * 1_000_000
    fake.reply_with(Turn(text=big, calls=(("add", {"blob": big[:200_000]}),), pieces=64))
    response = await ask(fake)
    message, call = response.output
    assert message["content"][0]["text"] == big
    assert json.loads(call["arguments"]) == {"blob": big[:200_000]}


async def test_surrogate_halves_split_across_deltas_make_one_character(
    fake: FakeAnthropic,
) -> None:
    halves = [sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                          "delta": {"type": "text_delta", "text": t}})
              .replace(b"\\\\", b"\\") for t in ("\\ud83d", "\\ude00", "\\ud83d")]
    fake.reply_with(Frames((
        message_start(), sse("content_block_start", {
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}), *halves,
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}), *END)))
    response = await ask(fake)
    assert response.output[0]["content"][0]["text"] == "\U0001f600\ufffd"


async def test_cumulative_usage_in_message_delta_replaces_the_start(fake: FakeAnthropic) -> None:
    fake.reply_with(Frames((
        message_start(cache_read_input_tokens=0), *text_block(0, "x"),
        sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "end_turn", "stop_sequence": None}, "usage": {
            "output_tokens": 9, "input_tokens": 4, "cache_read_input_tokens": 40,
            "cache_creation_input_tokens": 6}}),
        sse("message_stop", {"type": "message_stop"}))))
    response = await ask(fake)
    assert response.usage == TokenUsage(input_tokens=50, output_tokens=9,
                                        cached_input_tokens=40)


async def test_without_tools_the_historys_calls_are_told_as_text(fake: FakeAnthropic) -> None:
    await ask(fake, *HISTORY, user_message("sum up"), tools=())
    body = fake.requests[0].body
    assert "tools" not in body
    kinds = {block["type"] for message in body["messages"] for block in message["content"]}
    assert kinds == {"text", "thinking", "redacted_thinking"}
    said = [block.get("text") for message in body["messages"] for block in message["content"]]
    assert '[called add (toolu_1): {"a":1}]' in said
    assert "[result of toolu_2 (failed): bad arguments]" in said


async def test_a_base_url_ending_in_v1_is_named_in_the_404(fake: FakeAnthropic) -> None:
    client = AnthropicModel(
        anthropic.AsyncAnthropic(base_url=fake.base_url + "/v1", api_key="t", max_retries=0),
        provider="claude", retry=RetryPolicy(max_retries=0))
    try:
        with pytest.raises(ModelError) as raised:
            await client.respond(ModelRequest(session_id="s", model="m", instructions="",
                                              items=(user_message("hi"),)))
    finally:
        await client.aclose()
    assert str(raised.value) == (
        f"claude at {fake.base_url}/v1 returned HTTP 404 not_found_error: Not found: "
        "/v1/v1/messages (the base URL should not end in /v1: the SDK adds /v1/messages)")
    assert fake.unknown == ["POST /v1/v1/messages"]


async def test_a_server_that_says_do_not_retry_is_not_retried(fake: FakeAnthropic) -> None:
    fake.reply_with(Failure(503, "api_error", "maintenance", {"x-should-retry": "false"}))
    with pytest.raises(ModelError, match=r"HTTP 503 api_error: maintenance$"):
        await ask(fake)
    assert len(fake.requests) == 1


THINKING = {"type": "enabled", "budget_tokens": 2048}
LOOP_WITHOUT_THOUGHT = (user_message("add"), function_call("add", "{}", "toolu_1"),
                        function_call_output("toolu_1", "3", True))


@pytest.mark.parametrize(("items", "choice", "asked"), [
    ((), "auto", True),
    ((), "none", True),
    ((), "required", False),  # the API refuses thinking with a forced tool choice
    ((), "add", False),
    (HISTORY, "auto", True),  # the tool loop's assistant turn opened with thinking
    (LOOP_WITHOUT_THOUGHT, "auto", False),  # it did not (it began forced): not this turn
    ((*LOOP_WITHOUT_THOUGHT, assistant_message("3"), user_message("again")), "auto", True),
], ids=["auto", "none", "required", "named", "loop-with-thinking", "loop-without",
        "after-the-loop"])
async def test_extended_thinking_is_asked_where_the_api_takes_it(
    fake: FakeAnthropic, items: tuple[dict[str, Any], ...], choice: str, asked: bool,
) -> None:
    await ask(fake, *(items or (user_message("hi"),)), choice=choice,
              thinking_budget_tokens=2048)
    assert fake.requests[0].body.get("thinking") == (THINKING if asked else None)
