"""What llama.cpp's server does that OpenAI does not, replayed on the loopback fake (each seen
on the real server: tests/realmodel_support.py lists them; tests/test_real_model.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply, error, fake_openai, raw, text
from openai_support import rollouts
from test_openai_streams import chat_delta, engine_for

from subsessions import ModelError, SessionConfig, Tool

__all__ = ["fake_openai"]

# The body llama-cpp-python's server sends for an exception: the message, then a frame.
TEMPLATE_ERROR = ("'dict object' has no attribute 'content'\n\n  File \"/srv/llama_cpp/server/"
                  "app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions")


def llama_error() -> Reply:
    return error(500, TEMPLATE_ERROR, error_type="internal_server_error")


async def test_a_stream_that_ends_before_its_first_chunk_is_asked_again_whole(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    """The server fails a stream after its 200 with an empty body; asked unstreamed, it
    answers (with real usage, which its streams never carry)."""
    fake_openai.reply_with(raw(), text("whole answer").with_usage(21, 2))
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(instructions="be brief"))
        assert await session.send_and_wait("hi") == "whole answer"
    streamed, whole = fake_openai.requests
    assert streamed.stream and not whole.stream
    assert {k: v for k, v in whole.body.items() if k != "stream"} == {
        k: v for k, v in streamed.body.items() if k not in ("stream", "stream_options")}
    [records] = rollouts(home).values()
    [usage] = [r["payload"]["info"]["last_token_usage"] for r in records
               if r["payload"].get("type") == "token_count"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (21, 2)
    assert "estimated" not in usage


async def test_a_servers_500_is_one_line_naming_the_server_and_its_message(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    """Streamed, the error is an empty body; asked whole, an HTTP 500 whose message ends in a
    traceback frame: the user reads one line with the server and the message."""
    fake_openai.reply_with(raw(), llama_error(), raw(), llama_error(), raw(), llama_error())
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(instructions="be brief"))
        with pytest.raises(ModelError) as failed:
            await session.send_and_wait("hi")
    assert str(failed.value) == (
        f"fake at {fake_openai.base_url} returned HTTP 500: 'dict object' has no attribute "
        "'content' (gave up after 3 attempts)")


def _llama_call(piece: str, name: str = "lookup") -> bytes:
    """A delta as llama.cpp streams it: the call's id and name again in every chunk."""
    call = (f'{{"index":0,"id":"call__0_{name}","type":"function",'
            f'"function":{{"name":"{name}","arguments":"{piece}"}}}}')
    return chat_delta(f'{{"role":null,"content":null,"tool_calls":[{call}]}}')


def _llama_calls(name: str) -> Reply:
    return raw(_llama_call("{", name), _llama_call('\\"topic\\": \\"x\\"', name),
               _llama_call("}", name),
               chat_delta('{"role":null,"content":null,"tool_calls":null}', '"tool_calls"'),
               b"data: [DONE]\n\n")


async def test_a_tool_name_repeated_in_every_chunk_is_one_name(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    seen: list[dict[str, object]] = []
    lookup = Tool(name="lookup", description="d", parameters={"type": "object"},
                  handler=lambda arguments, _inv: seen.append(arguments) or "PELICAN")
    fake_openai.reply_with(_llama_calls("lookup"), text("it is PELICAN").without_usage())
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(tools=(lookup,), max_depth=0))
        assert await session.send_and_wait("code word?") == "it is PELICAN"
    assert seen == [{"topic": "x"}]
    [message] = [m for m in fake_openai.requests[1].body["messages"] if m.get("tool_calls")]
    assert message["content"] == ""  # never null: llama.cpp refuses it, its templates need it
    assert message["tool_calls"][0]["function"] == {"name": "lookup",
                                                    "arguments": '{"topic": "x"}'}


async def test_a_call_of_a_tool_not_offered_is_answered_unknown_and_the_loop_goes_on(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(_llama_calls("shell"), text("sorry, no shell").without_usage())
    async with engine_for(fake_openai, "chat", home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(max_depth=0))
        assert await session.send_and_wait("list files") == "sorry, no shell"
    assert "tools" not in fake_openai.requests[0].body  # nothing was offered
    [told] = [m["content"] for m in fake_openai.requests[1].body["messages"]
              if m["role"] == "tool"]
    assert told == "Tool 'shell' is not supported by this client instance."
