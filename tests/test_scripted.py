"""ScriptedModel: the offline model client driven by a script."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from subsessions.errors import ModelError
from subsessions.items import assistant_message, function_call, user_message
from subsessions.models import ModelRequest, ModelResponse, ScriptedModel, TokenUsage


def request(text: str = "hi", tools: tuple[str, ...] = ()) -> ModelRequest:
    return ModelRequest(
        session_id="0190f1c2-3b4a-7d5e-8f60-718293a4b5c6",
        model="scripted-1",
        instructions="be brief",
        items=(user_message(text),),
        tools=tuple({"type": "function", "name": n, "parameters": {}} for n in tools),
    )


async def test_list_script_is_consumed_in_order_then_exhausted() -> None:
    model = ScriptedModel([["first"], ["second"]])
    assert (await model.respond(request())).output == (assistant_message("first"),)
    assert (await model.respond(request())).output == (assistant_message("second"),)
    with pytest.raises(ModelError, match="no response left"):
        await model.respond(request())


async def test_requests_are_kept_unless_asked_not_to() -> None:
    kept, forgetful = ScriptedModel([["a"]]), ScriptedModel([["a"]], keep_requests=False)
    req = request()
    await kept.respond(req)
    assert (await forgetful.respond(req)).output == (assistant_message("a"),)
    assert kept.requests == [req] and forgetful.requests == []


async def test_empty_script_fails_on_first_request() -> None:
    with pytest.raises(ModelError):
        await ScriptedModel([]).respond(request())


async def test_sync_function_script_gets_each_request() -> None:
    seen: list[ModelRequest] = []

    def script(req: ModelRequest) -> list[Any]:
        seen.append(req)
        return [f"echo {len(seen)}"]

    model = ScriptedModel(script)
    req = request()
    assert (await model.respond(req)).output == (assistant_message("echo 1"),)
    assert (await model.respond(req)).output == (assistant_message("echo 2"),)
    assert seen == [req, req]
    assert model.requests == [req, req]


async def test_async_function_script() -> None:
    async def script(req: ModelRequest) -> list[Any]:
        await asyncio.sleep(0)
        return [f"{req.model} says hi", {"type": "function_call", "name": "t"}]

    output = (await ScriptedModel(script).respond(request())).output
    assert output[0] == assistant_message("scripted-1 says hi")
    assert output[1]["name"] == "t"


async def test_a_bare_string_response_is_one_assistant_message() -> None:
    response = await ScriptedModel(["just text"]).respond(request())
    assert isinstance(response, ModelResponse)
    assert response.output == (assistant_message("just text"),)


async def test_function_call_gets_unique_generated_call_ids() -> None:
    call = {"type": "function_call", "name": "create_session", "arguments": {"a": 1}}
    model = ScriptedModel([[call, call], [call]])
    first = (await model.respond(request())).output
    second = (await model.respond(request())).output
    ids = [item["call_id"] for item in (*first, *second)]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == 3
    assert call == {"type": "function_call", "name": "create_session", "arguments": {"a": 1}}


async def test_function_call_arguments_dict_becomes_json_text() -> None:
    args = {"session_type": "tester", "prompt": "ünï", "n": [1, 2]}
    model = ScriptedModel([[{"type": "function_call", "name": "x", "arguments": args}]])
    (item,) = (await model.respond(request())).output
    assert isinstance(item["arguments"], str)
    assert orjson.loads(item["arguments"]) == args
    assert item["type"] == "function_call"


async def test_function_call_keeps_given_call_id_and_json_text() -> None:
    item = {"type": "function_call", "name": "x", "arguments": '{"k": 1}', "call_id": "c9"}
    output = (await ScriptedModel([[item]]).respond(request())).output
    assert output == (function_call("x", '{"k": 1}', "c9"),)


async def test_function_call_without_arguments_gets_empty_object() -> None:
    (item,) = (
        await ScriptedModel([[{"type": "function_call", "name": "x"}]]).respond(request())
    ).output
    assert orjson.loads(item["arguments"]) == {}


async def test_other_typed_dicts_pass_through() -> None:
    item = {"type": "reasoning", "summary": []}
    assert (await ScriptedModel([[item]]).respond(request())).output == (item,)


async def test_exception_in_list_script_is_raised() -> None:
    boom = RuntimeError("HTTP 503")
    model = ScriptedModel([boom, ["after"]])
    with pytest.raises(RuntimeError) as caught:
        await model.respond(request())
    assert caught.value is boom
    assert (await model.respond(request())).output == (assistant_message("after"),)


async def test_exception_returned_by_function_is_raised() -> None:
    with pytest.raises(ModelError, match="rate limited"):
        await ScriptedModel(lambda req: ModelError("rate limited")).respond(request())


async def test_latency_is_slept() -> None:
    model = ScriptedModel([["ok"]], latency=0.02)
    start = time.perf_counter()
    await model.respond(request())
    assert time.perf_counter() - start >= 0.02


async def test_latency_sleep_is_cancellable_and_keeps_the_response() -> None:
    model = ScriptedModel([["kept"]], latency=30.0)
    task = asyncio.create_task(model.respond(request()))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start < 0.5
    assert "1 left" in repr(model)  # the cancelled request did not use up the script


def test_negative_latency_is_rejected() -> None:
    with pytest.raises(ValueError):
        ScriptedModel([], latency=-1)


@pytest.mark.parametrize(
    "item",
    [
        42,
        None,
        ["nested"],
        {"name": "x"},
        {"type": 3},
        {"type": "function_call"},
        {"type": "function_call", "name": ""},
        {"type": "function_call", "name": 5},
    ],
    ids=repr,
)
async def test_malformed_items_raise_model_error(item: Any) -> None:
    with pytest.raises(ModelError):
        await ScriptedModel([[item]]).respond(request())


@pytest.mark.parametrize("response", [None, 42], ids=repr)
async def test_response_that_is_not_a_list_raises_model_error(response: Any) -> None:
    """A script function that forgets to return must give a clear ModelError, not TypeError."""
    with pytest.raises(ModelError):
        await ScriptedModel(lambda req: response).respond(request())


async def test_a_bare_dict_response_is_not_split_into_its_keys() -> None:
    """`[{"type": "function_call", ...}]` (one response, not wrapped in a list) must not become
    assistant messages "type", "name" and "arguments"."""
    call = {"type": "function_call", "name": "x", "arguments": {}}
    try:
        response = await ScriptedModel([call]).respond(request())
    except ModelError:
        return
    assert [item["type"] for item in response.output] == ["function_call"]


def test_request_tool_names() -> None:
    assert request(tools=("create_session", "wait_session")).tool_names == (
        "create_session",
        "wait_session",
    )
    assert request().tool_names == ()


async def test_usage_is_positive_and_deterministic() -> None:
    script = [["a reply"], ["a reply"]]
    one, two = ScriptedModel(script), ScriptedModel(script)
    usage_one = (await one.respond(request())).usage
    usage_two = (await two.respond(request())).usage
    assert usage_one == usage_two
    assert usage_one.input_tokens > 0
    assert usage_one.output_tokens > 0
    assert usage_one.total_tokens == usage_one.input_tokens + usage_one.output_tokens
    bigger = (await one.respond(request("x" * 4000))).usage
    assert bigger.input_tokens > usage_one.input_tokens


async def test_empty_response_has_no_output() -> None:
    response = await ScriptedModel([[]]).respond(request())
    assert response.output == ()
    assert response.usage.output_tokens > 0


async def test_it_reports_the_usage_it_is_told() -> None:
    model = ScriptedModel([["hi", {"type": "usage", "input_tokens": 7, "output_tokens": 3}],
                           ["plain"]], usage=TokenUsage(1, 2))
    first = await model.respond(request())
    assert first.output == (assistant_message("hi"),)  # the usage item is not output
    assert (first.usage.input_tokens, first.usage.output_tokens) == (7, 3)
    second = await model.respond(request())
    assert second.usage == TokenUsage(1, 2)
    with pytest.raises(ValueError, match="usage must be a TokenUsage"):
        ScriptedModel([], usage=(1, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
async def test_a_malformed_usage_item_is_a_model_error(bad: Any) -> None:
    model = ScriptedModel([[{"type": "usage", "input_tokens": bad}]])
    with pytest.raises(ModelError, match="input_tokens must be a non-negative integer"):
        await model.respond(request())
