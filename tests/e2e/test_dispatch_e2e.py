"""Host-side dispatch end to end (DESIGN 3.6): a scripted parent delegates to an agent.

The parent's model calls `create_session` and `wait_session` like a real model
would; the agent's model (recognised by its developer instructions) calls the
host's tools. What is checked is what the host and the models see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from scripting import FOREVER_MS, call, outputs

from subsessions import (
    Engine,
    Invocation,
    ModelRequest,
    Profile,
    ScriptedModel,
    SessionConfig,
    Tool,
)
from subsessions.events import SessionEvent

TEXT = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "What to save."}},
    "required": ["text"],
    "additionalProperties": False,
}
HELPER = Profile(
    name="helper",
    description="Saves results for the parent.",
    developer_instructions="HELPER",
    tools=["save_result"],
)


def delegating_parent(agent: str, task: str) -> Callable[[ModelRequest], list[Any]]:
    """A parent model that hands `task` to `agent`, waits for it, and reports its answer."""

    def respond(request: ModelRequest) -> list[Any]:
        done = outputs(request)
        if not done:
            return [call("create_session", session_type=agent, prompt=task)]
        last = orjson.loads(done[-1]["output"])
        if len(done) == 1:
            return [call("wait_session", session_id=last["session_id"], timeout_ms=FOREVER_MS)]
        return [f"the {agent} said: {last['result']}"]

    return respond


class Recorder:
    """Host tool handlers that remember every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], Invocation]] = []

    def tool(self, name: str, description: str) -> Tool:
        def handler(arguments: dict[str, Any], invocation: Invocation) -> dict[str, Any]:
            self.calls.append((name, arguments, invocation))
            return {"saved": arguments.get("text")}

        return Tool(name=name, description=description, parameters=TEXT, handler=handler)


async def test_use_the_helper_agent_to_save_hello_world(home: Path) -> None:
    host = Recorder()
    helper_requests: list[ModelRequest] = []

    def helper(request: ModelRequest) -> list[Any]:
        helper_requests.append(request)
        done = outputs(request)
        if not done:
            return [call("save_result", text="hello world")]
        return [f"saved: {done[-1]['output']}"]

    parent_model = delegating_parent("helper", "save the result 'hello world'")

    def model(request: ModelRequest) -> list[Any]:
        return helper(request) if request.instructions == "HELPER" else parent_model(request)

    config = SessionConfig(
        tools=(host.tool("save_result", "Save a result for the user."),),
        custom_agents=(HELPER,),
    )
    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        parent = await engine.create_session(config)
        answer = await parent.send_and_wait(
            "use the helper agent to save the result 'hello world'"
        )
        [child_id] = [info.session_id for info in parent.subsessions.children()]

    assert [(name, arguments) for name, arguments, _ in host.calls] == [
        ("save_result", {"text": "hello world"}),
    ]
    invocation = host.calls[0][2]
    assert invocation.session_id == child_id
    assert invocation.agent_name == "helper"
    assert helper_requests[0].tool_names == ("save_result",)
    assert helper_requests[0].tools[0]["parameters"] == TEXT
    assert answer == 'the helper said: saved: {"saved":"hello world"}'


async def test_a_restricted_agent_cannot_call_a_tool_off_its_list(home: Path) -> None:
    host = Recorder()
    restricted = Profile(name="restricted", developer_instructions="RESTRICTED",
                         tools=["save_result"])
    agent_requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> list[Any]:
        agent_requests.append(request)
        done = outputs(request)
        if not done:
            return [call("delete_files", text="/")]
        return [f"{'ok' if done[-1]['success'] else 'refused'}: {done[-1]['output']}"]

    parent_model = delegating_parent("restricted", "clean up everything")

    def model(request: ModelRequest) -> list[Any]:
        return agent(request) if request.instructions == "RESTRICTED" else parent_model(request)

    config = SessionConfig(
        tools=(host.tool("save_result", "Save a result."),
               host.tool("delete_files", "Delete files.")),
        custom_agents=(restricted,),
    )
    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        parent = await engine.create_session(config)
        answer = await parent.send_and_wait("tidy up with the restricted agent")

    assert host.calls == []
    assert agent_requests[0].tool_names == ("save_result",)
    refusal = "Tool 'delete_files' is not supported by this client instance."
    assert answer == f"the restricted said: refused: {refusal}"


async def test_the_host_answers_a_helpers_deferred_tool_call(home: Path) -> None:
    fetcher = Profile(name="fetcher", developer_instructions="FETCHER", tools=["fetch"])

    def agent(request: ModelRequest) -> list[Any]:
        done = outputs(request)
        if not done:
            return [call("fetch", text="https://example.invalid/a")]
        return [f"fetched {done[-1]['output']}"]

    parent_model = delegating_parent("fetcher", "fetch page a")

    def model(request: ModelRequest) -> list[Any]:
        return agent(request) if request.instructions == "FETCHER" else parent_model(request)

    config = SessionConfig(
        tools=(Tool("fetch", "Fetch a page.", TEXT),),  # no handler: the host answers
        custom_agents=(fetcher,),
    )
    requests: list[SessionEvent] = []
    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        parent = await engine.create_session(config)

        def host(event: SessionEvent) -> None:
            if event.type == "external_tool.requested":
                requests.append(event)
                page = f"<page {event.data['arguments']['text']}>"
                asyncio.get_running_loop().call_soon(
                    parent.handle_pending_tool_call, event.data["request_id"], page
                )

        parent.on(host)
        answer = await parent.send_and_wait("get page a with the fetcher")
        [child_id] = [info.session_id for info in parent.subsessions.children()]

    assert answer == "the fetcher said: fetched <page https://example.invalid/a>"
    [request] = requests
    assert request.data["session_id"] == child_id
    assert request.data["tool_name"] == "fetch"
