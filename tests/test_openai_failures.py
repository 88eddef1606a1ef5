"""What a failure is called, and whether it is retried, over a real loopback socket.

Only the transport is retried and called a connection error, and that error names the
provider and its URL; a local bug fails at once as itself. A server that does not serve
the path asked (a chat-only server asked for /responses, a base URL without /v1) is told
apart from one that does not have the model.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import openai
import pytest
from fake_openai import (
    FakeOpenAI,
    error,
    fake_openai,
    model_not_found,
    settle_sdk_generators,
    text,
)
from openai_support import run

from subsessions.errors import InvalidHistory, ModelError
from subsessions.models.base import ModelRequest, ModelResponse
from subsessions.models.openai_chat import OpenAIChatModel
from subsessions.models.openai_common import RetryPolicy
from subsessions.models.openai_responses import OpenAIResponsesModel

__all__ = ["fake_openai"]

Api = Literal["responses", "chat"]
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
BOUND = 2.0  # the default retries alone would take longer than this


@pytest.fixture(params=["responses", "chat"])
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A loopback URL that refuses connections: the port is held, never listened on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}/v1"


async def respond(
    base_url: str, api: Api, *items: dict[str, object], retry: RetryPolicy | None = None
) -> ModelResponse:
    """One `respond` by a client with the default retry policy unless told otherwise."""
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    client = kind(
        openai.AsyncOpenAI(base_url=base_url, api_key="t", max_retries=0),
        provider="fake",
        retry=retry,
    )
    try:
        async with asyncio.timeout(BOUND):
            return await client.respond(
                ModelRequest(session_id="s", model="m", instructions="x", items=(USER, *items))
            )
    finally:
        await client.aclose()
        await settle_sdk_generators()


def config_with_one_attempt(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[model_providers.openai]\nrequest_max_retries = 0\n")


# -- 8: a local bug is not a connection error, and is not retried ---------------------------
async def test_a_history_item_without_call_id_fails_at_once_and_sends_nothing(
    fake_openai: FakeOpenAI, api: Api
) -> None:
    orphan = {"type": "function_call_output", "output": "42"}

    with pytest.raises(InvalidHistory) as failed:
        await respond(fake_openai.base_url, api, orphan)

    assert str(failed.value) == (
        "a function_call_output item without call_id cannot be sent to the model"
    )
    assert fake_openai.requests == []


async def test_an_error_of_our_own_is_raised_as_itself_at_once(
    fake_openai: FakeOpenAI, api: Api
) -> None:
    """A tool output that is not JSON (a local bug): the SDK's TypeError, once, unwrapped."""
    broken = {"type": "function_call_output", "call_id": "c1", "output": object()}

    with pytest.raises(TypeError, match="not JSON serializable"):
        await respond(fake_openai.base_url, api, broken)

    assert fake_openai.requests == []


# -- 9: connection errors name the provider and the URL --------------------------------------
async def test_an_unreachable_server_is_named_with_its_url(closed_url: str, api: Api) -> None:
    with pytest.raises(ModelError) as failed:
        await respond(closed_url, api, retry=RetryPolicy(max_retries=1, base_delay=0.001))

    assert str(failed.value) == (
        f"connection to fake at {closed_url} failed: Connection refused "
        "(gave up after 2 attempts)"
    )


async def test_the_cli_names_an_unreachable_server(closed_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    config_with_one_attempt(home)

    code, out, err = await run("run", "hi", "--home", str(home), "--base-url", closed_url,
                               cwd=tmp_path)

    assert (code, out) == (1, "")
    assert err == (
        f"subsessions: connection to openai at {closed_url} failed: Connection refused "
        "(gave up after 1 attempt)\n"
    )


async def test_the_cli_on_a_chat_only_server_suggests_wire_api_chat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config_with_one_attempt(home)
    async with FakeOpenAI(apis=("chat",)) as server:
        url = server.base_url
        code, out, err = await run("run", "hi", "--home", str(home), "--base-url", url,
                                   cwd=tmp_path)

    assert server.unknown == ["POST /v1/responses"]  # asked once, not retried
    assert (code, out) == (1, "")
    assert err == (
        f"subsessions: openai answered HTTP 404 for {url}/responses: "
        "the server may only speak Chat Completions (--wire-api chat)\n"
    )


@pytest.mark.parametrize(
    ("api", "hint"),
    [
        ("responses", "the server may only speak Chat Completions (--wire-api chat) "
                      "or the base URL may lack /v1"),
        ("chat", "the base URL may lack /v1"),
    ],
)
async def test_a_base_url_without_v1_says_so(
    fake_openai: FakeOpenAI, api: Api, hint: str
) -> None:
    root = fake_openai.base_url.removesuffix("/v1")
    path = "/responses" if api == "responses" else "/chat/completions"

    with pytest.raises(ModelError) as failed:
        await respond(root, api)

    assert str(failed.value) == f"fake answered HTTP 404 for {root}{path}: {hint}"
    assert fake_openai.unknown == [f"POST {path}"]


async def test_a_model_missing_on_a_real_endpoint_is_still_a_fallback(
    fake_openai: FakeOpenAI, api: Api
) -> None:
    """A 404 that says `model_not_found` is about the model, not the path: no hint."""
    fake_openai.reply_with(model_not_found("m"))

    with pytest.raises(ModelError) as failed:
        await respond(fake_openai.base_url, api)

    assert str(failed.value) == (f"no model available: fake at {fake_openai.base_url} "
                                 "returned HTTP 404: The model `m` does not exist")


async def test_ollamas_model_not_found_without_a_code_is_still_a_fallback(
    fake_openai: FakeOpenAI,
) -> None:
    """Ollama answers a missing model with 404 and `code: null`; the message says it."""
    fake_openai.reply_with(
        error(404, 'model "m" not found, try pulling it first', error_type="api_error"),
        text("from the fallback"),
    )
    client = OpenAIChatModel(
        openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="t", max_retries=0)
    )
    try:
        response = await client.respond(
            ModelRequest(session_id="s", model="m", instructions="x", items=(USER,),
                         fallback_models=("m2",))
        )
    finally:
        await client.aclose()

    assert response.model == "m2"
