"""Steering and watching children (issue 15): `list_sessions`, `send_message` (queued into a
running child, or a follow-up task of an ended one on the same history and rollout), and
`subagent.usage` events whose roll-up is exact."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from scripting import (
    FOREVER_MS,
    PARENT_PROMPT,
    WORKER,
    Script,
    Watch,
    call,
    create,
    events,
    failure,
    outputs,
    rollout_of,
    spawn_held,
    spawned,
    terminals,
    tokens,
    value,
    wait,
)
from scripting import script as script  # the fixture
from scripting import watch as watch  # the fixture

from subsessions import (
    Budget,
    ChildLimitReached,
    ChildStatus,
    Engine,
    InvalidArguments,
    ModelRequest,
    Session,
    SessionConfig,
    Tool,
    UnknownSession,
)
from subsessions.ids import new_session_id

NOOP = Tool("noop", "Does nothing.", handler=lambda arguments, invocation: "ok")
CONFIG = SessionConfig(custom_agents=(WORKER,), tools=(NOOP,))


def user_texts(request: ModelRequest) -> list[str]:
    return [i["content"][0]["text"] for i in request.items
            if i.get("type") == "message" and i["role"] == "user"]


def turn_ids(session_id: str, home: Path) -> list[str]:
    return [e["turn_id"] for e in events(rollout_of(home, session_id))
            if e["type"] == "task_started"]


def meta_lines(path: str) -> int:
    return Path(path).read_text().count('"type":"session_meta"')


# -- list_sessions ----------------------------------------------------------------------------
async def test_list_sessions_shows_each_childs_status_live_usage_and_last_message(
    home: Path, script: Script, backend: Any
) -> None:
    long = "x" * 600
    script.hold("busy")
    script.handlers["quick"] = lambda r: [long, tokens(30, 12)]
    listed: list[Any] = []

    async def look(outs: Any) -> Any:
        await script.started("busy")
        return [call("list_sessions")]

    script.play(PARENT_PROMPT, [
        lambda outs: [create("worker", "busy"), create("worker", "quick")],
        lambda outs: [wait(spawned(outs, 1))],
        look,
        lambda outs: listed.append(value(outs[-1])) or [call("cancel_session",
                                                             session_id=spawned(outs, 0))],
    ])
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        await root.send_and_wait(PARENT_PROMPT)
        busy, quick = (c.session_id for c in root.subsessions.children())
    [body] = listed
    assert [e["session_id"] for e in body["sessions"]] == [busy, quick]
    running, done = body["sessions"]
    assert running["status"] == "running" and running["last_message"] is None
    # its call is in flight: counted as it began (on a shard too)
    assert running["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                                "turns": 1, "tool_calls": 0}
    assert done == {"session_id": quick, "session_type": "worker", "status": "completed",
                    "usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42,
                              "turns": 1, "tool_calls": 0},
                    "seconds": done["seconds"], "last_message": "x" * 500}
    assert 0 <= done["seconds"] < 10 and running["seconds"] >= 0


async def test_list_sessions_takes_no_arguments(home: Path, script: Script) -> None:
    script.play(PARENT_PROMPT, [lambda outs: [call("list_sessions", {"all": True})]])
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        await root.send_and_wait(PARENT_PROMPT)
    assert failure(outputs(script.seen[PARENT_PROMPT][1])[0]) == (
        "invalid arguments for list_sessions: unexpected field all")


# -- send_message to a running child ------------------------------------------------------------
@pytest.mark.parametrize("answer", [[call("noop")], ["all done"]], ids=["goes on", "answers"])
async def test_a_message_to_a_running_child_joins_its_history_before_its_next_model_call(
    home: Path, script: Script, answer: list[Any], backend: Any
) -> None:
    """Whether the call in flight asks for a tool or answers, the message comes next (an
    answer that came with a message waiting gets one more turn: nothing is lost)."""
    script.hold("work")
    script.handlers["also check the tests"] = lambda r: ["checked the tests too"]
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await manager.spawn_child("worker", "work")
        await script.started("work")
        assert await manager.send_message(cid, "also check the tests") == "queued"
        script.answer("work", answer)
        assert await manager.wait_child(cid) == "checked the tests too"
        [second] = script.seen["also check the tests"]
        assert user_texts(second) == ["work", "also check the tests"]
        assert second.items[-1]["role"] == "user"  # after what the call in flight gave
    recorded = [e["message"] for e in events(rollout_of(home, cid))
                if e["type"] == "user_message"]
    assert recorded == ["work", "also check the tests"]
    assert len(turn_ids(cid, home)) == 1  # the same task


async def test_the_model_steers_a_child_with_send_message(
    home: Path, script: Script, backend: Any
) -> None:
    script.hold("draft")
    script.handlers["make it shorter"] = lambda r: ["short draft"]

    async def steer(outs: Any) -> Any:
        await script.started("draft")
        return [call("send_message", session_id=spawned(outs), message="make it shorter")]

    def release(outs: Any) -> Any:
        assert value(outs[-1]) == {"delivered": "queued"}
        script.answer("draft", [call("noop")])
        return [wait(spawned(outs))]

    script.play(PARENT_PROMPT, [lambda outs: [create("worker", "draft")], steer, release])
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        assert await root.send_and_wait(PARENT_PROMPT) == "parent done"
    assert value(outputs(script.seen[PARENT_PROMPT][3])[-1]) == {"result": "short draft"}


# -- send_message to an ended child: a follow-up task -------------------------------------------
async def test_a_message_to_a_completed_child_starts_a_follow_up_on_its_history(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["now the tests"] = lambda r: ["tests written"]
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await manager.spawn_child("worker", "write x.py")
        assert await manager.wait_child(cid) == "answer to write x.py"
        assert await manager.send_message(cid, "now the tests") == "started"
        assert manager.status(cid).running
        assert await manager.wait_child(cid) == "tests written"
        assert manager.status(cid) is ChildStatus.DONE
        [follow_up] = script.seen["now the tests"]
        assert [i.get("role") for i in follow_up.items] == ["user", "assistant", "user"]
        assert manager.info(cid).usage.turns == 2
    rollout = rollout_of(home, cid)
    assert meta_lines(rollout.path) == 1
    first, second = turn_ids(cid, home)
    assert first != second
    assert [t["type"] for t in terminals(rollout)] == ["task_complete", "task_complete"]
    background = [e["message"] for e in events(rollout_of(home, root.session_id))
                  if e["type"] == "background_event"]
    assert background.count(f"child session {cid} completed") == 2


async def test_a_cancelled_child_can_be_followed_up(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["start over"] = lambda r: ["started over"]
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await spawn_held(root, script, "stuck")
        assert await manager.cancel_child(cid) is True
        assert await manager.send_message(cid, "start over") == "started"
        assert await manager.wait_child(cid) == "started over"
        assert script.cancelled == ["stuck"]
        [follow_up] = script.seen["start over"]
        assert user_texts(follow_up) == ["stuck", "start over"]
    assert [t["type"] for t in terminals(rollout_of(home, cid))] == [
        "turn_aborted", "task_complete"]


async def test_a_message_to_a_child_being_cancelled_starts_a_follow_up_once_it_ended(
    home: Path, script: Script, backend: Any
) -> None:
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await spawn_held(root, script, "stuck")
        cancelling = asyncio.ensure_future(manager.cancel_child(cid))
        await asyncio.sleep(0)
        assert manager.status(cid) is ChildStatus.CANCELLING
        assert await manager.send_message(cid, "again") == "started"
        assert await cancelling is True
        assert await manager.wait_child(cid) == "answer to again"


async def test_a_budget_limited_child_stays_spent_when_followed_up(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["job"] = lambda r: ["working", call("noop"), tokens(80)]
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(CONFIG)
        manager = root.subsessions
        cid = await manager.spawn_child("worker", "job", budget=Budget(max_tokens=100))
        with pytest.raises(Exception, match="tokens limit 100 reached"):
            await manager.wait_child(cid)
        assert await manager.send_message(cid, "keep going") == "started"
        with pytest.raises(Exception, match="tokens limit 100 reached"):
            await manager.wait_child(cid)
        assert "keep going" not in script.seen  # no model call: the budget is a cap
    assert [t.get("reason") for t in terminals(rollout_of(home, cid))] == [
        "budget_limited", "budget_limited"]


# -- what send_message refuses ---------------------------------------------------------------------
async def test_send_message_refuses_ids_not_of_its_children_and_empty_messages(
    home: Path, script: Script
) -> None:
    stranger = new_session_id()
    async with Engine(home, model_client=script.model) as engine:
        alice = await engine.create_session(CONFIG)
        bob = await engine.create_session(CONFIG)
        theirs = await alice.subsessions.spawn_child("worker", "private")
        await alice.subsessions.wait_child(theirs)
        for bad in (theirs, stranger, "../x", "not-a-uuid"):
            with pytest.raises(UnknownSession) as raised:
                await bob.subsessions.send_message(bad, "hello")
            assert str(raised.value) == f"unknown session {bad}"
        for empty in ("", "   ", None, 3):
            with pytest.raises(InvalidArguments, match="message must be a non-empty string"):
                await alice.subsessions.send_message(theirs, empty)  # type: ignore[arg-type]
        assert alice.subsessions.status(theirs) is ChildStatus.DONE  # nothing started


async def test_the_model_is_told_the_design_texts(home: Path, script: Script) -> None:
    other: list[str] = []
    script.play(PARENT_PROMPT, [lambda outs: [
        call("send_message", session_id=other[0], message="hi"),
        call("send_message", session_id="../etc", message="hi"),
        call("send_message", session_id=other[0], message=""),
        call("send_message", session_id=other[0]),
    ]])
    async with Engine(home, model_client=script.model) as engine:
        alice = await engine.create_session(CONFIG)
        other.append(await alice.subsessions.spawn_child("worker", "hers"))
        bob = await engine.create_session(CONFIG)
        await bob.send_and_wait(PARENT_PROMPT)
    texts = [failure(o) for o in outputs(script.seen[PARENT_PROMPT][1])]
    assert texts == [
        f"unknown session {other[0]}",
        "unknown session ../etc",
        "invalid arguments for send_message: message must not be empty",
        "invalid arguments for send_message: missing required field message",
    ]


async def test_a_follow_up_counts_against_the_trees_running_limit(
    home: Path, script: Script, backend: Any
) -> None:
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                         max_children=1))
        manager = root.subsessions
        first = await manager.spawn_child("worker", "first")
        await manager.wait_child(first)
        held = await spawn_held(root, script, "held")
        with pytest.raises(ChildLimitReached):
            await manager.send_message(first, "again")
        assert manager.status(first) is ChildStatus.DONE
        await manager.cancel_child(held)


# -- live usage ---------------------------------------------------------------------------------
async def test_usage_events_meter_each_child_live_and_roll_up_exactly(
    home: Path, script: Script, watch: Watch
) -> None:
    script.handlers["a"] = lambda r: (["a done", tokens(5, 5)] if len(script.seen["a"]) > 1
                                      else [call("noop"), tokens(10, 2)])
    script.play("b", [lambda outs: [create("worker", "c"), tokens(7, 1)],
                      lambda outs: [wait(spawned(outs)), tokens(3, 3)],
                      lambda outs: ["b done", tokens(4, 4)]])
    script.handlers["c"] = lambda r: ["c done", tokens(100, 20)]
    script.play(PARENT_PROMPT, [
        lambda outs: [create("worker", "a"), create("worker", "b"), tokens(1, 1)],
        lambda outs: [call("wait_sessions", session_ids=[spawned(outs, 0), spawned(outs, 1)],
                           mode="all", timeout_ms=FOREVER_MS), tokens(2, 2)],
        lambda outs: ["root done", tokens(3, 3)],
    ])
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,), tools=(NOOP,)))
        root.on(watch)
        await root.send_and_wait(PARENT_PROMPT)
        meters = [e for e in watch.events if e.type == "subagent.usage"]
        latest: dict[str, dict[str, Any]] = {}
        for event in meters:
            assert event.data["parent_tool_call_id"]  # nested under the spawning call
            latest[event.data["remote_session_id"]] = event.data
        tree = {s.session_id: s for s in root.subsessions.tree()}
        assert set(latest) == set(tree)  # grandchild c included
        for session_id, data in latest.items():
            assert {k: data[k] for k in ("input_tokens", "output_tokens", "total_tokens",
                                         "turns", "tool_calls")} == (
                tree[session_id].usage().as_dict())
        a_events = [e.data for e in meters if e.data["last"]["input_tokens"] == 10
                    and e.data["last"]["output_tokens"] == 2]
        assert a_events and a_events[0]["total_tokens"] == 12  # live: after its first turn
        rolled = root.usage(include_children=True)
        own = root.usage()
        assert rolled.total_tokens == own.total_tokens + sum(
            d["total_tokens"] for d in latest.values()) == 12 + 22 + 22 + 120
        assert rolled.turns == own.turns + sum(d["turns"] for d in latest.values()) == 9



# -- wake_on_child_end ----------------------------------------------------------------------------
def notified(request: ModelRequest) -> str:
    """Routes a woken task by its prompt: the notice, or the prompt as usual."""
    text = user_texts(request)[-1]
    return "notice" if text.startswith("<subsession_notification>") else text


async def test_an_idle_parent_is_woken_by_its_childs_ending(home: Path, watch: Watch) -> None:
    script = Script(route=notified)
    woke = asyncio.Event()

    def on_notice(request: ModelRequest) -> Any:
        woke.set()
        return ["the tester finished"]

    script.handlers["notice"] = on_notice
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                         wake_on_child_end=True))
        root.on(watch)
        idle = asyncio.Event()
        root.on(lambda e: idle.set() if e.type == "session.idle"
                and e.session_id == root.session_id else None)
        cid = await root.subsessions.spawn_child("worker", "test it")
        await asyncio.wait_for(idle.wait(), 10)
        assert woke.is_set()
        [request] = script.seen["notice"]
        assert user_texts(request) == [
            f'<subsession_notification>{{"session_id":"{cid}","status":"completed",'
            '"result":"answer to test it"}</subsession_notification>']
        assert [e.data["content"] for e in watch.events if e.type == "assistant.message"
                and e.session_id == root.session_id] == ["the tester finished"]
        assert await root.send_and_wait("next") == "answer to next"  # idle again


def child_ended(session: Session) -> asyncio.Event:
    """Set once a child of `session` has ended; a test waiting on it resumes after the
    ending is settled and whether to wake the parent has been decided."""
    ended = asyncio.Event()
    session.on(lambda e: ended.set() if e.type == "subagent.completed" else None)
    return ended


async def test_a_busy_parent_reads_the_notice_in_its_own_task_instead(
    home: Path, script: Script
) -> None:
    async def parent(outs: Any) -> Any:
        return [create("worker", "quick")]

    async def after(outs: Any) -> Any:
        await ended.wait()  # the child ends meanwhile: its notice comes next turn
        return [call("noop")]

    script.play(PARENT_PROMPT, [parent, after])
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,), tools=(NOOP,),
                                                         wake_on_child_end=True))
        ended = child_ended(root)
        assert await root.send_and_wait(PARENT_PROMPT) == "parent done"
        last = script.seen[PARENT_PROMPT][-1]
        assert any("<subsession_notification>" in str(i) for i in last.items)
        assert len(turn_ids(root.session_id, home)) == 1  # no second task was started


async def test_without_wake_an_idle_parent_stays_idle(home: Path, script: Script) -> None:
    """Nobody waits for the child, so its notice is queued: a parent without
    `wake_on_child_end` keeps it for its next task instead of starting one."""
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        ended = child_ended(root)
        await root.subsessions.spawn_child("worker", "x")
        await ended.wait()  # the ending is settled, and whether to wake decided
        assert await root.send_and_wait("next") == "answer to next"
        assert list(script.seen) == ["x", "next"]  # no task on the notice alone
        [request] = script.seen["next"]
        assert any("<subsession_notification>" in str(i) for i in request.items)


async def test_a_destroyed_or_closing_parent_is_not_woken(home: Path, script: Script) -> None:
    """Children aborted with their parent end seen (no notice), and nothing is started on a
    session the host destroyed or an engine that closes."""
    async with Engine(home, model_client=script.model) as engine:
        config = SessionConfig(custom_agents=(WORKER,), wake_on_child_end=True)
        gone = await engine.create_session(config)
        await spawn_held(gone, script, "held by the destroyed")
        await engine.destroy_session(gone.session_id)
        closing = await engine.create_session(config)
        await spawn_held(closing, script, "held at close")
    assert sorted(script.seen) == ["held at close", "held by the destroyed"]
    assert sorted(script.cancelled) == ["held at close", "held by the destroyed"]


async def test_a_resumed_parent_can_follow_up_a_child_of_an_earlier_run(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        await root.send_and_wait("start")  # a top-level rollout needs a task to resume
        cid = await root.subsessions.spawn_child("worker", "earlier work")
        assert await root.subsessions.wait_child(cid) == "answer to earlier work"
        root_id = root.session_id
    async with Engine(home, model_client=script.model) as engine:
        resumed = await engine.resume_session(root_id, CONFIG)
        assert resumed.subsessions.status(cid) is ChildStatus.DONE
        assert await resumed.subsessions.send_message(cid, "and now more") == "started"
        assert await resumed.subsessions.wait_child(cid) == "answer to and now more"
        [follow_up] = script.seen["and now more"]
        assert user_texts(follow_up) == ["earlier work", "and now more"]
    assert len(turn_ids(cid, home)) == 2
