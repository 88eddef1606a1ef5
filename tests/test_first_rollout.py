"""A top-level rollout starts with the session's first task or first child (issue 12, item 14).

A session that never does anything (an MCP client that connected, listed, and left)
leaves no empty `idle` rollout behind; one that does starts with its `session_meta`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import orjson
import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp_support import Children, connect, create, error, ok

from subsessions import Engine, ScriptedModel
from subsessions.rollouts import list_rollouts, rollout_files

__all__ = ["fake_openai"]


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


def first_records(path: Path | str) -> list[tuple[str, str | None]]:
    """(type, event type) of each line of the file, in order."""
    lines = [orjson.loads(line) for line in Path(path).read_bytes().splitlines()]
    return [(r["type"], r["payload"].get("type")) for r in lines]


async def test_a_session_that_never_ran_leaves_no_rollout(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel(["hi"])) as engine:
        looked = await engine.create_session()
        await engine.destroy_session(looked.session_id)
        await engine.create_session()  # left open until the engine closes
    assert rollout_files(home) == []


async def test_the_first_task_or_child_starts_the_rollout_with_its_meta(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel(["hi", "child answer"])) as engine:
        ran = await engine.create_session()
        assert await ran.send_and_wait("hello") == "hi"
        spawner = await engine.create_session()
        child = await spawner.subsessions.spawn_child("mathematician", "2 + 2?")
        assert await spawner.subsessions.wait_child(child) == "child answer"
    by_id = {s.session_id: s for s in list_rollouts(home).items}
    assert set(by_id) == {ran.session_id, spawner.session_id, child}
    assert first_records(by_id[ran.session_id].path)[:2] == [
        ("session_meta", None), ("turn_context", None)]
    assert first_records(by_id[spawner.session_id].path)[:2] == [
        ("session_meta", None), ("event_msg", "background_event")]
    assert by_id[spawner.session_id].status == "idle"  # a parent that only spawned


async def test_an_mcp_connection_that_spawned_nothing_leaves_no_rollout(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    stranger = "01a1fe74-0553-7695-8454-1cc819fc49e4"
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        assert ok(await session.call_tool("list_sessions", {})) == {"sessions": []}
        assert error(await session.call_tool(
            "wait_session", {"session_id": stranger, "timeout_ms": 10})) == (
            f"unknown session {stranger}")
        assert (await session.list_resources()).resources == []
    assert rollout_files(home) == []

    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "one task")
        assert ok(await session.call_tool(
            "wait_session", {"session_id": child, "timeout_ms": 10_000})) == {
            "result": "answer to one task"}
        listed = {r.uri for r in (await session.list_resources()).resources}
    [parent] = [s for s in list_rollouts(home).items if s.session_id != child]
    assert listed == {f"rollout://{parent.session_id}", f"rollout://{child}"}
    assert parent.source_kind == "mcp"
    assert first_records(parent.path)[0] == ("session_meta", None)


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """The server's stderr, shown when a test fails."""
    path = tmp_path / "server-stderr.log"
    with path.open("w+") as log:
        yield log
    text = path.read_text()
    if text.strip():
        print(f"--- subsessions mcp stderr ---\n{text}")
