"""End to end on a real model: SmolLM2-135M on llama.cpp's OpenAI-compatible server
(tests/realmodel_support.py says how that server differs from the fake, and why).

Generations are kept short (`MAX_OUTPUT` tokens a call), so the set stays near a minute on
two cores; what is asserted is what a user would see, never the words a model chose.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from openai_support import cli_env, rollouts, run
from realmodel_support import ALIAS, MAX_OUTPUT, LlamaServer

from subsessions import (
    Budget,
    ChildStatus,
    Engine,
    MaxTurnsExceeded,
    ModelRequest,
    ModelResponse,
    Profile,
    ScriptedModel,
    SessionConfig,
    Tool,
)
from subsessions.engine.instructions import BASE_INSTRUCTIONS
from subsessions.models.factory import build_model_client
from subsessions.settings import load_settings
from subsessions.testing import rollout_of, terminals

pytestmark = pytest.mark.realmodel

GREETER = Profile(name="greeter", description="answers in one short sentence",
                  developer_instructions="Answer in one short sentence.", tools=())
PARENT = "You are the scripted parent."


class Routed:
    """The scripted parent's requests to its script, every other session's to the server."""

    def __init__(self, parent: ScriptedModel, real: Any) -> None:
        self.parent, self.real = parent, real

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if request.instructions == PARENT:
            return await self.parent.respond(request)
        response: ModelResponse = await self.real.respond(request)
        return response


@asynccontextmanager
async def engine_on(server: LlamaServer, home: Path, script: Any = None,
                    **options: Any) -> AsyncIterator[Engine]:
    server.write_config(home)
    settings = load_settings(home)
    real = build_model_client(settings)
    client = real if script is None else Routed(ScriptedModel(script), real)
    try:
        async with Engine(home, model_client=client, model=ALIAS, **options) as engine:
            yield engine
    finally:
        await real.aclose()


def token_infos(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["payload"]["info"] for r in records
            if r["type"] == "event_msg" and r["payload"]["type"] == "token_count"]


def endings(records: list[dict[str, Any]]) -> list[str]:
    return [r["payload"]["type"] for r in records if r["type"] == "event_msg"
            and r["payload"]["type"] in ("task_complete", "turn_aborted")]


async def test_run_answers_a_plain_prompt(llama_server: LlamaServer, home: Path,
                                          tmp_path: Path) -> None:
    llama_server.write_config(home)
    code, out, err = await run("run", "Say hello", "--home", str(home), cwd=tmp_path)
    assert (code, err) == (0, ""), err
    assert out.strip()
    [records] = rollouts(home).values()
    meta = records[0]["payload"]
    assert meta["base_instructions"] == {"text": BASE_INSTRUCTIONS}
    assert meta["model"] == ALIAS
    [info] = token_infos(records)  # no usage in llama.cpp's streams: estimated, and says so
    usage = info["total_token_usage"]
    assert usage["estimated"] is True and usage["input_tokens"] > 500  # the tool list
    assert 0 < usage["output_tokens"] <= MAX_OUTPUT * 2
    assert endings(records) == ["task_complete"]


def fan_out(count: int) -> Any:
    """The parent spawns `count` greeters in one turn, waits for all, then answers."""
    def script(request: ModelRequest) -> list[Any]:
        outs = [i for i in request.items if i.get("type") == "function_call_output"]
        if not outs:
            return [{"type": "function_call", "name": "create_session",
                     "arguments": {"session_type": "greeter", "prompt": f"Greet person {n}."}}
                    for n in range(count)]
        if len(outs) == count:
            ids = [json.loads(o["output"])["session_id"] for o in outs]
            return [{"type": "function_call", "name": "wait_sessions",
                     "arguments": {"session_ids": ids, "mode": "all", "timeout_ms": 240_000}}]
        return ["all greeted"]

    return script


async def test_eight_children_in_parallel_each_answer_with_counted_tokens(
    llama_server: LlamaServer, home: Path
) -> None:
    async with engine_on(llama_server, home, fan_out(8)) as engine:
        parent = await engine.create_session(SessionConfig(instructions=PARENT,
                                                           custom_agents=(GREETER,)))
        assert await parent.send_and_wait("greet eight people") == "all greeted"
        children = parent.subsessions.children()
    assert len(children) == 8
    found = rollouts(home)
    for child in children:
        assert child.status is ChildStatus.DONE and (child.result or "").strip()
        records = found[child.session_id]
        assert endings(records) == ["task_complete"]
        [info] = token_infos(records)
        usage = info["total_token_usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert usage["estimated"] is True
        assert child.usage.total_tokens == usage["total_tokens"]


async def test_a_childs_token_budget_trips_on_the_servers_usage(
    llama_server: LlamaServer, home: Path
) -> None:
    chatty = Profile(name="chatty", developer_instructions="Write a long story.", tools=())
    async with engine_on(llama_server, home) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(chatty,)))
        child_id = await parent.subsessions.spawn_child(chatty, "Tell me a story.",
                                                        budget=Budget(max_tokens=30))
        with pytest.raises(Exception, match="budget exhausted: tokens limit 30 reached"):
            await parent.subsessions.wait_child(child_id, timeout=120)
        [child] = parent.subsessions.children()
        assert child.usage.turns == 1 and child.usage.total_tokens > 30
    [ending] = terminals(rollout_of(home, child_id))
    assert (ending["reason"], ending["limit"]) == ("budget_limited",
                                                    {"kind": "tokens", "max": 30})


async def test_cancelling_a_child_mid_stream_ends_the_servers_request(
    llama_server: LlamaServer, home: Path
) -> None:
    storyteller = Profile(name="storyteller", developer_instructions="Write a long story.",
                          tools=())
    async with engine_on(llama_server, home) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(storyteller,)))
        ended_before = llama_server.count("Disconnected from client")
        streamed = llama_server.count('"POST /v1/chat/completions HTTP/1.1" 200')
        child_id = await parent.subsessions.spawn_child(storyteller, "A story, please.")
        # the response has begun (uvicorn logs a stream when its headers go out)
        await asyncio.to_thread(llama_server.wait_for, '"POST /v1/chat/completions', 60,
                                times=streamed + 1)
        assert await parent.subsessions.cancel_child(child_id) is True
        await asyncio.to_thread(llama_server.wait_for, "Disconnected from client", 60,
                                times=ended_before + 1)
        assert parent.subsessions.status(child_id) is ChildStatus.CANCELLED
    assert endings(rollouts(home)[child_id]) == ["turn_aborted"]


async def test_a_ray_child_builds_its_client_from_settings(
    llama_server: LlamaServer, ray_cluster: Any, home: Path
) -> None:
    from ray_support import SHARD_OPTIONS

    from subsessions import RayBackend

    llama_server.write_config(home)
    backend = RayBackend(shards=1, model_settings=load_settings(home),
                         actor_options=SHARD_OPTIONS)
    async with engine_on(llama_server, home, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(GREETER,)))
        child_id = await parent.subsessions.spawn_child(GREETER, "Greet the reader.")
        answer = await parent.subsessions.wait_child(child_id, timeout=120)
        assert (answer or "").strip()
        [child] = parent.subsessions.children()
        assert child.usage.total_tokens > 0 and child.usage.estimated
    records = rollouts(home)[child_id]
    assert endings(records) == ["task_complete"]
    assert token_infos(records)[0]["total_token_usage"]["estimated"] is True


async def test_mcp_run_session_answers_on_the_real_model(
    llama_server: LlamaServer, home: Path, tmp_path: Path
) -> None:
    pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp_support import result_text

    llama_server.write_config(home)
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=cli_env(),
                                   args=["-m", "subsessions", "mcp", "--home", str(home)])
    with (tmp_path / "mcp.log").open("w") as errlog:
        async with (stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session):
            await session.initialize()
            result = await session.call_tool("run_session", {
                "session_type": "default", "prompt": "Say hello in five words."})
    assert not result.is_error, result_text(result)
    answer = result_text(result)
    found = rollouts(home).values()
    [child] = [r for r in found if r[0]["payload"].get("parent_thread_id")]
    [parent] = [r for r in found if r[0]["payload"]["source"] == "mcp"]
    assert parent[0]["payload"]["base_instructions"] == {"text": BASE_INSTRUCTIONS}
    assert answer.strip() and endings(child) == ["task_complete"]
    last = [r["payload"] for r in child if r["payload"].get("type") == "task_complete"]
    assert last[0]["last_agent_message"] == answer


async def test_serve_driven_by_the_copilot_sdk_answers_on_the_real_model(
    llama_server: LlamaServer, home: Path, tmp_path: Path
) -> None:
    copilot = pytest.importorskip("copilot", reason="pip install 'subsessions[test]'")

    llama_server.write_config(home)
    connection = copilot.RuntimeConnection.for_stdio(
        path=sys.executable, args=["-m", "subsessions", "serve", "--home", str(home)])
    client = copilot.CopilotClient(connection=connection, working_directory=str(tmp_path),
                                   env=cli_env(), log_level="warning")
    await client.start()
    process = client._cli_process
    try:
        session = await client.create_session(
            on_permission_request=copilot.PermissionHandler.approve_all)
        reply = await session.send_and_wait("Say hello.", timeout=120)
        assert reply is not None and reply.data.content.strip()
    finally:
        await client.stop()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    [records] = rollouts(home).values()
    assert records[0]["payload"]["base_instructions"] == {"text": BASE_INSTRUCTIONS}
    assert endings(records) == ["task_complete"]


LOOKUPS: list[dict[str, Any]] = []


def lookup(arguments: dict[str, Any], _invocation: Any) -> str:
    LOOKUPS.append(arguments)
    return "The code word is PELICAN."


LOOKUP = Tool(name="lookup", description="Looks up the secret code word.",
              parameters={"type": "object", "properties": {"topic": {"type": "string"}},
                          "required": ["topic"], "additionalProperties": False},
              handler=lookup)


def turn_items(home: Path) -> list[dict[str, Any]]:
    [records] = rollouts(home).values()
    return [r["payload"] for r in records if r["type"] == "response_item"]


FORCED = SessionConfig(tools=(LOOKUP,), tool_choice="lookup", max_depth=0, max_turns=2,
                       instructions="Use lookup, then tell the user the code word.")


async def test_a_forced_tool_call_reaches_the_tool_and_the_model_answers_after_it(
    llama_server: LlamaServer, home: Path
) -> None:
    """The GGUF's own template: a named `tool_choice` makes the server constrain the answer
    to the tool's JSON Schema; back on `auto`, the model answers in text."""
    LOOKUPS.clear()
    async with engine_on(llama_server, home) as engine:
        session = await engine.create_session(FORCED)
        answer = await session.send_and_wait("What is the code word?")
    assert len(LOOKUPS) == 1 and isinstance(LOOKUPS[0].get("topic"), str)
    items = turn_items(home)
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output",
                                          "message"]
    assert items[2]["output"] == "The code word is PELICAN."
    assert (answer or "").strip() and items[3]["role"] == "assistant"


async def test_chatml_function_calling_takes_the_forced_call_and_the_auto_turn_after_it(
    llama_tools_server: LlamaServer, home: Path
) -> None:
    """chatml-function-calling: the forced call streams; the `auto` turn after it cannot be
    streamed there (an empty 200) and is asked whole. That format's `auto` lets SmolLM2 only
    call tools again (its message grammar admits nothing but a call or the end), so the turn
    limit ends the task: what is checked is that the call, its output and the next turn got
    through."""
    LOOKUPS.clear()
    async with engine_on(llama_tools_server, home) as engine:
        session = await engine.create_session(FORCED)
        with pytest.raises(MaxTurnsExceeded):
            await session.send_and_wait("What is the code word?")
    assert LOOKUPS and isinstance(LOOKUPS[0].get("topic"), str)  # the grammar's JSON
    items = turn_items(home)
    kinds = [i["type"] for i in items]
    assert kinds[:3] == ["message", "function_call", "function_call_output"]
    assert items[2]["output"] == "The code word is PELICAN."
    assert len(kinds) > 3 and kinds[3] in ("function_call", "message")  # the auto turn


async def test_a_servers_500_reaches_the_user_as_one_line_naming_it(
    llama_tools_server: LlamaServer, home: Path, tmp_path: Path
) -> None:
    """The chat handler refuses a tool_choice naming a tool it was not given (HTTP 500,
    its message followed by a traceback frame): one line on stderr, the server named."""
    llama_tools_server.write_config(home, retries=0)
    (home / "profiles").mkdir()
    (home / "profiles" / "picky.toml").write_text(
        'name = "picky"\ndeveloper_instructions = "Be brief."\ntool_choice = "no_such_tool"\n')
    code, out, err = await run("run", "Say hello", "--home", str(home), "--profile", "picky",
                               cwd=tmp_path)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1, err
    assert err == (f"subsessions: llamacpp at {llama_tools_server.base_url} returned HTTP 500:"
                   " Tool with name 'no_such_tool' not found in tools (gave up after 1 "
                   "attempt)\n")


TYPED = Profile(name="typed", description="answers as JSON", tools=(),
                developer_instructions="Answer by calling submit_result.",
                tool_choice="submit_result")
# An enum keeps the constrained call within the tests' short generations (MAX_OUTPUT).
GREETING = {"type": "object", "properties": {"mood": {"enum": ["glad", "calm"]}},
            "required": ["mood"], "additionalProperties": False}


async def test_a_typed_child_answers_a_validated_object(
    llama_server: LlamaServer, home: Path
) -> None:
    """`submit_result`'s parameters are the schema: a named tool_choice makes the server
    constrain the call to it, and the child ends with the value, its rollout with its JSON."""
    async with engine_on(llama_server, home) as engine:
        parent = await engine.create_session(SessionConfig(instructions=PARENT,
                                                           custom_agents=(TYPED,)))
        child = await parent.subsessions.spawn_child("typed", "Greet Ada.",
                                                     output_schema=GREETING)
        value = await parent.subsessions.wait_child(child, timeout=240)
    assert isinstance(value, dict) and value["mood"] in ("glad", "calm")
    [ending] = terminals(rollout_of(home, child))
    assert json.loads(ending["last_agent_message"]) == value


def remembers(request: ModelRequest) -> list[Any]:
    """The scripted parent: a call and its output in its history, then a plain answer."""
    if not [i for i in request.items if i.get("type") == "function_call_output"]:
        return [{"type": "function_call", "name": "list_profiles", "arguments": {}}]
    return ["noted"]


async def test_a_forked_child_runs_on_the_parents_copied_conversation(
    llama_server: LlamaServer, home: Path
) -> None:
    """The copy holds the parent's call and its output (a tool the child is not offered):
    the real server takes that history and the child answers; its rollout names the
    parent."""
    async with engine_on(llama_server, home, remembers) as engine:
        parent = await engine.create_session(SessionConfig(instructions=PARENT,
                                                           custom_agents=(GREETER,)))
        assert await parent.send_and_wait("The code word is PELICAN.") == "noted"
        child = await parent.subsessions.spawn_child("greeter", "Say the code word.",
                                                     fork_turns="all")
        answer = await parent.subsessions.wait_child(child, timeout=240)
    assert (answer or "").strip()
    records = rollouts(home)[child]
    assert records[0]["payload"]["forked_from_id"] == parent.session_id
    copied = [r["payload"] for r in records[1:4]]
    assert [i["type"] for i in copied] == ["message", "function_call", "function_call_output"]
    assert endings(records) == ["task_complete"]
