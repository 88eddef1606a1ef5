"""The control socket (DESIGN 3.12) against a live engine on the scripted model: a real unix
socket client lists, cancels and messages sessions; the socket is private and goes away
with the engine. Hostile and boundary input: tests/test_control_attacks.py."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from control_support import Line, error_code
from scripting import (
    FOREVER_MS,
    PARENT_PROMPT,
    WORKER,
    Script,
    call,
    create,
    spawn_held,
    spawned,
    tokens,
    wait,
)
from scripting import script as script  # the fixture

from subsessions import ChildCancelled, ChildStatus, Engine, EngineClosed, Hooks, SessionConfig
from subsessions.engine.control import client, paths
from subsessions.engine.control.rpc import MAX_LINE, UNKNOWN_SESSION
from subsessions.events import SessionEvent

CONFIG = SessionConfig(custom_agents=(WORKER,), control=True)


def by_id(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["sessionId"]: entry for entry in listing["sessions"]}


async def lead_with_grandchild(script: Script, root: Any) -> tuple[str, str]:
    """A running child ("lead") waiting on its own running child ("grand")."""
    script.hold("grand")
    script.play("lead", [lambda outs: [create("worker", "grand")],
                         lambda outs: [wait(spawned(outs), FOREVER_MS)]])
    lead = await root.subsessions.spawn_child("worker", "lead")
    await script.started("grand")
    grand = script.seen["grand"][0].session_id
    return lead, grand


async def test_the_socket_is_private_and_goes_away_with_the_engine(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        await engine.create_session(SessionConfig())
        assert engine.control_path is None  # nobody asked for one
        assert not (home / "control").exists()
        await engine.create_session(CONFIG)
        path = engine.control_path
        assert path is not None and path.parent == home / "control"
        assert path.name == f"{os.getpid()}-{path.name.split('-')[1]}"
        assert paths.pid_of(path.name) == os.getpid()
        info = os.stat(path, follow_symlinks=False)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        await engine.create_session(CONFIG)
        assert engine.control_path == path  # one socket an engine
        assert client.engines(home) == [path]
        line = await Line.open(path)
    assert not path.exists()
    assert await line.ended()  # an open connection is ended by the close
    await line.close()
    assert client.engines(home) == []


async def test_sessions_list_is_the_engines_live_tree_with_status_and_usage(
    home: Path, script: Script
) -> None:
    script.handlers["quick"] = lambda r: ["quick answer", tokens(30, 12)]
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        quick = await manager.spawn_child("worker", "quick")
        await manager.wait_child(quick)
        lead, grand = await lead_with_grandchild(script, root)
        line = await Line.of(engine)
        listing = await line.result("sessions.list")
        assert listing["pid"] == os.getpid()
        found = by_id(listing)
        assert list(found) == [root.session_id, quick, lead, grand]  # parents first
        assert found[root.session_id] | {"seconds": 0} == {
            "sessionId": root.session_id, "parentId": None, "depth": 0, "sessionType": "exec",
            "model": "scripted", "status": "idle", "usage": root.usage().as_dict(),
            "seconds": 0, "lastMessage": None}
        assert found[quick]["status"] == "completed"
        assert found[quick]["usage"]["input_tokens"] == 30
        assert found[quick]["usage"]["output_tokens"] == 12
        assert found[quick]["lastMessage"] == "quick answer"
        assert (found[lead]["status"], found[lead]["parentId"], found[lead]["depth"]) == (
            "running", root.session_id, 1)
        assert (found[grand]["status"], found[grand]["parentId"], found[grand]["depth"]) == (
            "running", lead, 2)
        assert found[grand]["sessionType"] == "worker"
        assert list(by_id(await line.result("sessions.list", {}))) == list(found)
        await line.close()
        await manager.cancel_child(lead)


async def test_cancel_through_the_socket_cancels_a_child_and_its_children_first(
    home: Path, script: Script, backend: Any
) -> None:
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        lead, grand = await lead_with_grandchild(script, root)
        line = await Line.of(engine)
        assert await line.result("sessions.cancel", {"sessionId": lead}) == {"cancelled": True}
        assert manager.status(lead) is ChildStatus.CANCELLED
        assert script.cancelled == ["grand"]
        found = by_id(await line.result("sessions.list"))
        assert found[lead]["status"] == "cancelled"
        if backend is None:  # on Ray the grandchild's parent (and its tree) is a shard's
            assert found[grand]["status"] == "cancelled"
        else:
            assert grand not in found
        # an ended session: nothing to cancel, and said so
        assert await line.result("sessions.cancel", {"sessionId": lead}) == {
            "cancelled": False}
        with pytest.raises(ChildCancelled):
            await manager.wait_child(lead)
        await line.close()


async def test_cancel_of_a_top_level_session_cancels_its_running_task(
    home: Path, script: Script
) -> None:
    script.hold(PARENT_PROMPT)
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        task = asyncio.create_task(root.send_and_wait(PARENT_PROMPT))
        await script.started(PARENT_PROMPT)
        line = await Line.of(engine)
        assert by_id(await line.result("sessions.list"))[root.session_id]["status"] == "running"
        answer = await line.result("sessions.cancel", {"sessionId": root.session_id})
        assert answer == {"cancelled": True}
        with pytest.raises(asyncio.CancelledError):
            await task
        assert script.cancelled == [PARENT_PROMPT]
        assert by_id(await line.result("sessions.list"))[root.session_id]["status"] == "idle"
        assert await line.result("sessions.cancel", {"sessionId": root.session_id}) == {
            "cancelled": False}
        await line.close()


async def test_send_steers_a_running_child_and_follows_up_an_ended_one(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["also check the tests"] = lambda r: ["checked the tests too"]
    script.handlers["now the docs"] = lambda r: ["docs written"]
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await spawn_held(root, script, "work")
        line = await Line.of(engine)
        sent = await line.result("sessions.send", {"sessionId": cid,
                                                   "message": "also check the tests"})
        assert sent == {"delivered": "queued"}
        script.answer("work", [call("noop_missing")])  # one more turn: the message is read
        assert await manager.wait_child(cid) == "checked the tests too"
        sent = await line.result("sessions.send", {"sessionId": cid, "prompt": "now the docs"})
        assert sent == {"delivered": "started"}
        assert await manager.wait_child(cid) == "docs written"
        assert manager.info(cid).usage.turns == 3
        await line.close()


async def test_send_to_a_top_level_session_queues_or_starts_its_next_task(
    home: Path, script: Script
) -> None:
    idle = asyncio.Event()

    def on_event(event: SessionEvent) -> None:
        if event.type == "session.idle":
            idle.set()

    script.hold("first")
    script.handlers["then this"] = lambda r: ["did it"]
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        root.on(on_event)
        line = await Line.of(engine)
        params = {"sessionId": root.session_id, "message": "first"}
        assert await line.result("sessions.send", params) == {"delivered": "started"}
        await script.started("first")
        params = {"sessionId": root.session_id, "message": "then this"}
        assert await line.result("sessions.send", params) == {"delivered": "queued"}
        script.answer("first", [call("noop_missing")])
        await asyncio.wait_for(idle.wait(), 10)
        assert root.last_message == "did it"
        [request] = script.seen["then this"]
        texts = [i["content"][0]["text"] for i in request.items
                 if i.get("type") == "message" and i["role"] == "user"]
        assert texts == ["first", "then this"]
        await line.close()


async def test_each_engine_answers_for_its_own_sessions_only(home: Path, script: Script) -> None:
    async with Engine(home, model_client=script.model) as one, \
            Engine(home, model_client=script.model) as other:
        root = await one.create_session(CONFIG)
        theirs = await other.create_session(CONFIG)
        cid = await spawn_held(theirs, script, "theirs")
        assert one.control_path is not None and other.control_path is not None
        assert one.control_path != other.control_path
        assert sorted(client.engines(home)) == sorted([one.control_path, other.control_path])
        line = await Line.open(one.control_path)
        assert cid not in by_id(await line.result("sessions.list"))
        for method, params in (("sessions.cancel", {"sessionId": cid}),
                               ("sessions.send", {"sessionId": cid, "message": "hi"})):
            answer = await line.call(method, params)
            assert error_code(answer) == UNKNOWN_SESSION
            assert answer["error"]["data"] == {"sessionId": cid}
            assert cid in answer["error"]["message"]
        assert theirs.subsessions.status(cid).running  # untouched
        assert await client.owner(home, cid) == other.control_path
        assert await client.owner(home, root.session_id) == one.control_path
        assert await client.owner(home, "0" * 36) is None
        await line.close()
        await theirs.subsessions.cancel_child(cid)


async def test_a_listing_longer_than_a_request_line_reaches_the_client_whole(
    home: Path, script: Script
) -> None:
    """The answer to `sessions.list` on a wide tree is one line of megabytes: the engine
    writes it, and `client.owner` (what `watch` asks) reads it."""
    n = 2_500
    for i in range(n):
        script.handlers[f"item {i}"] = lambda r: ["x" * 300]
    config = SessionConfig(custom_agents=(WORKER,), control=True, max_children=n)
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(config)
        manager = root.subsessions
        ids = [await manager.spawn_child("worker", f"item {i}") for i in range(n)]
        await manager.wait_all(ids)
        assert engine.control_path is not None
        listing = await client.request(engine.control_path, "sessions.list")
        assert len(orjson.dumps(listing)) > MAX_LINE
        assert [s["sessionId"] for s in listing["sessions"]] == [root.session_id, *ids]
        assert await client.owner(home, ids[-1]) == engine.control_path


async def test_a_message_for_a_top_level_task_past_reading_them_starts_the_next_task(
    home: Path, script: Script
) -> None:
    """A message that arrives while the session is claimed but its task reads no more
    messages (here: held in a prompt hook, before it starts reading) is not lost: it
    becomes the next task, once that one has ended."""
    in_hook, release = asyncio.Event(), asyncio.Event()
    endings: list[str] = []
    two = asyncio.Event()

    async def hook(data: dict[str, Any]) -> None:
        if data["prompt"] == "A":
            in_hook.set()
            await release.wait()

    def on_event(event: SessionEvent) -> None:
        if event.type == "session.idle":
            endings.append(event.session_id)
            if len(endings) == 2:
                two.set()

    config = SessionConfig(control=True, hooks=Hooks(on_user_prompt_submitted=hook))
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(config)
        root.on(on_event)
        line = await Line.of(engine)
        for text in ("A", "B"):
            sent = await line.result("sessions.send", {"sessionId": root.session_id,
                                                       "message": text})
            assert sent == {"delivered": "started"}
            await asyncio.wait_for(in_hook.wait(), 10)
        release.set()
        await asyncio.wait_for(two.wait(), 10)
        assert root.last_message == "answer to B"
        [request] = script.seen["B"]
        assert [i["content"][0]["text"] for i in request.items if i.get("role") == "user"] == [
            "A", "B"]
        await line.close()


async def test_a_home_deeper_than_a_socket_address_allows_still_works(
    tmp_path: Path, script: Script
) -> None:
    home = tmp_path / ("deep" * 30) / "home"  # its socket's path is past 108 bytes
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        assert engine.control_path is not None and len(str(engine.control_path)) > 108
        assert client.engines(home) == [engine.control_path]
        listing = await client.request(engine.control_path, "sessions.list")
        assert [s["sessionId"] for s in listing["sessions"]] == [root.session_id]
    assert paths.sockets(home) == []


async def test_a_request_in_flight_when_the_engine_closes_is_answered_first(
    home: Path, script: Script
) -> None:
    closing: list[asyncio.Task[None]] = []
    script.hold(PARENT_PROMPT)
    engine = Engine(home, model_client=script.model)
    try:
        root = await engine.create_session(CONFIG)

        def on_event(event: SessionEvent) -> None:  # its task ended: close at once
            if event.type == "session.idle" and not closing:
                closing.append(asyncio.create_task(engine.close()))

        root.on(on_event)
        task = asyncio.create_task(root.send_and_wait(PARENT_PROMPT))
        await script.started(PARENT_PROMPT)
        line = await Line.of(engine)
        answer = await line.result("sessions.cancel", {"sessionId": root.session_id})
        assert answer == {"cancelled": True}
        assert closing
        await closing[0]
        assert await line.ended()
        await line.close()
        with pytest.raises((asyncio.CancelledError, EngineClosed)):
            await task
    finally:
        await engine.close()
