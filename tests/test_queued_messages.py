"""`send_message` to a queued child (DESIGN 3.1, 3.11; issue 35 item 6): answered
`{"delivered": "queued"}` at once, never after the child has waited its turn, run and ended;
the message joins its history after its prompt, before its first model call. The parent's
rollout keeps it (for a resume, and when the child is cancelled before it starts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from scripting import (
    PARENT_PROMPT,
    WORKER,
    Script,
    call,
    create,
    events,
    outputs,
    rollout_of,
    spawned,
    value,
    wait,
)
from scripting import script as script  # the fixture

from subsessions import ChildStatus, Engine, ModelRequest, Session, SessionConfig

T = TypeVar("T")
CONFIG = SessionConfig(custom_agents=(WORKER,), max_children=1)  # a second child waits


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="m", backend=backend) as engine:
        yield engine


async def promptly(work: Awaitable[T], seconds: float = 20) -> T:
    """`work`'s result, which must come while the first child still holds the only place (it
    is never released meanwhile): the bound is only how long a broken engine is given."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait([task], timeout=seconds)
    if not done:
        task.cancel()
        await asyncio.wait([task])
        pytest.fail("send_message waited for the queued child to start, run and end")
    return task.result()


def user_texts(request: ModelRequest) -> list[str]:
    return [i["content"][0]["text"] for i in request.items
            if i.get("type") == "message" and i["role"] == "user"]


def requests_of(script: Script, session_id: str) -> list[ModelRequest]:
    return [r for seen in script.seen.values() for r in seen if r.session_id == session_id]


def told(home: Path, session_id: str) -> list[str]:
    """The user messages a session's rollout records, in order."""
    return [e["message"] for e in events(rollout_of(home, session_id))
            if e["type"] == "user_message"]


def on_disk(path: str) -> bool:
    return Path(path).exists()


def background(home: Path, session_id: str) -> list[dict[str, Any]]:
    return [e for e in events(rollout_of(home, session_id)) if e["type"] == "background_event"]


async def queue_behind_held(root: Session, script: Script) -> tuple[str, str]:
    """A first child `a` that runs until the test answers it, and a second, `b`, queued."""
    script.hold("a")
    a = await root.subsessions.spawn_child("worker", "a")
    await script.started("a")
    b = await root.subsessions.spawn_child("worker", "b")
    assert root.subsessions.status(b) is ChildStatus.QUEUED
    return a, b


async def test_the_api_queues_messages_for_a_queued_child_in_order_at_once(
    engine: Engine, script: Script
) -> None:
    root = await engine.create_session(CONFIG)
    manager = root.subsessions
    _, b = await queue_behind_held(root, script)
    for note in ("first note", "second note", "third note"):
        assert await promptly(manager.send_message(b, note)) == "queued"
    assert manager.status(b) is ChildStatus.QUEUED and not requests_of(script, b)
    script.handlers["third note"] = lambda r: ["b done"]
    script.answer("a", ["a done"])
    assert await manager.wait_child(b, timeout=60) == "b done"
    [first] = requests_of(script, b)  # its first model call saw them all, after its prompt
    assert user_texts(first) == ["b", "first note", "second note", "third note"]
    assert first.items[0]["content"][0]["text"] == "b"
    await root.flush_durable()
    assert told(engine.home, b) == ["b", "first note", "second note", "third note"]
    kept = [(e["message"], e["sent"]) for e in background(engine.home, root.session_id)
            if "sent" in e]
    assert kept == [(f"message to queued child session {b}", n)
                    for n in ("first note", "second note", "third note")]


async def test_the_tool_answers_delivered_queued_and_the_parents_turn_goes_on(
    engine: Engine, script: Script
) -> None:
    async def first_note(outs: Any) -> Any:
        await script.started("a")
        return [call("send_message", session_id=spawned(outs, 1), message="first note")]

    def second_note(outs: Any) -> Any:
        assert value(outs[-1]) == {"delivered": "queued"}
        return [call("send_message", session_id=spawned(outs, 1), message="second note")]

    def release(outs: Any) -> Any:
        assert value(outs[-1]) == {"delivered": "queued"}
        assert not requests_of(script, spawned(outs, 1))  # it has not started yet
        script.answer("a", ["a done"])
        return [wait(spawned(outs, 1))]

    script.hold("a")
    script.handlers["second note"] = lambda r: ["b done"]
    script.play(PARENT_PROMPT, [
        lambda outs: [create("worker", "a"), create("worker", "b")],
        first_note, second_note, release,
    ])
    root = await engine.create_session(CONFIG)
    assert await promptly(root.send_and_wait(PARENT_PROMPT), 40) == "parent done"
    last = outputs(script.seen[PARENT_PROMPT][-1])
    b = spawned(last, 1)
    assert value(last[-1]) == {"result": "b done"}
    [first] = requests_of(script, b)
    assert user_texts(first) == ["b", "first note", "second note"]
    await root.flush_durable()
    assert told(engine.home, b) == ["b", "first note", "second note"]


@pytest.mark.in_process
async def test_a_queued_child_cancelled_before_it_starts_keeps_its_messages_in_the_parents_rollout(
    engine: Engine, script: Script
) -> None:
    root = await engine.create_session(CONFIG)
    manager = root.subsessions
    a, b = await queue_behind_held(root, script)
    assert await promptly(manager.send_message(b, "note for b")) == "queued"
    assert await manager.cancel_child(b) is True
    assert manager.status(b) is ChildStatus.CANCELLED
    script.answer("a", ["a done"])
    assert await manager.wait_child(a, timeout=30) == "a done"
    assert not requests_of(script, b) and not on_disk(manager.info(b).rollout_path)
    await root.flush_durable()
    lines = [(e["message"], e.get("sent")) for e in background(engine.home, root.session_id)]
    assert lines.index((f"message to queued child session {b}", "note for b")) < lines.index(
        (f"child session {b} cancelled", None))


@pytest.mark.in_process
async def test_a_message_to_a_child_cancelled_in_the_queue_starts_it_on_an_empty_history(
    engine: Engine, script: Script
) -> None:
    """DESIGN 3.1: a message to an ended child starts a follow-up on its history and rollout;
    one cancelled in the queue has neither yet: it runs that message alone, in a new rollout
    (its unread messages were its cancelled task's, kept in its parent's rollout)."""
    root = await engine.create_session(CONFIG)
    manager = root.subsessions
    a, b = await queue_behind_held(root, script)
    assert await promptly(manager.send_message(b, "never read")) == "queued"
    assert await manager.cancel_child(b) is True
    script.answer("a", ["a done"])
    assert await manager.wait_child(a, timeout=30) == "a done"
    assert await manager.send_message(b, "start after all") == "started"
    assert await manager.wait_child(b, timeout=30) == "answer to start after all"
    [first] = requests_of(script, b)
    assert user_texts(first) == ["start after all"]
    assert told(engine.home, b) == ["start after all"]


@pytest.mark.in_process
async def test_resume_queues_again_a_queued_child_with_the_messages_sent_to_it(
    home: Path, script: Script
) -> None:
    """The parent's rollout as it was when the process died, with `b` queued and told
    something: resuming it starts `b` with its prompt, then that message."""
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        await root.send_and_wait("start")  # a top-level rollout needs a task to resume
        _, b = await queue_behind_held(root, script)
        assert await promptly(root.subsessions.send_message(b, "note for b")) == "queued"
        await root.flush_durable()
        path = Path(root.rollout_path)
        at_crash = path.read_bytes()  # noqa: ASYNC240 (a copy taken at the crash)
    path.write_bytes(at_crash)  # noqa: ASYNC240 (what closing wrote never happened)
    later = Script()
    async with Engine(home, model_client=later.model) as engine:
        resumed = await engine.resume_session(root.session_id, CONFIG)
        assert await resumed.subsessions.wait_child(b, timeout=30) == "answer to note for b"
        [first] = requests_of(later, b)
        assert user_texts(first) == ["b", "note for b"]
