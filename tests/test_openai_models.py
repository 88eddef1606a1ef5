"""The OpenAI wire clients (Responses and Chat Completions) driven by a real Engine.

Every test runs the engine's real `openai` client against `FakeOpenAI`, a scripted
aiohttp server on 127.0.0.1; nothing is monkeypatched. What is checked is what a user
sees: answers, child states and their errors, the rollout files, and what went over
the wire (request bodies, retries, disconnects).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from fake_openai import (
    FakeOpenAI,
    Recorded,
    Reply,
    call,
    calls,
    error,
    fake_openai,
    model_not_found,
    rate_limited,
    server_error,
    settle_sdk_generators,
    text,
)
from openai_support import rollouts, tool_outputs

from subsessions import (
    ChildFailed,
    ChildStatus,
    Engine,
    Profile,
    Session,
    SessionConfig,
    Tool,
)
from subsessions.models.base import ModelRequest
from subsessions.models.openai_chat import OpenAIChatModel
from subsessions.models.openai_common import RetryPolicy
from subsessions.models.openai_responses import OpenAIResponsesModel
from subsessions.rollouts.summary import spawn_of
from subsessions.testing import plain_ending

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

Api = Literal["responses", "chat"]
APIS: list[Api] = ["responses", "chat"]

PARENT_INSTRUCTIONS = "You are the parent."
WORKER_INSTRUCTIONS = "You are a worker."
WORKER = Profile(name="worker", description="does work", developer_instructions=WORKER_INSTRUCTIONS)
IDLE_TIMEOUT = 0.3

ADD = Tool(
    name="add",
    description="Adds two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    handler=lambda arguments, invocation: arguments["a"] + arguments["b"],
)


# -- helpers ------------------------------------------------------------------------------
def make_client(
    fake: FakeOpenAI,
    api: Api,
    *,
    max_retries: int = 2,
    idle_timeout: float = IDLE_TIMEOUT,
) -> OpenAIChatModel | OpenAIResponsesModel:
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return kind(
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="t", max_retries=0),
        provider="fake",
        retry=RetryPolicy(max_retries=max_retries, base_delay=0.001),
        stream_idle_timeout=idle_timeout,
    )


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


@asynccontextmanager
async def engine_on(
    fake: FakeOpenAI, api: Api, home: Path, tmp_path: Path, **client_options: Any
) -> AsyncIterator[Engine]:
    """An engine on model "m" whose client talks to the fake over `api`; the client is
    closed, and what the SDK left behind settled, once the engine is."""
    client = make_client(fake, api, **client_options)
    try:
        async with Engine(home, model_client=client, model="m", project_dir=tmp_path) as engine:
            yield engine
    finally:
        await client.aclose()
        await settle_sdk_generators()


@pytest.fixture
async def engine(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> AsyncIterator[Engine]:
    """An engine on model "m" whose client talks to the fake over `api`."""
    async with engine_on(fake_openai, api, home, tmp_path) as eng:
        yield eng


async def parent_session(engine: Engine, *tools: Tool, worker: Profile = WORKER) -> Session:
    config = SessionConfig(instructions=PARENT_INSTRUCTIONS, custom_agents=(worker,), tools=tools)
    return await engine.create_session(config)


def instructions_of(request: Recorded) -> str:
    """What the session's instructions became on the wire, in either API."""
    if request.api == "responses":
        return str(request.body.get("instructions") or "")
    system = [m for m in request.body["messages"] if m["role"] == "system"]
    return str(system[0]["content"]) if system else ""


def is_worker(request: Recorded) -> bool:
    return WORKER_INSTRUCTIONS in instructions_of(request)


def user_texts(request: Recorded) -> list[str]:
    if request.api == "responses":
        return [
            part["text"]
            for item in request.body["input"]
            if item.get("type") == "message" and item.get("role") == "user"
            for part in item["content"]
        ]
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


def events(records: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    return [
        r["payload"]
        for r in records
        if r["type"] == "event_msg" and (kind is None or r["payload"]["type"] == kind)
    ]


def items(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r["payload"] for r in records if r["type"] == "response_item"
            and r["payload"]["type"] == kind]


def last_event(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The last event, plain; a failure as its `error` (the `task_complete` carrying the
    same error that Codex reads follows it)."""
    found = events(records)
    if found[-1]["type"] == "task_complete" and "error" in found[-1]:
        assert found[-1]["error"] == {"message": found[-2]["message"],
                                      "codex_error_info": "other"}
        found = found[:-1]
    return plain_ending(found[-1])


async def flushed(engine: Engine, *sessions: Session) -> None:
    for session in sessions:
        await session.recorder.flush_durable()


async def run_child(engine: Engine, prompt: str = "do the work") -> tuple[Session, str]:
    """A parent that spawns one worker child programmatically; returns (parent, child id)."""
    parent = await parent_session(engine)
    child_id = await parent.subsessions.spawn_child("worker", prompt)
    return parent, child_id


def worker_only(reply: Callable[[Recorded], Reply]) -> Callable[[Recorded], Reply]:
    """A script for tests where only the worker child talks to the model."""

    def script(request: Recorded) -> Reply:
        assert is_worker(request), f"unexpected request: {request.body}"
        return reply(request)

    return script


# -- answers, tools, history ------------------------------------------------------------------
async def test_text_answer_and_its_token_count(
    fake_openai: FakeOpenAI, engine: Engine, api: Api, home: Path
) -> None:
    fake_openai.reply_with(
        text("Hello, streaming world", pieces=4).with_usage(21, 4, reasoning=3, cached=5))
    parent = await parent_session(engine)

    assert await parent.send_and_wait("say hello") == "Hello, streaming world"

    [request] = fake_openai.requests
    assert request.api == api
    assert request.stream
    assert request.body["model"] == "m"
    assert instructions_of(request) == PARENT_INSTRUCTIONS
    assert user_texts(request) == ["say hello"]
    records = rollouts(home)[parent.session_id]
    [count] = events(records, "token_count")
    assert count["info"]["last_token_usage"] == {  # Codex's five counts, as reported
        "input_tokens": 21,
        "cached_input_tokens": 5,
        "output_tokens": 4,
        "reasoning_output_tokens": 3,
        "total_tokens": 25,
    }
    assert count["info"]["total_token_usage"]["total_tokens"] == 25
    assert [e["message"] for e in events(records, "agent_message")] == ["Hello, streaming world"]
    assert last_event(records) == {
        "type": "task_complete",
        "last_agent_message": "Hello, streaming world",
    }
    assert not events(records, "error")


async def test_token_counts_add_up_over_turns(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.reply_with(
        calls(call("add", {"a": 1, "b": 2})).with_usage(100, 7),
        text("3").with_usage(130, 2),
    )
    parent = await parent_session(engine, ADD)

    assert await parent.send_and_wait("1 + 2?") == "3"

    counts = events(rollouts(home)[parent.session_id], "token_count")
    assert [c["info"]["last_token_usage"]["total_tokens"] for c in counts] == [107, 132]
    assert counts[-1]["info"]["total_token_usage"] == {
        "input_tokens": 230,
        "cached_input_tokens": 0,
        "output_tokens": 9,
        "reasoning_output_tokens": 0,
        "total_tokens": 239,
    }


async def test_tools_are_advertised_in_the_wire_format_of_the_api(
    fake_openai: FakeOpenAI, engine: Engine, api: Api
) -> None:
    fake_openai.reply_with(text("ok"))
    parent = await parent_session(engine, ADD)
    await parent.send_and_wait("hi")

    tools = fake_openai.requests[0].body["tools"]
    if api == "responses":
        by_name = {t["name"]: t for t in tools}
        assert by_name["add"]["type"] == "function"
        assert by_name["add"]["parameters"] == ADD.parameters
        create = by_name["create_session"]["parameters"]
    else:
        by_name = {t["function"]["name"]: t for t in tools}
        assert by_name["add"]["type"] == "function"
        assert by_name["add"]["function"]["parameters"] == ADD.parameters
        create = by_name["create_session"]["function"]["parameters"]
    assert {"create_session", "wait_session", "cancel_session"} <= set(by_name)
    assert "worker" in create["properties"]["session_type"]["enum"]


async def test_parent_creates_and_waits_for_a_child_that_answers(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return text("the child's answer", pieces=3).with_usage(3, 4)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "do x"}))
        if len(done) == 1:
            child_id = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child_id, "timeout_ms": 10_000}))
        return text("parent saw: " + json.loads(done[1])["result"])

    fake_openai.script = script
    parent = await parent_session(engine)

    assert await parent.send_and_wait("delegate x") == "parent saw: the child's answer"

    [child_request] = [r for r in fake_openai.requests if is_worker(r)]
    assert user_texts(child_request) == ["do x"]  # the child never sees the parent's history
    assert len(fake_openai.requests) == 4
    [child_id] = [cid for cid in rollouts(home) if cid != parent.session_id]
    assert parent.subsessions.status(child_id) == ChildStatus.DONE
    found = rollouts(home)
    child = found[child_id]
    assert spawn_of(child[0]["payload"])["parent"] == parent.session_id
    assert child[0]["payload"]["session_type"] == "worker"
    assert child[0]["payload"]["model"] == "m"
    assert last_event(child) == {
        "type": "task_complete",
        "last_agent_message": "the child's answer",
    }
    assert events(child, "token_count")[0]["info"]["last_token_usage"]["total_tokens"] == 7
    messages = [e["message"] for e in events(found[parent.session_id], "background_event")]
    assert f"spawned child session {child_id} with model m" in messages


async def test_parallel_tool_calls_in_one_response(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    seen: list[dict[str, Any]] = []
    gate = asyncio.Event()

    async def slow_add(arguments: dict[str, Any], invocation: Any) -> int:
        seen.append(arguments)
        if len(seen) == 3:
            gate.set()
        # returns only once all three calls are running at once
        await asyncio.wait_for(gate.wait(), 2)
        return int(arguments["a"]) + int(arguments["b"])

    tool = Tool("add", ADD.description, ADD.parameters, slow_add)
    fake_openai.reply_with(
        calls(
            call("add", {"a": 1, "b": 2}, call_id="call_a"),
            call("add", {"a": 3, "b": 4}, call_id="call_b"),
            call("add", {"a": 5, "b": 6}, call_id="call_c"),
        ),
        text("3, 7 and 11"),
    )
    parent = await parent_session(engine, tool)

    assert await parent.send_and_wait("three sums") == "3, 7 and 11"

    assert sorted(a["a"] for a in seen) == [1, 3, 5]
    assert tool_outputs(fake_openai.requests[1]) == ["3", "7", "11"]
    records = rollouts(home)[parent.session_id]
    assert [c["call_id"] for c in items(records, "function_call")] == [
        "call_a",
        "call_b",
        "call_c",
    ]
    outputs = items(records, "function_call_output")
    assert [(o["call_id"], o["output"], o["success"]) for o in outputs] == [
        ("call_a", "3", True),
        ("call_b", "7", True),
        ("call_c", "11", True),
    ]


async def test_arguments_split_across_many_chunks(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    prompt = "Écris un test pour x.py — « vérifie » les cas limites 🙂 " * 8
    arguments = {"session_type": "worker", "prompt": prompt}
    fake_openai.script = lambda r: (
        text("fine")
        if is_worker(r)
        else calls(call("create_session", arguments, pieces=97))
        if not tool_outputs(r)
        else text("spawned")
    )
    parent = await parent_session(engine)

    assert await parent.send_and_wait("go") == "spawned"

    records = rollouts(home)[parent.session_id]
    [create] = items(records, "function_call")
    assert json.loads(create["arguments"]) == arguments
    [output] = items(records, "function_call_output")
    assert output["success"] is True, output
    child_id = json.loads(output["output"])["session_id"]
    assert await parent.subsessions.wait_child(child_id, timeout=5) == "fine"
    [child_request] = [r for r in fake_openai.requests if is_worker(r)]
    assert user_texts(child_request) == [prompt]


async def test_reasoning_becomes_a_reasoning_item(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.reply_with(text("42").with_reasoning("Six times seven is 42.", pieces=5))
    parent = await parent_session(engine)

    assert await parent.send_and_wait("6 * 7?") == "42"

    records = rollouts(home)[parent.session_id]
    [reasoning] = items(records, "reasoning")
    assert "".join(s["text"] for s in reasoning["summary"]) == "Six times seven is 42."
    kinds = [r["payload"]["type"] for r in records if r["type"] == "response_item"]
    assert kinds == ["message", "reasoning", "message"]  # user, reasoning, answer


async def test_chat_reasoning_under_ollamas_field_name(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.chat_reasoning_field = "reasoning"  # Ollama; vLLM/DeepSeek: reasoning_content
    fake_openai.reply_with(text("42").with_reasoning("Six times seven.", pieces=3))
    async with engine_on(fake_openai, "chat", home, tmp_path) as engine:
        parent = await parent_session(engine)
        assert await parent.send_and_wait("6 * 7?") == "42"

    [reasoning] = items(rollouts(home)[parent.session_id], "reasoning")
    assert "".join(s["text"] for s in reasoning["summary"]) == "Six times seven."


async def test_history_goes_back_in_the_wire_format_of_the_api(
    fake_openai: FakeOpenAI, engine: Engine, api: Api
) -> None:
    fake_openai.reply_with(
        calls(
            call("add", {"a": 1, "b": 2}, call_id="call_1"),
            call("add", {"a": 3, "b": 4}, call_id="call_2"),
            text="Adding.",
        ),
        text("3 and 7"),
    )
    parent = await parent_session(engine, ADD)

    assert await parent.send_and_wait("sums") == "3 and 7"

    second = fake_openai.requests[1].body
    args_1, args_2 = json.dumps({"a": 1, "b": 2}), json.dumps({"a": 3, "b": 4})
    if api == "responses":
        sent = second["input"]
        assert [i["type"] for i in sent] == [
            "message",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
        assert sent[1]["role"] == "assistant"
        assert sent[1]["content"][0]["text"] == "Adding."
        calls_sent = [(i["call_id"], i["name"], i["arguments"]) for i in sent[2:4]]
        assert calls_sent == [("call_1", "add", args_1), ("call_2", "add", args_2)]
        assert sent[4] == {"type": "function_call_output", "call_id": "call_1", "output": "3"}
        assert sent[5] == {"type": "function_call_output", "call_id": "call_2", "output": "7"}
        assert second["instructions"] == PARENT_INSTRUCTIONS
    else:
        sent = second["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
        assistant = sent[2]
        assert assistant["content"] == "Adding."
        assert assistant["tool_calls"] == [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": args_1}},
            {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": args_2}},
        ]
        assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "3"}
        assert sent[4] == {"role": "tool", "tool_call_id": "call_2", "content": "7"}


async def test_chat_history_without_text_still_sends_one_assistant_message(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(
        calls(call("add", {"a": 1, "b": 2}, call_id="c1"), call("add", {"a": 2, "b": 2})),
        text("done"),
    )
    async with engine_on(fake_openai, "chat", home, tmp_path) as engine:
        parent = await parent_session(engine, ADD)
        assert await parent.send_and_wait("sums") == "done"

    sent = fake_openai.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert sent[2]["content"] == ""  # llama.cpp's server refuses null, its templates no key
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["c1", sent[4]["tool_call_id"]]


# -- failures -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "limited",
    [
        pytest.param(rate_limited(0.25), id="retry-after"),
        pytest.param(
            error(429, "Slow down", code="rate_limit_exceeded", headers={"retry-after-ms": "250"}),
            id="retry-after-ms",
        ),
    ],
)
async def test_429_then_success_honours_retry_after(
    fake_openai: FakeOpenAI, engine: Engine, home: Path, limited: Reply
) -> None:
    arrived: list[float] = []
    answers = [limited, text("finally")]

    def script(request: Recorded) -> Reply:
        arrived.append(time.monotonic())
        return answers.pop(0)

    fake_openai.script = script
    parent = await parent_session(engine)

    assert await parent.send_and_wait("hi") == "finally"

    assert len(arrived) == 2
    # the backoff alone would be a millisecond: the gap is the server's Retry-After
    assert arrived[1] - arrived[0] >= 0.25
    records = rollouts(home)[parent.session_id]
    assert not events(records, "error")
    assert last_event(records)["type"] == "task_complete"


async def test_500_until_retries_run_out_fails_the_child(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.script = worker_only(lambda r: server_error())
    parent, child_id = await run_child(engine)

    with pytest.raises(ChildFailed) as failed:
        await parent.subsessions.wait_child(child_id, timeout=5)

    assert len(fake_openai.requests) == 3  # the first attempt and max_retries=2 more
    message = failed.value.error
    assert "HTTP 500" in message
    assert "3 attempts" in message
    assert "\n" not in message
    assert parent.subsessions.status(child_id) == ChildStatus.FAILED
    await flushed(engine, parent)
    found = rollouts(home)
    assert last_event(found[child_id]) == {"type": "error", "message": message}
    background = [e["message"] for e in events(found[parent.session_id], "background_event")]
    assert f"child session {child_id} failed: {message}" in background


async def test_a_client_error_is_not_retried(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.script = worker_only(lambda r: error(400, "Invalid 'input': too long"))
    parent, child_id = await run_child(engine)

    with pytest.raises(ChildFailed) as failed:
        await parent.subsessions.wait_child(child_id, timeout=5)

    assert len(fake_openai.requests) == 1
    assert "HTTP 400" in failed.value.error
    assert "too long" in failed.value.error


@pytest.mark.parametrize("after", [0, 3])
async def test_connection_dropped_mid_stream_then_success_on_retry(
    fake_openai: FakeOpenAI, engine: Engine, home: Path, after: int
) -> None:
    fake_openai.reply_with(
        text("Hello there, world", pieces=6).drop_after(after),
        text("Hello there, world", pieces=6),
    )
    parent = await parent_session(engine)

    assert await parent.send_and_wait("hi") == "Hello there, world"

    assert len(fake_openai.requests) == 2
    records = rollouts(home)[parent.session_id]
    # the pieces of the dropped attempt are not kept: one answer, said once
    assert [e["message"] for e in events(records, "agent_message")] == ["Hello there, world"]
    assert len(events(records, "token_count")) == 1
    assert last_event(records)["type"] == "task_complete"


async def test_dropped_tool_call_stream_is_retried_whole(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.reply_with(
        calls(call("add", {"a": 20, "b": 22}, pieces=8)).drop_after(5),
        calls(call("add", {"a": 20, "b": 22}, pieces=8)),
        text("42"),
    )
    parent = await parent_session(engine, ADD)

    assert await parent.send_and_wait("20 + 22?") == "42"

    records = rollouts(home)[parent.session_id]
    [function_call] = items(records, "function_call")
    assert json.loads(function_call["arguments"]) == {"a": 20, "b": 22}
    assert tool_outputs(fake_openai.requests[2]) == ["42"]


async def test_stalled_stream_is_an_error_after_the_idle_timeout(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, api: Api
) -> None:
    fake_openai.script = worker_only(lambda r: text("never finished", pieces=4).stall_after(2))
    async with engine_on(
        fake_openai, api, home, tmp_path, max_retries=1, idle_timeout=0.2
    ) as engine:
        parent, child_id = await run_child(engine)
        started = time.monotonic()
        with pytest.raises(ChildFailed) as failed:
            await parent.subsessions.wait_child(child_id, timeout=5)
        elapsed = time.monotonic() - started
        # both attempts closed their stream: the server saw each client leave
        await fake_openai.wait_for_disconnects(2)

    assert len(fake_openai.requests) == 2
    assert elapsed >= 2 * 0.2
    assert "idle for more than 200ms" in failed.value.error
    assert "2 attempts" in failed.value.error
    assert last_event(rollouts(home)[child_id]) == {
        "type": "error",
        "message": failed.value.error,
    }


async def test_a_server_that_never_starts_answering_is_a_stall_too(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, api: Api
) -> None:
    """No response headers at all for longer than the idle timeout: an error, not a hang."""
    release = asyncio.Event()

    async def script(request: Recorded) -> Reply:
        assert is_worker(request)
        await release.wait()  # accepts the request, then says nothing
        return text("too late")

    fake_openai.script = script
    client = make_client(fake_openai, api, max_retries=0, idle_timeout=0.2)
    try:
        async with Engine(home, model_client=client, model="m", project_dir=tmp_path) as engine:
            parent, child_id = await run_child(engine)
            with pytest.raises(ChildFailed) as failed:
                await parent.subsessions.wait_child(child_id, timeout=3)
    finally:
        release.set()
        await client.aclose()
        await settle_sdk_generators()

    assert "200ms" in failed.value.error or "timed out" in failed.value.error


async def test_stall_then_success_on_retry(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.reply_with(text("slow", pieces=3).stall_after(1), text("fast"))
    parent = await parent_session(engine)

    assert await parent.send_and_wait("hi") == "fast"

    await fake_openai.wait_for_disconnects(1)
    assert len(fake_openai.requests) == 2


async def test_invalid_json_in_a_chunk_fails_the_child_without_retry(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.script = worker_only(lambda r: text("some text", pieces=3).bad_json_after(2))
    parent, child_id = await run_child(engine)

    with pytest.raises(ChildFailed) as failed:
        await parent.subsessions.wait_child(child_id, timeout=5)
    await settle_sdk_generators()

    assert len(fake_openai.requests) == 1  # malformed is final: no retry
    message = failed.value.error
    assert "malformed" in message
    assert "fake" in message  # names the provider
    assert "\n" not in message
    await flushed(engine, parent)
    found = rollouts(home)
    assert last_event(found[child_id]) == {"type": "error", "message": message}
    assert not items(found[child_id], "message")[1:]  # no half answer was recorded


async def test_a_failed_child_does_not_stop_its_parent(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return text("x", pieces=3).bad_json_after(1)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "try"}))
        if len(done) == 1:
            child_id = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child_id, "timeout_ms": 10_000}))
        return text("the child failed; I carry on")

    fake_openai.script = script
    parent = await parent_session(engine)

    assert await parent.send_and_wait("delegate") == "the child failed; I carry on"
    await settle_sdk_generators()

    wait_output = items(rollouts(home)[parent.session_id], "function_call_output")[1]
    assert wait_output["success"] is False
    assert "failed: malformed" in wait_output["output"]


@pytest.mark.parametrize(
    "unavailable",
    [
        pytest.param(model_not_found("m"), id="openai-404"),
        pytest.param(
            error(404, 'model "m" not found, try pulling it first', error_type="api_error"),
            id="ollama-404",
        ),
        pytest.param(error(400, "The model `m` does not exist."), id="400-does-not-exist"),
    ],
)
async def test_fallback_to_the_second_model_when_the_first_is_unknown(
    fake_openai: FakeOpenAI, engine: Engine, home: Path, unavailable: Reply
) -> None:
    def script(request: Recorded) -> Reply:
        assert is_worker(request)
        return unavailable if request.body["model"] == "m" else text("m2 here")

    fake_openai.script = script
    parent = await parent_session(engine)
    fallback = Profile(
        name="fallback", developer_instructions=WORKER_INSTRUCTIONS, fallback_models=("m2",)
    )
    child_id = await parent.subsessions.spawn_child(fallback, "who answers?")

    assert await parent.subsessions.wait_child(child_id, timeout=5) == "m2 here"

    assert [r.body["model"] for r in fake_openai.requests] == ["m", "m2"]  # no retry of the 404
    child = rollouts(home)[child_id]
    background = [e["message"] for e in events(child, "background_event")]
    assert any("m2" in m and "answered" in m for m in background), background
    assert last_event(child)["type"] == "task_complete"


async def test_every_model_unknown_fails_naming_each(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    fake_openai.script = worker_only(lambda r: model_not_found(r.body["model"]))
    parent = await parent_session(engine)
    fallback = Profile(
        name="fallback", developer_instructions=WORKER_INSTRUCTIONS, fallback_models=("m2", "m3")
    )
    child_id = await parent.subsessions.spawn_child(fallback, "anyone?")

    with pytest.raises(ChildFailed) as failed:
        await parent.subsessions.wait_child(child_id, timeout=5)

    assert [r.body["model"] for r in fake_openai.requests] == ["m", "m2", "m3"]
    for model in ("`m`", "`m2`", "`m3`"):
        assert model in failed.value.error


async def test_cancelling_a_streaming_child_closes_its_stream(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, api: Api
) -> None:
    streaming = asyncio.Event()

    def script(request: Recorded) -> Reply:
        assert is_worker(request)
        streaming.set()
        return text("a long answer", pieces=6).stall_after(3)

    fake_openai.script = script
    async with engine_on(fake_openai, api, home, tmp_path, idle_timeout=30.0) as engine:
        parent, child_id = await run_child(engine)
        await asyncio.wait_for(streaming.wait(), 5)
        started = time.monotonic()
        assert await parent.subsessions.cancel_child(child_id) is True
        took = time.monotonic() - started
        await fake_openai.wait_for_disconnects(1)
        assert parent.subsessions.status(child_id) == ChildStatus.CANCELLED

    assert took < 0.5
    assert len(fake_openai.requests) == 1
    assert last_event(rollouts(home)[child_id]) == {"type": "turn_aborted", "reason": "cancelled"}


async def test_cancelling_a_child_waiting_out_a_long_retry_after_is_prompt(
    fake_openai: FakeOpenAI, engine: Engine, home: Path
) -> None:
    limited = asyncio.Event()

    def script(request: Recorded) -> Reply:
        assert is_worker(request)
        limited.set()
        return rate_limited(30)

    fake_openai.script = script
    parent, child_id = await run_child(engine)
    await asyncio.wait_for(limited.wait(), 5)

    started = time.monotonic()
    assert await parent.subsessions.cancel_child(child_id) is True
    assert time.monotonic() - started < 0.5
    assert len(fake_openai.requests) == 1
    await flushed(engine, parent)
    assert last_event(rollouts(home)[child_id]) == {"type": "turn_aborted", "reason": "cancelled"}


async def test_closing_the_engine_closes_every_stream(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, api: Api
) -> None:
    seen = 0
    all_streaming = asyncio.Event()

    def script(request: Recorded) -> Reply:
        nonlocal seen
        seen += 1
        if seen == 3:
            all_streaming.set()
        return text("stuck", pieces=4).stall_after(2)

    fake_openai.script = script
    client = make_client(fake_openai, api, idle_timeout=30.0)
    try:
        async with Engine(home, model_client=client, model="m", project_dir=tmp_path) as engine:
            parent = await parent_session(engine)
            ids = [await parent.subsessions.spawn_child("worker", f"job {i}") for i in range(3)]
            await asyncio.wait_for(all_streaming.wait(), 5)
        await fake_openai.wait_for_disconnects(3)
    finally:
        await client.aclose()
        await settle_sdk_generators()

    found = rollouts(home)
    for child_id in ids:
        assert last_event(found[child_id]) == {"type": "turn_aborted", "reason": "cancelled"}


# -- the client alone -----------------------------------------------------------------------
def _request(**kw: Any) -> ModelRequest:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return ModelRequest(session_id="s", model="m", instructions="be brief", items=(user,), **kw)


async def test_respond_reports_the_model_that_answered_and_usage(
    fake_openai: FakeOpenAI, api: Api
) -> None:
    fake_openai.reply_with(model_not_found("m"), text("hi!").with_usage(8, 2))
    client = make_client(fake_openai, api)
    try:
        response = await client.respond(_request(fallback_models=("m2",)))
    finally:
        await client.aclose()

    assert response.model == "m2"
    assert response.usage.input_tokens == 8
    assert response.usage.output_tokens == 2
    [message] = response.output
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "hi!"}]


async def test_a_profiles_reasoning_effort_reaches_the_wire(
    fake_openai: FakeOpenAI, engine: Engine, api: Api
) -> None:
    """A Codex agent's `model_reasoning_effort` (kept as the profile's `reasoning_effort`):
    `reasoning.effort` on the Responses API, `reasoning_effort` on Chat Completions; a
    profile without one sends neither."""
    fake_openai.script = worker_only(lambda request: text("thought"))
    thinker = Profile(name="worker", description="thinks", reasoning_effort="high",
                      developer_instructions=WORKER_INSTRUCTIONS)
    for worker, effort in ((thinker, "high"), (WORKER, None)):
        parent = await parent_session(engine, worker=worker)
        child = await parent.subsessions.spawn_child("worker", "think")
        assert await parent.subsessions.wait_child(child) == "thought"
        body = fake_openai.requests[-1].body
        sent = (body.get("reasoning") or {}).get("effort") if api == "responses" else (
            body.get("reasoning_effort"))
        assert sent == effort
        assert ("reasoning" in body) == (api == "responses" and effort is not None)
