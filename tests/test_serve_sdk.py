"""`subsessions serve` driven end to end by the official Copilot Python SDK (DESIGN 3.10).

The SDK launches our runtime over stdio; the model is the loopback FakeOpenAI server. The
scenario: a custom tool and a custom agent with an allowlist; the parent's model spawns the
agent; the child's allowed tool runs in the SDK's handler under the parent's session id,
its denied tool gets the not-supported text without a broadcast, hooks fire for the child,
and a permission request and a user-input request round trip.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fake_openai import FakeOpenAI, Reply, call, calls, fake_openai, text
from openai_support import rollouts, tool_outputs
from serve_support import (
    CHECKER,
    NOT_SUPPORTED,
    PROCESSES,
    checker_agent,
    copilot,
    python_client,
    scenario,
)

__all__ = ["fake_openai"]


def _tools(ran: list[tuple[str, Any]]) -> list[Any]:
    def lookup(invocation: Any) -> Any:
        ran.append(("lookup", invocation))
        return copilot.ToolResult(text_result_for_llm=f"value of {invocation.arguments['key']}")

    def secret(invocation: Any) -> Any:
        ran.append(("secret", invocation))
        return copilot.ToolResult(text_result_for_llm="the secret")

    key = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    return [copilot.Tool(name="lookup", description="Look a key up", handler=lookup,
                         parameters=key),
            copilot.Tool(name="secret", description="Never for agents", handler=secret,
                         parameters={"type": "object", "properties": {}},
                         skip_permission=True)]


async def test_the_scenario_end_to_end(home: Path, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script = scenario
    ran: list[tuple[str, Any]] = []
    permissions: list[Any] = []
    questions: list[Any] = []
    hooks: list[dict[str, Any]] = []
    events: list[Any] = []

    def approve(request: Any, invocation: Any) -> Any:
        permissions.append((request, invocation))
        return copilot.PermissionHandler.approve_all(request, invocation)

    def answer(request: Any, invocation: Any) -> dict[str, Any]:
        questions.append((request, invocation))
        return {"answer": "blue", "wasFreeform": True}

    def pre_tool_use(data: dict[str, Any], invocation: Any) -> None:
        hooks.append({**data, "invocation": invocation})

    async with python_client(home, fake_openai, tmp_path) as client:
        session = await client.create_session(
            on_permission_request=approve, on_user_input_request=answer,
            tools=_tools(ran), custom_agents=[checker_agent(["lookup"])],
            hooks={"on_pre_tool_use": pre_tool_use},
        )
        session.on(events.append)
        reply = await session.send_and_wait("check k1 with the checker", timeout=30)
        parent = session.session_id

    assert reply is not None and reply.agent_id is None
    assert reply.data.content == (
        f"parent saw: value of k1 | {NOT_SUPPORTED} | blue"
    )
    # The allowed tool ran once, in the SDK's handler, under the parent's session id and
    # with the child as its agent; the denied one never ran and was never broadcast.
    assert [name for name, _ in ran] == ["lookup"]
    invocation = ran[0][1]
    child = invocation.agent_id
    assert invocation.session_id == parent and child not in (None, parent)
    requested = [e for e in events if e.type.value == "external_tool.requested"]
    assert [(e.data.tool_name, e.agent_id) for e in requested] == [("lookup", child)]
    child_model = [r for r in fake_openai.requests if CHECKER in str(r.body.get("instructions"))]
    assert tool_outputs(child_model[1]) == ["value of k1", NOT_SUPPORTED]
    # Permission and user input round trips, for the child.
    assert [(r.tool_name, r.kind) for r, _ in permissions] == [("lookup", "custom-tool")]
    assert [e.type.value for e in events if e.type.value.startswith("permission.")] == [
        "permission.requested", "permission.completed"]
    assert [(q["question"], inv["session_id"]) for q, inv in questions] == [
        ("which colour?", parent)]
    # Hooks fire for the child's calls, naming the child's own session.
    by_tool = {(h["toolName"], h["sessionId"]) for h in hooks}
    assert ("lookup", child) in by_tool and ("ask_user", child) in by_tool
    assert ("create_session", parent) in by_tool
    # The sub-agent's life on the parent's stream.
    started = next(e for e in events if e.type.value == "subagent.started")
    assert (started.data.agent_name, started.data.agent_display_name,
            started.data.agent_description) == ("checker", "Checker", "Checks keys")
    completed = next(e for e in events if e.type.value == "subagent.completed")
    assert completed.data.tool_call_id == started.data.tool_call_id
    lookups = {e.data.tool_call_id for e in events if e.type.value == "tool.execution_start"
               and e.data.tool_name == "lookup"}
    tool_events = [e for e in events if e.type.value.startswith("tool.execution_")
                   and e.data.tool_call_id in lookups]
    assert len(tool_events) == 2 and all(e.agent_id == child for e in tool_events)
    assert all(e.data.parent_tool_call_id == started.data.tool_call_id for e in tool_events)
    assert not any(e.type.value in ("session.idle", "session.error") and e.agent_id
                   for e in events)
    # Both rollouts, the served one with source "cli", the child's naming its parent.
    found = rollouts(home)
    assert found[parent][0]["payload"]["source"] == "cli"
    assert parent in json.dumps(found[child][0]["payload"]["source"])  # spawned by the parent
    assert found[child][-1]["payload"]["type"] == "task_complete"


async def test_abort_cancels_the_tree(home: Path, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    async def stall_child(request: Any) -> Reply:
        if CHECKER in str(request.body.get("instructions", "")):
            return text("never").stall_after(0)
        if not tool_outputs(request):
            return calls(call("create_session", {"session_type": "checker", "prompt": "p"}))
        child = json.loads(tool_outputs(request)[0])["session_id"]
        return calls(call("wait_session", {"session_id": child, "timeout_ms": 60_000}))

    fake_openai.script = stall_child
    async with python_client(home, fake_openai, tmp_path) as client:
        session = await client.create_session(
            on_permission_request=copilot.PermissionHandler.approve_all,
            custom_agents=[checker_agent(None)])
        started = asyncio.Event()
        idle: list[Any] = []
        session.on(lambda e: started.set() if e.type.value == "subagent.started" else None)
        session.on(lambda e: idle.append(e) if e.type.value == "session.idle" else None)
        await session.send("go")
        await asyncio.wait_for(started.wait(), 20)
        await session.abort()
        for _ in range(200):
            if idle:
                break
            await asyncio.sleep(0.05)
        parent = session.session_id
    assert idle and idle[0].data.aborted is True
    found = rollouts(home)
    assert len(found) == 2
    for records in found.values():
        assert records[-1]["payload"]["type"] == "turn_aborted", records[-1]
    assert found[parent][0]["payload"]["source"] == "cli"


async def test_tcp_resume_list_delete_and_no_process_left(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.reply_with(text("first"), text("second"))
    approve = copilot.PermissionHandler.approve_all
    async with python_client(home, fake_openai, tmp_path, tcp=True) as client:
        session = await client.create_session(on_permission_request=approve)
        sid = session.session_id
        assert (await session.send_and_wait("remember the word kiwi", timeout=20)
                ).data.content == "first"
        assert [s.session_id for s in await client.list_sessions()] == [sid]
        await session.disconnect()
        assert await client.list_sessions() == []
        again = await client.resume_session(sid, on_permission_request=approve)
        assert (await again.send_and_wait("which word?", timeout=20)).data.content == "second"
        seen = json.dumps(fake_openai.requests[-1].body["input"])
        assert "remember the word kiwi" in seen  # the history came back from the rollout
        await client.delete_session(sid)
        assert rollouts(home) == {}
    assert PROCESSES[-1].poll() is not None  # runtime.shutdown: the runtime is gone


async def test_the_sdks_subagent_hooks_add_context_and_keep_a_child_going(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """DESIGN 3.13 over `serve`: the SDK's `on_subagent_start` and `on_subagent_stop`."""
    def script(request: Any) -> Reply:
        if CHECKER in str(request.body.get("instructions", "")):
            return text(f"checked ({len(fake_openai.requests)})")
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "checker", "prompt": "go"}))
        if len(done) == 1:
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 20_000}))
        return text("parent done")

    fake_openai.script = script
    stops: list[dict[str, Any]] = []
    starts: list[dict[str, Any]] = []

    def start(data: dict[str, Any], invocation: Any) -> dict[str, Any]:
        starts.append(dict(data))
        return {"additionalContext": "Use the staging keys."}

    def stop(data: dict[str, Any], invocation: Any) -> dict[str, Any] | None:
        stops.append(dict(data))
        return {"decision": "block", "reason": "Check once more."} if len(stops) == 1 else None

    async with python_client(home, fake_openai, tmp_path) as client:
        session = await client.create_session(
            on_permission_request=copilot.PermissionHandler.approve_all,
            custom_agents=[checker_agent(None)],
            hooks={"on_subagent_start": start, "on_subagent_stop": stop})
        assert (await session.send_and_wait("delegate", timeout=30)) is not None
        parent = session.session_id
    child_requests = [r for r in fake_openai.requests
                      if CHECKER in str(r.body.get("instructions", ""))]
    assert len(child_requests) == 2  # blocked once
    assert "Use the staging keys." in json.dumps(child_requests[0].body)
    assert "Check once more." in json.dumps(child_requests[1].body)
    [begun] = starts
    assert (begun["sessionId"], begun["agentName"]) == (parent, "checker")
    assert begun["agentId"] not in (None, parent)
    assert [s["response"].startswith("checked") for s in stops] == [True, True]
    assert all(s["agentId"] == begun["agentId"] for s in stops)
