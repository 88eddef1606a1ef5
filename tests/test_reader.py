"""Reading rollouts written by a real Engine: status, tolerance, lookup, listing, tree."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from subsessions import Engine, ModelRequest, ScriptedModel, SessionConfig
from subsessions.errors import RolloutError, UnknownSession
from subsessions.rollouts import (
    SkippedLine,
    find_rollout,
    list_rollouts,
    read_rollout,
    rollout_tree,
)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments}


async def script(request: ModelRequest) -> list[Any]:
    """Children answer "<prompt> done"; "nest" spawns and waits for a grandchild; "block" hangs."""
    prompt = request.items[0]["content"][0]["text"]
    outputs = [orjson.loads(i["output"]) for i in request.items
               if i["type"] == "function_call_output"]
    if prompt == "nest" and not outputs:
        return [_call("create_session", session_type="mathematician", prompt="leaf two")]
    if prompt == "nest" and len(outputs) == 1:
        return [_call("wait_session", session_id=outputs[0]["session_id"], timeout_ms=5000)]
    if prompt == "block":
        await asyncio.Event().wait()
    return [f"{prompt} done"]


async def one_session(home: Path, *responses: Any) -> Path:
    async with Engine(home, model_client=ScriptedModel(list(responses))) as engine:
        session = await engine.create_session(SessionConfig(instructions="be brief"))
        await session.send_and_wait("hi")
    return Path(session.recorder.path)


@pytest.fixture
async def family(home: Path) -> dict[str, str]:
    """parent (completed) -> c1 tester (completed), c2 default (completed) -> grandchild,
    c3 mathematician (cancelled)."""
    async with Engine(home, model_client=ScriptedModel(script)) as engine:
        parent = await engine.create_session()
        manager = parent.subsessions
        c1 = await manager.spawn_child("tester", "leaf one")
        c2 = await manager.spawn_child("default", "nest")
        c3 = await manager.spawn_child("mathematician", "block")
        assert await manager.wait_child(c1) == "leaf one done"
        assert await manager.wait_child(c2) == "nest done"
        assert await manager.cancel_child(c3)
        await parent.send_and_wait("summarise")
    (grandchild,) = [r.session_id for r in list_rollouts(home, parent=c2)]
    return {"parent": parent.session_id, "c1": c1, "c2": c2, "c3": c3, "gc": grandchild}


async def test_completed_rollout_meta_records_and_answer(home: Path) -> None:
    rollout = read_rollout(await one_session(home, ["hello"]))
    meta = rollout.meta
    assert meta["originator"] == "subsessions"
    assert meta["source"] == "exec"
    assert meta["instructions"] == "be brief"
    assert {"id", "timestamp", "cwd", "cli_version", "model", "model_provider"} <= set(meta)
    assert rollout.session_id == meta["id"]
    assert rollout.parent_id is None
    assert rollout.status == "completed"
    assert rollout.last_agent_message == "hello"
    assert rollout.skipped == ()
    assert all(r["type"] != "session_meta" for r in rollout.records)
    kinds = [r["payload"]["type"] for r in rollout.records if r["type"] == "event_msg"]
    assert kinds[0] == "task_started"
    assert kinds[-1] == "task_complete"
    texts = [(i["role"], i["content"][0]["text"]) for i in rollout.response_items()]
    assert texts == [("user", "hi"), ("assistant", "hello")]


async def test_failed_rollout(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel([RuntimeError("model broke")])) as engine:
        session = await engine.create_session()
        with pytest.raises(RuntimeError):
            await session.send_and_wait("hi")
    rollout = read_rollout(session.recorder.path)
    assert rollout.status == "failed"
    assert rollout.last_agent_message is None
    assert rollout.events("error")[-1]["message"] == "model broke"


async def test_cancelled_running_and_idle_rollouts(home: Path) -> None:
    asked = asyncio.Event()

    async def hang(request: ModelRequest) -> list[str]:
        asked.set()
        await asyncio.Event().wait()
        return ["never"]

    async with Engine(home, model_client=ScriptedModel(hang)) as engine:
        idle = await engine.create_session()
        busy = await engine.create_session()
        task = asyncio.create_task(busy.send_and_wait("hi"))
        await asyncio.wait_for(asked.wait(), 5)
        await busy.recorder.flush_durable()
        assert read_rollout(busy.recorder.path).status == "running"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    cancelled = read_rollout(busy.recorder.path)
    assert cancelled.status == "cancelled"
    assert cancelled.events("turn_aborted") == [{"type": "turn_aborted", "reason": "cancelled"}]
    assert read_rollout(idle.recorder.path).status == "idle"
    assert read_rollout(idle.recorder.path).records == ()


async def test_child_meta_names_its_parent(home: Path, family: dict[str, str]) -> None:
    child = read_rollout(find_rollout(home, family["c1"]))
    assert child.meta["session_type"] == "tester"
    source = child.meta["source"]["subsession"]
    assert source["parent_session_id"] == family["parent"]
    assert source["depth"] == 1
    assert source["session_type"] == "tester"
    assert child.parent_id == family["parent"]
    assert child.source_kind == "subsession"
    grandchild = read_rollout(find_rollout(home, family["gc"]))
    assert grandchild.meta["source"]["subsession"]["depth"] == 2
    assert grandchild.meta["source"]["subsession"]["call_id"]  # spawned by a tool call


async def test_torn_last_line_is_skipped(home: Path) -> None:
    path = await one_session(home, ["hello"])
    whole = read_rollout(path)
    lines = path.read_bytes().count(b"\n")
    with path.open("ab") as f:
        f.write(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"event_msg","payload":{"ty')
    rollout = read_rollout(path)
    assert rollout.records == whole.records
    assert rollout.status == "completed"
    assert rollout.skipped == (SkippedLine(lines + 1, "torn last line"),)


async def test_bad_lines_in_the_middle_are_skipped_and_reported(home: Path) -> None:
    path = await one_session(home, ["hello"])
    whole = read_rollout(path)
    lines = path.read_bytes().splitlines(keepends=True)
    unknown = b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"compacted","payload":{}}\n'
    path.write_bytes(b"".join([*lines[:2], b"{not json\n", unknown, *lines[2:]]))
    rollout = read_rollout(path)
    assert rollout.records == whole.records
    assert rollout.last_agent_message == "hello"
    assert SkippedLine(3, "invalid JSON") in rollout.skipped
    assert all(r["type"] != "compacted" for r in rollout.records)


@pytest.mark.parametrize(
    "content",
    [b"", b'{"a": 1}\n{"b": 2}\n', bytes(range(256)) * 4, b"\n\n\n",
     b'{"timestamp":"x","type":"event_msg","payload":{"type":"task_started"}}\n'],
    ids=["empty", "random-jsonl", "binary", "blank-lines", "no-session-meta"],
)
def test_files_that_are_not_rollouts_raise_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "rollout-not-ours.jsonl"
    path.write_bytes(content)
    with pytest.raises(RolloutError) as caught:
        read_rollout(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("name", ["missing.jsonl", "."], ids=["missing", "directory"])
def test_unreadable_paths_raise_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(RolloutError) as caught:
        read_rollout(path)
    assert str(path) in str(caught.value)


async def test_find_rollout_by_id_and_unique_prefix(home: Path, family: dict[str, str]) -> None:
    a, b = family["c1"], family["c2"]
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    assert shared >= 1
    assert find_rollout(home, a).name.endswith(f"-{a}.jsonl")
    assert read_rollout(find_rollout(home, a[: shared + 1])).session_id == a
    others = [family[k] for k in ("parent", "c3", "gc")]
    ambiguous = a[:shared]
    with pytest.raises(UnknownSession) as caught:
        find_rollout(home, ambiguous)
    assert "ambiguous" in str(caught.value)
    for candidate in [a, b, *(o for o in others if o.startswith(ambiguous))]:
        assert candidate in str(caught.value)


@pytest.mark.parametrize(
    "bad", ["", "../x", "..", "a/b", "*", "ffffffff-0000-7000-8000-000000000000", "x" * 500]
)
async def test_find_rollout_rejects_unknown_and_path_like_ids(
    home: Path, family: dict[str, str], bad: str
) -> None:
    with pytest.raises(UnknownSession):
        find_rollout(home, bad)


async def test_list_rollouts_newest_first_and_filters(home: Path, family: dict[str, str]) -> None:
    everything = list_rollouts(home)
    ids = [r.session_id for r in everything]
    assert sorted(ids) == sorted(family.values())
    assert ids[-1] == family["parent"]  # the oldest comes last
    assert ids.index(family["c3"]) < ids.index(family["c2"]) < ids.index(family["c1"])

    def ids_of(**filters: Any) -> set[str]:
        return {r.session_id for r in list_rollouts(home, **filters)}

    assert ids_of(parent=family["parent"]) == {family["c1"], family["c2"], family["c3"]}
    assert ids_of(parent=family["c2"]) == {family["gc"]}
    assert ids_of(source="exec") == {family["parent"]}
    assert ids_of(source="subsession") == set(family.values()) - {family["parent"]}
    assert ids_of(status="cancelled") == {family["c3"]}
    assert ids_of(status="completed") == set(family.values()) - {family["c3"]}
    assert [r.session_id for r in list_rollouts(home, limit=2)] == ids[:2]


async def test_list_rollouts_leaves_out_unreadable_files(
    home: Path, family: dict[str, str]
) -> None:
    day = find_rollout(home, family["parent"]).parent
    (day / "rollout-2026-01-01T00-00-00-ffffffff-0000-7000-8000-000000000000.jsonl").write_bytes(
        b"garbage\n"
    )
    assert {r.session_id for r in list_rollouts(home)} == set(family.values())


async def test_rollout_tree_nests_children_under_parents(
    home: Path, family: dict[str, str]
) -> None:
    (root,) = rollout_tree(home)
    assert root.rollout.session_id == family["parent"]
    assert [n.rollout.session_id for n in root.children] == [
        family["c1"], family["c2"], family["c3"]
    ]
    nested = root.children[1]
    assert [n.rollout.session_id for n in nested.children] == [family["gc"]]
    assert root.children[0].children == () and nested.children[0].children == ()
    (sub,) = rollout_tree(home, family["c2"])
    assert sub.rollout.session_id == family["c2"]
    assert [n.rollout.session_id for n in sub.children] == [family["gc"]]


async def test_rollout_tree_lists_a_second_top_level_session_as_a_root(
    home: Path, family: dict[str, str]
) -> None:
    other = await one_session(home, ["hello"])
    roots = [n.rollout.session_id for n in rollout_tree(home)]
    assert roots == [family["parent"], read_rollout(other).session_id]
