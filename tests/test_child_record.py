"""A child's one ending has one owner (`Child.settle`): a cancel shows as CANCELLING
until the child has ended its own work, and a cancel that lands before a child's first step
is delivered there, so the child's own clean-up writes its ending (events, hooks, rollout)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from subsessions import (
    ChildStatus,
    Engine,
    Hooks,
    ModelRequest,
    Profile,
    ScriptedModel,
    Session,
    SessionConfig,
)
from subsessions._core.conversation import Child, settle_itself
from subsessions._core.figures import Figures
from subsessions._core.kit import Kit
from subsessions.children import Done, Failed
from subsessions.events import SessionEvent
from subsessions.ids import new_session_id
from subsessions.models.base import TokenUsage
from subsessions.rollouts.reader import read_rollout
from subsessions.testing import plain_ending
from subsessions.usage import Usage

WORKER = Profile(name="worker", developer_instructions="work")


def terminal_events(path: str) -> list[dict[str, Any]]:
    kinds = {"task_complete", "turn_aborted", "error"}
    return [e for e in read_rollout(path).records
            if e["type"] == "event_msg" and e["payload"]["type"] in kinds]


async def test_a_cancel_shows_as_cancelling_until_the_child_has_ended(home: Path) -> None:
    gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    at_gate = asyncio.Event()

    async def respond(request: ModelRequest) -> Any:
        at_gate.set()
        return await gate

    seen: list[ChildStatus] = []
    async with Engine(home, model_client=ScriptedModel(respond), profiles={}) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "go")
        await at_gate.wait()
        assert manager.status(cid) is ChildStatus.PENDING

        def on_event(event: SessionEvent) -> None:
            if event.type == "session.idle" and event.session_id == cid:
                seen.append(manager.status(cid))  # written its ending, not settled yet

        parent.on(on_event)
        assert await manager.cancel_child(cid) is True
        assert seen == [ChildStatus.CANCELLING]
        assert manager.status(cid) is ChildStatus.CANCELLED
        assert manager.info(cid).outcome() == {"status": "cancelled", "error": "cancelled"}


async def test_a_cancel_before_the_first_step_lets_the_child_write_its_own_ending(
    home: Path,
) -> None:
    calls: list[ModelRequest] = []
    ended: list[dict[str, Any]] = []

    def on_session_end(data: dict[str, Any]) -> None:
        ended.append(data)

    async with Engine(home, model_client=ScriptedModel(calls.append), profiles={}) as engine:
        events: list[SessionEvent] = []
        parent = await engine.create_session(
            SessionConfig(custom_agents=(WORKER,), hooks=Hooks(on_session_end=on_session_end))
        )
        parent.on(events.append)
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "go")
        # No await in between: the child's task has not run a line yet.
        assert await manager.cancel_child(cid) is True
        info = manager.info(cid)
        await engine.close()  # the end-of-task hook runs beside the ending; close drains it
    assert calls == []  # the model was never asked
    assert info.status is ChildStatus.CANCELLED
    mine = [e.type for e in events if e.session_id == cid]
    assert mine == ["session.start", "session.idle"]
    [failed] = [e for e in events if e.type == "subagent.failed"]
    assert failed.data["remote_session_id"] == cid and failed.data["cancelled"] is True
    idle = next(e for e in events if e.session_id == cid and e.type == "session.idle")
    assert idle.data["aborted"] is True
    assert [d["reason"] for d in ended if d["session_id"] == cid] == ["abort"]
    [end] = terminal_events(info.rollout_path)
    assert end["payload"]["reason"] == "interrupted"  # Codex's word: it has no "cancelled"
    assert plain_ending(end["payload"]) == {"type": "turn_aborted", "reason": "cancelled"}


def _child(engine: Engine, parent: Session) -> Child:
    """A child of `parent`, not started, that settles itself."""
    kit = Kit.of(SessionConfig(model="m"), WORKER, None, parent.tree, 1)
    return parent.new_child(new_session_id(), kit, "call_1", None, settle_itself, None)


async def test_settle_is_the_one_terminal_transition(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel([]), profiles={}) as engine:
        record = _child(engine, await engine.create_session())
        assert record.status is ChildStatus.PENDING and not record.settled
        record.settle(Done("answer"))
        assert record.finished.done() and record.result() == "answer"
        with pytest.raises(RuntimeError, match="has ended already"):
            record.settle(Failed("late"))
        assert record.result() == "answer"  # the first ending stands


async def test_a_remote_runs_figures_land_in_the_child(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel([]), profiles={}) as engine:
        record = _child(engine, await engine.create_session())
        begun = record.begun
        record.apply(Figures(TokenUsage(7, 3), 2, 1, "backup", (2, 10)))
        assert record.usage() == Usage(7, 3, 1, 2)
        assert (record.answered_by, record.begun) == ("backup", begun)
        assert (record.meter.turns, record.meter.tokens) == (2, 10)  # what the shard counted
        record.apply(Figures(TokenUsage(9, 4), 3, 1, None))  # a live figure: no meter's
        assert (record.usage().turns, record.answered_by) == (3, None)
        assert (record.meter.turns, record.meter.tokens) == (2, 10)
        record.settle(Done(None))
