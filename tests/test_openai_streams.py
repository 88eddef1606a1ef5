"""Odd but complete streams, byte for byte as servers send them, over a real loopback socket.

A server may send the whole answer and then neither `[DONE]` nor the end of the body;
it may split an emoji into two UTF-16 surrogate halves, each valid JSON on its own. The
answer must be taken once (one request, no retry) and written to the rollout intact.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import openai
import pytest
from fake_openai import FakeOpenAI, Reply, fake_openai, raw, settle_sdk_generators, text
from openai_support import rollouts

from subsessions import Engine, SessionConfig
from subsessions.models.base import ModelRequest
from subsessions.models.openai_chat import OpenAIChatModel
from subsessions.models.openai_common import RetryPolicy
from subsessions.models.openai_responses import OpenAIResponsesModel

__all__ = ["fake_openai"]

PROMPT_BOUND = 5.0  # far under the idle timeout below: a stall would blow it


def chat_chunk(body: str) -> bytes:
    """One Chat Completions chunk; `body` is the rest of the JSON object, as sent."""
    head = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m"'
    return f"data: {{{head},{body}}}\n\n".encode()


def chat_delta(delta: str, finish: str = "null") -> bytes:
    return chat_chunk(
        f'"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]'
    )


CHAT_USAGE = chat_chunk(
    '"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}'
)
CHAT_ANSWER = (
    chat_delta('{"role":"assistant","content":"All"}'),
    chat_delta('{"content":" done."}'),
    chat_delta("{}", finish='"stop"'),
)

RESPONSE = (
    '{"id":"resp_1","object":"response","created_at":1700000000,"status":"%s","model":"m",'
    '"output":%s,"usage":%s,"error":null,"incomplete_details":null,"instructions":null,'
    '"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}'
)
USAGE = (
    '{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,'
    '"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}'
)


def event(kind: str, body: str, seq: int) -> bytes:
    return f'event: {kind}\ndata: {{"type":"{kind}",{body},"sequence_number":{seq}}}\n\n'.encode()


def message_item(*parts: str) -> str:
    content = ",".join(
        f'{{"type":"output_text","text":"{p}","annotations":[],"logprobs":[]}}' for p in parts
    )
    return (
        '{"id":"msg_1","type":"message","role":"assistant","status":"completed",'
        f'"content":[{content}]}}'
    )


def responses_answer(*deltas: str, parts: tuple[str, ...]) -> tuple[bytes, ...]:
    """A Responses stream of one message: its deltas, its item, response.completed."""
    item = message_item(*parts)
    ref = '"item_id":"msg_1","output_index":0,"content_index":0'
    created = RESPONSE % ("in_progress", "[]", "null")
    frames = [event("response.created", f'"response":{created}', 0)]
    frames += [
        event("response.output_text.delta", f'{ref},"delta":"{d}","logprobs":[]', 1 + i)
        for i, d in enumerate(deltas)
    ]
    n = len(frames)
    frames.append(event("response.output_item.done", f'"output_index":0,"item":{item}', n))
    completed = RESPONSE % ("completed", f"[{item}]", USAGE)
    frames.append(event("response.completed", f'"response":{completed}', n + 1))
    return tuple(frames)


@asynccontextmanager
async def engine_for(
    fake: FakeOpenAI, api: str, home: Path, tmp_path: Path, idle_timeout: float = 60.0
) -> AsyncIterator[Engine]:
    """An engine whose client may retry twice and waits `idle_timeout` for a quiet stream."""
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    client = kind(
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="t", max_retries=0),
        provider="fake",
        retry=RetryPolicy(max_retries=2, base_delay=0.001),
        stream_idle_timeout=idle_timeout,
    )
    try:
        async with Engine(home, model_client=client, model="m", project_dir=tmp_path) as engine:
            yield engine
    finally:
        await client.aclose()
        await settle_sdk_generators()


async def answer_once(engine: Engine) -> str | None:
    session = await engine.create_session(SessionConfig(instructions="be brief"))
    async with asyncio.timeout(PROMPT_BOUND):
        return await session.send_and_wait("hi")


def token_counts(home: Path) -> list[dict[str, int]]:
    """The counts each call reported (the three the wire tests set; the other two are 0)."""
    [records] = rollouts(home).values()
    return [
        {k: v for k, v in r["payload"]["info"]["last_token_usage"].items()
         if k not in ("cached_input_tokens", "reasoning_output_tokens") or v}
        for r in records
        if r["type"] == "event_msg" and r["payload"]["type"] == "token_count"
    ]


def agent_messages(home: Path) -> list[str]:
    """The answers in the one rollout under `home`; every line must be valid UTF-8 JSON."""
    [path] = home.glob("sessions/*/*/*/rollout-*.jsonl")
    for line in path.read_bytes().splitlines():
        line.decode("utf-8")  # strict: a lone surrogate written as bytes would fail here
    [records] = rollouts(home).values()
    return [
        r["payload"]["message"]
        for r in records
        if r["type"] == "event_msg" and r["payload"]["type"] == "agent_message"
    ]


def held_open(*frames: bytes) -> Reply:
    """Exactly `frames`, then the connection held open: no `[DONE]`, no end of the body."""
    return raw(*frames).stall_after(len(frames))


# -- 6: the whole answer, then neither [DONE] nor EOF ----------------------------------------
async def test_chat_answer_with_usage_then_held_open_is_taken_at_once(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(held_open(*CHAT_ANSWER, CHAT_USAGE))
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        assert await answer_once(engine) == "All done."
        await fake_openai.wait_for_disconnects(1)  # the client closed the held stream

    assert len(fake_openai.requests) == 1  # not sent (and billed) again
    assert token_counts(home) == [{"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}]


async def test_chat_answer_without_the_usage_it_was_asked_for_ends_after_a_grace(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    """No usage chunk ever comes: the answer is still taken, once, when the grace ends."""
    fake_openai.reply_with(held_open(*CHAT_ANSWER))
    async with engine_for(fake_openai, "chat", home, tmp_path, idle_timeout=0.3) as engine:
        assert await answer_once(engine) == "All done."
        await fake_openai.wait_for_disconnects(1)

    assert len(fake_openai.requests) == 1
    [counted] = token_counts(home)  # none reported: estimated (4 characters a token)
    assert counted["estimated"] is True and counted["output_tokens"] == len("All done.") // 4 + 1
    assert counted["input_tokens"] > 0


async def test_responses_completed_then_held_open_is_taken_at_once(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(held_open(*responses_answer("All", " done.", parts=("All done.",))))
    async with engine_for(fake_openai, "responses", home, tmp_path) as engine:
        assert await answer_once(engine) == "All done."
        await fake_openai.wait_for_disconnects(1)

    assert len(fake_openai.requests) == 1
    assert token_counts(home) == [{"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}]


# -- 7: an emoji as two surrogate halves in two chunks ----------------------------------------
SMILE = "smile \U0001f600, cut \ufffd"  # the pair joined; a half that never pairs replaced


async def test_chat_surrogate_halves_in_two_chunks_join_into_the_emoji(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(
        raw(
            chat_delta('{"role":"assistant","content":"smile \\ud83d"}'),
            chat_delta('{"content":"\\ude00, cut \\ud83d"}'),
            chat_delta("{}", finish='"stop"'),
            CHAT_USAGE,
            b"data: [DONE]\n\n",
        )
    )
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        assert await answer_once(engine) == SMILE

    assert agent_messages(home) == [SMILE]
    assert len(fake_openai.requests) == 1


async def test_responses_surrogate_halves_in_two_parts_join_into_the_emoji(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    frames = responses_answer(
        "smile \\ud83d", "\\ude00, cut \\ud83d", parts=("smile \\ud83d", "\\ude00, cut \\ud83d")
    )
    fake_openai.reply_with(raw(*frames))
    async with engine_for(fake_openai, "responses", home, tmp_path) as engine:
        assert await answer_once(engine) == SMILE

    assert agent_messages(home) == [SMILE]
    assert len(fake_openai.requests) == 1


# -- a stream that ends as it should is read to its end: its connection is reused ------------
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_complete_stream_that_ends_leaves_its_connection_for_the_next_request(
    fake_openai: FakeOpenAI, api: str
) -> None:
    fake_openai.reply_with(text("one"), text("two"))
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    client = kind(openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="t", max_retries=0))
    request = ModelRequest(session_id="s", model="m", instructions="x", items=())
    try:
        for _ in range(2):
            await client.respond(request)
    finally:
        await client.aclose()
        await settle_sdk_generators()

    first, second = fake_openai.requests
    assert first.client_port == second.client_port != 0
    assert fake_openai.disconnects == 0
