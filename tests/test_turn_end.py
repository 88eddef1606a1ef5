"""DESIGN 3.11: what a turn that ends with children running does (`children_at_turn_end`),
and messages up (`send_parent_message`), on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    PARENT_PROMPT,
    WORKER,
    Script,
    call,
    create,
    events,
    first_prompt,
    outputs,
    rollout_of,
    spawned,
    terminals,
)

from subsessions import ChildStatus, Engine, ModelRequest, Profile, SessionConfig

NOTICE = "<subsession_notification>"


@pytest.fixture
def script() -> Script:
    """Routed by each task's first prompt: a message from a child is no task of its own."""
    return Script(route=first_prompt)


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        yield engine


def user_texts(request: ModelRequest) -> list[str]:
    return [str(i["content"][0]["text"]) for i in request.items
            if i.get("type") == "message" and i["role"] == "user"]


def spawns_then_ends(script: Script, spawned_ids: list[str], *prompts: str) -> asyncio.Event:
    """The parent spawns children on `prompts`, then ends its turn once they are in their
    model calls; a later call (with the notices) answers `parent done`."""
    turn_over = asyncio.Event()

    async def after(outs: Any) -> Any:
        spawned_ids.extend(spawned(outs, n) for n in range(len(prompts)))
        await script.started(*prompts)  # each child is in its model call
        asyncio.get_running_loop().call_soon(turn_over.set)  # once this answer is read
        return ["turn over"]

    script.play(PARENT_PROMPT, [lambda outs: [create("worker", p) for p in prompts], after])
    return turn_over


# -- children_at_turn_end --------------------------------------------------------------------
def test_the_policy_is_one_of_three_words() -> None:
    assert SessionConfig(children_at_turn_end="wait").children_at_turn_end == "wait"
    for bad in ("Wait", "", None, 1, "leave "):
        with pytest.raises(ValueError, match="children_at_turn_end must be one of leave, "
                           "wait, cancel"):
            SessionConfig(children_at_turn_end=bad)


async def test_leave_ends_the_task_while_children_run(engine: Engine, script: Script) -> None:
    ids: list[str] = []
    spawns_then_ends(script, ids, "slow")
    script.hold("slow")
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    assert await root.send_and_wait(PARENT_PROMPT) == "turn over"
    assert root.subsessions.status(ids[0]) is ChildStatus.PENDING
    script.answer("slow", ["late"])
    assert await root.subsessions.wait_child(ids[0], timeout=30) == "late"


async def test_wait_holds_the_task_until_the_children_end_then_tells_the_model(
    engine: Engine, script: Script
) -> None:
    ids: list[str] = []
    turn_over = spawns_then_ends(script, ids, "one", "two")
    script.hold("two")
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                     children_at_turn_end="wait"))
    running = asyncio.ensure_future(root.send_and_wait(PARENT_PROMPT))
    await asyncio.wait_for(turn_over.wait(), 30)  # the model has ended its turn
    assert not running.done()
    script.answer("two", ["second answer"])
    assert await asyncio.wait_for(running, 30) == "parent done"  # one more model call
    calls = script.seen[PARENT_PROMPT]
    assert len(calls) == 3
    assert sum(NOTICE in str(i) for i in calls[1].items) == 0
    assert sum(NOTICE in str(i) for i in calls[2].items) == 2  # both, after the turn ended
    assert all(root.subsessions.status(i) is ChildStatus.DONE for i in ids)
    assert [t["type"] for t in terminals(rollout_of(engine.home, root.session_id))] == [
        "task_complete"]


async def test_wait_with_nothing_running_ends_the_turn(engine: Engine, script: Script) -> None:
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                     children_at_turn_end="wait"))
    assert await root.send_and_wait("plain") == "answer to plain"
    assert len(script.seen["plain"]) == 1


async def test_wait_tells_the_model_of_children_that_ended_unseen_during_the_turn(
    engine: Engine, script: Script
) -> None:
    async def after(outs: Any) -> Any:
        await ended.wait()  # it ended while the model was answering: its notice is queued
        return ["turn over"]

    script.play(PARENT_PROMPT, [lambda outs: [create("worker", "quick")], after])
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                     children_at_turn_end="wait"))
    ended = asyncio.Event()
    root.on(lambda e: ended.set() if e.type == "subagent.completed" else None)
    assert await root.send_and_wait(PARENT_PROMPT) == "parent done"
    assert sum(NOTICE in str(i) for i in script.seen[PARENT_PROMPT][2].items) == 1


async def test_cancel_cancels_the_running_children_as_their_parent(
    engine: Engine, script: Script
) -> None:
    ids: list[str] = []
    spawns_then_ends(script, ids, "slow")
    script.hold("slow")
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                     children_at_turn_end="cancel"))
    assert await root.send_and_wait(PARENT_PROMPT) == "turn over"
    assert root.subsessions.status(ids[0]) is ChildStatus.CANCELLED
    [ending] = [e for e in events(rollout_of(engine.home, ids[0]))
                if e["type"] in ("task_complete", "turn_aborted")]
    assert (ending["type"], ending.get("cancelled_by")) == ("turn_aborted", "parent")
    assert script.cancelled == ["slow"]
    assert len(script.seen[PARENT_PROMPT]) == 2  # no call to tell it: it cancelled them


# -- send_parent_message ---------------------------------------------------------------------
def tool_names(request: ModelRequest) -> list[str]:
    return list(request.tool_names)


async def test_a_running_parent_reads_its_childs_message_before_its_next_call(
    engine: Engine, script: Script
) -> None:
    said: list[Any] = []

    async def child(request: ModelRequest) -> Any:
        if not outputs(request):
            return [call("send_parent_message", message="found it: 42")]
        said.extend(outputs(request))
        return ["done"]

    script.handlers["child"] = child
    script.play(PARENT_PROMPT, [lambda outs: [create("worker", "child")],
                                lambda outs: [call("wait_session", session_id=spawned(outs),
                                                   timeout_ms=60_000)]])
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    assert await root.send_and_wait(PARENT_PROMPT) == "parent done"
    child_id = spawned(outputs(script.seen[PARENT_PROMPT][1]))
    assert [orjson.loads(o["output"]) for o in said] == [{"delivered": "queued"}]
    last = script.seen[PARENT_PROMPT][-1]
    assert f"[message from child session {child_id}] found it: 42" in user_texts(last)
    lines = [e for e in events(rollout_of(engine.home, root.session_id))
             if e["type"] == "user_message"]
    assert lines[-1]["message"] == f"[message from child session {child_id}] found it: 42"


@pytest.mark.parametrize("wake", ["wake_on_message", "wake_on_child_end"])
async def test_an_idle_parent_that_wakes_starts_a_task_on_the_message(
    engine: Engine, script: Script, wake: str
) -> None:
    said: list[Any] = []
    woke = asyncio.Event()

    async def child(request: ModelRequest) -> Any:
        if not outputs(request):  # its parent runs no task
            return [call("send_parent_message", message="halfway")]
        said.extend(outputs(request))
        return ["done"]

    def parent(request: ModelRequest) -> Any:
        woke.set()
        return ["heard you"]

    script.handlers["child"] = child
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,), **{wake: True}))
    child_id = await root.subsessions.spawn_child("worker", "child")
    script.handlers[f"[message from child session {child_id}] halfway"] = parent
    assert await root.subsessions.wait_child(child_id, timeout=30) == "done"
    await asyncio.wait_for(woke.wait(), 30)
    assert [orjson.loads(o["output"]) for o in said] == [{"delivered": "started"}]


async def test_an_idle_parent_without_wake_keeps_the_message_for_its_next_task(
    engine: Engine, script: Script
) -> None:
    script.handlers["child"] = lambda r: ([call("send_parent_message", message="note")]
                                          if not outputs(r) else [outputs(r)[0]["output"]])
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                     notify_on_child_end=False))
    child_id = await root.subsessions.spawn_child("worker", "child")
    assert await root.subsessions.wait_child(child_id, timeout=30) == '{"delivered":"queued"}'
    told = f"[message from child session {child_id}] note"
    assert await root.send_and_wait("next") == f"answer to {told}"  # (routed by the first)
    assert user_texts(script.seen[told][0]) == [told, "next"]  # it came before the prompt


async def test_offered_to_children_at_every_depth_never_to_the_top(
    engine: Engine, script: Script
) -> None:
    script.handlers["child"] = lambda r: ["ok"]
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,), max_depth=1))
    assert await root.send_and_wait("top") == "answer to top"
    assert "send_parent_message" not in tool_names(script.seen["top"][0])
    child_id = await root.subsessions.spawn_child("worker", "child")
    await root.subsessions.wait_child(child_id, timeout=30)
    names = tool_names(script.seen["child"][0])
    assert "send_parent_message" in names and "create_session" not in names  # at max depth


async def test_an_allowlist_without_it_neither_offers_nor_runs_it(
    engine: Engine, script: Script
) -> None:
    quiet = Profile(name="quiet", tools=["wait_session"])
    script.handlers["child"] = lambda r: ([call("send_parent_message", message="psst")]
                                          if not outputs(r) else [outputs(r)[0]["output"]])
    root = await engine.create_session(SessionConfig(custom_agents=(quiet,)))
    child_id = await root.subsessions.spawn_child("quiet", "child")
    assert await root.subsessions.wait_child(child_id, timeout=30) == (
        "Tool 'send_parent_message' is not supported by this client instance.")
    assert "send_parent_message" not in tool_names(script.seen["child"][0])
    assert root.inbox == []


@pytest.mark.parametrize("arguments", [{}, {"message": ""}, {"message": 7},
                                       {"message": "x", "to": "root"}])
async def test_bad_arguments_are_a_tool_error_and_deliver_nothing(
    engine: Engine, script: Script, arguments: dict[str, Any]
) -> None:
    script.handlers["child"] = lambda r: ([call("send_parent_message", **arguments)]
                                          if not outputs(r) else [str(outputs(r)[0]["success"])])
    root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    child_id = await root.subsessions.spawn_child("worker", "child")
    assert await root.subsessions.wait_child(child_id, timeout=30) == "False"
    assert root.inbox == []
