"""Typed results (DESIGN 3.13): a child spawned with `output_schema` answers by calling
`submit_result`; bad arguments are answered with what is wrong and it tries again (three tries
in all), a turn without the call is reminded once. On both backends through the Python API,
and through `create_session` on the real `openai` SDK over the loopback server (both wire
APIs accept the schema as the tool's parameters)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import rollouts, tool_outputs
from scripting import WORKER, Script, first_prompt
from test_openai_models import Api, engine_on, is_worker
from test_openai_models import api as api  # the fixture

from subsessions import ChildFailed, Engine, InvalidArguments, Profile, SessionConfig, Tool
from subsessions.testing import rollout_of

__all__ = ["fake_openai"]

ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"], "additionalProperties": False}


def submit(**arguments: Any) -> list[dict[str, Any]]:
    return [{"type": "function_call", "name": "submit_result", "arguments": arguments,
             "call_id": f"s{len(arguments)}"}]


def outputs_of(request: Any) -> list[str]:
    return [i["output"] for i in request.items if i.get("type") == "function_call_output"]


async def _typed(tmp_path: Path, backend: Any, steps: list[Any],
                 schema: Any = ANSWER) -> tuple[Script, Any, str]:
    """A typed child whose model calls run `steps` in order; its ending and its id."""
    script = Script(route=first_prompt)
    script.play("compute", [lambda outs, step=step: step for step in steps])
    async with Engine(tmp_path / "home", model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "compute", output_schema=schema)
        try:
            result: Any = await parent.subsessions.wait_child(cid, timeout=60)
        except ChildFailed as exc:
            result = exc
        info = parent.subsessions.info(cid)
    if not isinstance(result, ChildFailed):
        assert info.result == result  # ChildInfo holds the value too
    return script, result, cid


async def test_a_typed_child_that_answers_badly_twice_then_well_ends_with_the_object(
    tmp_path: Path, backend: Any
) -> None:
    script, result, cid = await _typed(tmp_path, backend, [
        submit(answer="forty-two"), submit(), submit(answer=42)])
    assert result == {"answer": 42}
    requests = script.seen["compute"]
    assert [spec["name"] for spec in requests[0].tools][-1] == "submit_result"
    assert requests[0].tools[-1]["parameters"] == ANSWER
    first, second = outputs_of(requests[1])[-1], outputs_of(requests[2])[-1]
    assert first == ("rejected; fix these and call submit_result again: answer: "
                     "'forty-two' is not of type 'integer'")
    assert "'answer' is a required property" in second
    [ending] = [r for r in rollout_of(tmp_path / "home", cid).records
                if r.get("payload", {}).get("type") == "task_complete"]
    assert ending["payload"]["last_agent_message"] == '{"answer":42}'


@pytest.mark.in_process
async def test_three_bad_tries_fail_with_the_first_error(tmp_path: Path) -> None:
    _, failed, _ = await _typed(tmp_path, None, [submit(answer="x")] * 3)
    assert isinstance(failed, ChildFailed)
    assert failed.error == "result did not match output_schema: answer: 'x' is not of type " \
        "'integer'"


@pytest.mark.in_process
@pytest.mark.parametrize(("steps", "outcome"), [
    ([["plain text"], submit(answer=1)], {"answer": 1}),  # reminded once, then submits
    ([["plain text"], ["still text"]], "no submit_result call"),
])
async def test_a_turn_without_submit_result_is_reminded_once(
    tmp_path: Path, steps: list[Any], outcome: Any
) -> None:
    script, result, _ = await _typed(tmp_path, None, steps)
    if isinstance(result, ChildFailed):
        assert result.error == f"result did not match output_schema: {outcome}"
    else:
        assert result == outcome
    reminded = script.seen["compute"][1]
    told = [i for i in reminded.items if i.get("role") == "user"]
    assert "submit_result" in told[-1]["content"][0]["text"]
    assert reminded.tool_choice == "submit_result"  # the reminded turn is asked for the call
    assert script.seen["compute"][0].tool_choice == "auto"


@pytest.mark.in_process
async def test_a_schema_that_is_not_an_object_is_asked_for_as_result(tmp_path: Path) -> None:
    script, result, _ = await _typed(tmp_path, None, [submit(result=["a", "b"])],
                                     {"type": "array", "items": {"type": "string"}})
    assert result == ["a", "b"]
    assert script.seen["compute"][0].tools[-1]["parameters"]["required"] == ["result"]


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "nope"}, "output_schema: 'nope' is not valid under any of the given schemas"),
    ("a string", "output_schema: must be a JSON Schema object or null, not str"),
    ([1], "output_schema: must be a JSON Schema object or null, not list"),
    ({"minimum": "zero"}, "output_schema: 'zero' is not of type 'number'"),
])
async def test_a_bad_schema_is_refused_when_spawning(
    tmp_path: Path, schema: Any, problem: str
) -> None:
    script = Script(route=first_prompt)
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        with pytest.raises(InvalidArguments) as refused:
            await parent.subsessions.spawn_child("worker", "x", output_schema=schema)
        assert parent.subsessions.children() == []
    assert str(refused.value).startswith(f"invalid arguments for spawn_child: {problem}")


def _parent(schema: Any) -> Any:
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            done = tool_outputs(request)
            return calls(call("submit_result", {"answer": 7})) if not done else text("ok")
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "count",
                                                 "budget": None, "fork_turns": None,
                                                 "output_schema": schema}))
        if len(done) == 1:
            if done[0].startswith("invalid arguments"):
                return text(done[0])
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        return text(done[1])

    return script


async def test_create_session_with_an_output_schema_waits_for_the_value(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    fake_openai.script = _parent(ANSWER)
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        assert json.loads(await parent.send_and_wait("go") or "") == {"result": {"answer": 7}}
        [child] = parent.subsessions.children()
    assert child.result == {"answer": 7}
    assert any(r["type"] == "response_item" for r in rollouts(home)[child.session_id])


async def test_create_session_refuses_a_bad_schema_in_one_line(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.script = _parent({"type": 5})
    async with engine_on(fake_openai, "chat", home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        said = await parent.send_and_wait("go") or ""
    assert said.startswith("invalid arguments for create_session: output_schema: 5 is not "
                           "valid under any of the given schemas")


@pytest.mark.in_process
async def test_a_typed_step_of_a_chain_hands_its_value_on_as_json(tmp_path: Path) -> None:
    script = Script(route=first_prompt)
    script.play("count", [lambda outs: submit(answer=3)])
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        run = await parent.subsessions.run_chain(
            [("worker", "count", {"output_schema": ANSWER}), ("worker", "double {previous}")],
            timeout=60)
    assert [step.child.result for step in run.steps if step.child] == [
        {"answer": 3}, 'answer to double {"answer":3}']
    with pytest.raises(InvalidArguments, match=r"\(profile, prompt, options\)"):
        await parent.subsessions.run_parallel([("worker", "x", {"budget": None})])


async def test_run_sessions_steps_take_output_schema_and_refuse_a_bad_one(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return calls(call("submit_result", {"answer": 5})) if not tool_outputs(
                request) else text("ok")
        done = tool_outputs(request)
        task = {"session_type": "worker", "prompt": "p", "fork_turns": None}
        if not done:
            return calls(call("run_sessions", {"mode": "parallel", "timeout_ms": 20_000,
                                               "tasks": [{**task, "output_schema": ANSWER}]}))
        if len(done) == 1:
            return calls(call("run_sessions", {"mode": "parallel", "timeout_ms": 20_000,
                                               "tasks": [{**task, "output_schema": [1]}]}))
        return text(json.dumps(done))

    fake_openai.script = script
    async with engine_on(fake_openai, "responses", home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        first, second = json.loads(await parent.send_and_wait("go") or "")
    assert json.loads(first)["results"][0]["result"] == {"answer": 5}
    assert second == ("invalid arguments for run_sessions: output_schema: must be a JSON Schema "
                      "object or null, not list")


@pytest.mark.in_process
async def test_a_typed_child_of_a_profile_without_tools_still_delivers(tmp_path: Path) -> None:
    """Its allowlist (`tools = []`) gates the tools it may call, never the answer it is asked
    for (found on the real model: the call was refused as not supported)."""
    bare = Profile(name="bare", description="no tools", tools=())
    script = Script(route=first_prompt)
    script.play("compute", [lambda outs: submit(answer=7)])
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(bare,)))
        cid = await parent.subsessions.spawn_child("bare", "compute", output_schema=ANSWER)
        assert await parent.subsessions.wait_child(cid, timeout=60) == {"answer": 7}


def test_submit_result_is_the_engines_own_tool_name() -> None:
    mine = Tool(name="submit_result", description="a host's", parameters={"type": "object"},
                handler=lambda arguments, invocation: "ok")
    with pytest.raises(ValueError, match="'submit_result' is the engine's own"):
        SessionConfig(tools=(mine,))
