"""Queued spawns (DESIGN 3.11): beyond `max_children` a spawn waits its turn in a FIFO
queue (`max_queued`), seen as `queued` everywhere, waited for and cancelled like any child,
and started again by `resume` after a crash."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    LIMIT_TEXT,
    PARENT_PROMPT,
    WORKER,
    Script,
    call,
    create,
    events,
    outputs,
    rollout_of,
    spawned,
)
from scripting import script as script  # the fixture

from subsessions import (
    ChildCancelled,
    ChildLimitReached,
    ChildStatus,
    Engine,
    Hooks,
    QueueFull,
    Session,
    SessionConfig,
)
from subsessions.rollouts import records

QUEUE_FULL = ("sub-session queue full (max_children={n}, max_queued={m}); wait for or cancel "
              "a running session first")


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="m", backend=backend) as engine:
        yield engine


def snapshot(path: Path) -> bytes:
    return path.read_bytes()


def on_disk(path: str) -> bool:
    return os.path.exists(path)


def background(home: Path, session_id: str) -> list[str]:
    return [e["message"] for e in events(rollout_of(home, session_id))
            if e["type"] == "background_event"]


async def top(engine: Engine, **limits: Any) -> Session:
    return await engine.create_session(SessionConfig(custom_agents=(WORKER,), **limits))


async def test_a_spawn_beyond_the_limit_waits_its_turn_in_order(
    engine: Engine, script: Script
) -> None:
    root = await top(engine, max_children=1)
    script.hold("a", "b", "c")
    a, b, c = [await root.subsessions.spawn_child("worker", p) for p in "abc"]
    manager = root.subsessions
    await script.started("a")
    assert [manager.status(i) for i in (a, b, c)] == [
        ChildStatus.PENDING, ChildStatus.QUEUED, ChildStatus.QUEUED]
    assert manager.status(b).word == "queued" and manager.status(b).running
    assert [s["status"] for s in (i.listing() for i in manager.children())] == [
        "running", "queued", "queued"]
    assert list(script.seen) == ["a"]  # the queued ones have not called their model
    assert not on_disk(manager.info(b).rollout_path)  # nor written a rollout
    script.answer("a", ["a done"])
    await script.started("b")  # FIFO: b before c
    assert manager.status(b) is ChildStatus.PENDING and manager.status(c) is ChildStatus.QUEUED
    script.answer("b", ["b done"])
    script.answer("c", ["c done"])
    assert await manager.wait_child(c, timeout=30) == "c done"  # waited through the queue
    assert list(script.seen) == ["a", "b", "c"]
    await root.recorder.flush_durable()
    lines = background(engine.home, root.session_id)
    assert lines.index(f"queued child session {c}") < lines.index(
        f"spawned child session {c} with model m")
    assert f"spawned child session {b} with model m" in lines


async def test_cancelling_a_queued_child_ends_it_unstarted(engine: Engine, script: Script) -> None:
    root = await top(engine, max_children=1)
    script.hold("a")
    _, b, c = [await root.subsessions.spawn_child("worker", p) for p in "abc"]
    assert await root.subsessions.cancel_child(b) is True
    assert root.subsessions.status(b) is ChildStatus.CANCELLED
    with pytest.raises(ChildCancelled):
        await root.subsessions.wait_child(b, timeout=1)
    assert await root.subsessions.cancel_child(b) is False  # once
    script.answer("a", ["a done"])
    assert await root.subsessions.wait_child(c, timeout=30) == "answer to c"
    assert "b" not in script.seen
    assert not on_disk(root.subsessions.info(b).rollout_path)
    await root.recorder.flush_durable()
    assert f"child session {b} cancelled" in background(engine.home, root.session_id)


async def test_a_full_queue_refuses_with_its_text_and_zero_restores_refusal(
    engine: Engine, script: Script
) -> None:
    script.hold("a")
    root = await top(engine, max_children=1, max_queued=1)
    await root.subsessions.spawn_child("worker", "a")
    await root.subsessions.spawn_child("worker", "b")
    with pytest.raises(QueueFull) as full:
        await root.subsessions.spawn_child("worker", "c")
    assert str(full.value) == QUEUE_FULL.format(n=1, m=1)
    assert isinstance(full.value, ChildLimitReached)
    assert len(root.subsessions.children()) == 2

    refusing = await top(engine, max_children=1, max_queued=0)
    script.hold("x")
    await refusing.subsessions.spawn_child("worker", "x")
    with pytest.raises(ChildLimitReached) as refused:
        await refusing.subsessions.spawn_child("worker", "y")
    assert str(refused.value) == LIMIT_TEXT.format(n=1)
    for bad in (-1, 1.5, "2"):
        with pytest.raises((ValueError, TypeError)):
            SessionConfig(max_queued=bad)


async def test_the_tools_show_queued_and_the_queue_full_text(
    engine: Engine, script: Script
) -> None:
    script.hold("a")

    def look(outs: Any) -> Any:
        return [call("list_sessions"), call("wait_session", session_id=spawned(outs, 1),
                                            timeout_ms=0)]

    script.play(PARENT_PROMPT, [
        lambda outs: [create("worker", "a"), create("worker", "b"), create("worker", "c")],
        look,
    ])
    root = await top(engine, max_children=1, max_queued=1)
    assert await root.send_and_wait(PARENT_PROMPT) == "parent done"
    first, second = outputs(script.seen[PARENT_PROMPT][2])[:3], outputs(
        script.seen[PARENT_PROMPT][2])[3:]
    assert first[2]["output"] == QUEUE_FULL.format(n=1, m=1) and not first[2]["success"]
    listed = orjson.loads(second[0]["output"])["sessions"]
    assert [s["status"] for s in listed] == ["running", "queued"]
    assert second[1]["output"] == f"session {spawned(first, 1)} has not completed"
    script.answer("a", ["a done"])


async def test_on_spawn_is_told_how_many_wait(home: Path, script: Script) -> None:
    asked: list[dict[str, Any]] = []
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(
            custom_agents=(WORKER,), max_children=1, hooks=Hooks(on_spawn=asked.append)))
        script.hold("a")
        for prompt in "abc":
            await root.subsessions.spawn_child("worker", prompt)
        assert [(a["running"], a["queued"]) for a in asked] == [(0, 0), (1, 0), (1, 1)]


async def test_closing_the_engine_starts_nothing_queued(home: Path, script: Script) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await top(engine, max_children=1)
        script.hold("a")
        ids = [await root.subsessions.spawn_child("worker", p) for p in "abc"]
    assert list(script.seen) == ["a"]
    assert [root.subsessions.status(i) for i in ids] == [ChildStatus.CANCELLED] * 3


async def test_resume_queues_again_what_a_crash_left_queued(home: Path, script: Script) -> None:
    """The parent's rollout as it was when the process died (a copy taken then), with one
    child running and two queued: resuming it starts the queued ones under their ids."""
    async with Engine(home, model_client=script.model) as engine:
        root = await top(engine, max_children=1)
        await root.send_and_wait("start")  # a top-level rollout needs a task to resume
        script.hold("a")
        a, b, c = [await root.subsessions.spawn_child("worker", p) for p in "abc"]
        await root.subsessions.cancel_child(c)  # cancelled before the crash: stays so
        await root.recorder.flush_durable()
        path = Path(root.rollout_path)
        at_crash = snapshot(path)
    path.write_bytes(at_crash)  # noqa: ASYNC240 (what closing wrote never happened)
    later = Script()
    async with Engine(home, model_client=later.model) as engine:
        root = await engine.resume_session(root.session_id,
                                           SessionConfig(custom_agents=(WORKER,)))
        assert await root.subsessions.wait_child(b, timeout=30) == "answer to b"
        assert sorted(later.seen) == ["b"]
        assert root.subsessions.status(a) is not ChildStatus.PENDING  # it was interrupted
        with pytest.raises(Exception, match="unknown session"):
            root.subsessions.status(c)


async def test_run_parallel_beyond_the_limit_runs_every_step(
    engine: Engine, script: Script
) -> None:
    root = await top(engine, max_children=2)
    result = await root.subsessions.run_parallel([("worker", f"task {n}") for n in range(5)],
                                                 timeout=60)
    assert result.results == [f"answer to task {n}" for n in range(5)]
    assert not result.timed_out


async def test_resume_restarts_no_path_and_no_child_it_knows(home: Path, script: Script) -> None:
    """A queued line naming a path, or a child whose rollout exists (it started before the
    crash), is never started again: nothing is written outside the home's tree."""
    async with Engine(home, model_client=script.model) as engine:
        root = await top(engine)
        await root.send_and_wait("start")
        done = await root.subsessions.spawn_child("worker", "done before")
        await root.subsessions.wait_child(done, timeout=30)
        for child_id in ("../../escape", done):
            root.recorder.event({**records.background(f"queued child session {child_id}"),
                                 "queued": {"session_type": "worker", "prompt": "again",
                                            "call_id": "c", "budget": None}})
        await root.recorder.flush_durable()
    later = Script()
    async with Engine(home, model_client=later.model) as engine:
        root = await engine.resume_session(root.session_id,
                                           SessionConfig(custom_agents=(WORKER,)))
        assert [c.session_id for c in root.subsessions.children()] == [done]
        assert root.subsessions.status(done) is ChildStatus.DONE
        await root.recorder.flush_durable()
    assert "again" not in later.seen
    assert background(home, root.session_id)[-1] == (
        "could not queue again: queued child ../../escape (not a session id)")
    assert not [p for p in home.parent.rglob("*escape*")]
