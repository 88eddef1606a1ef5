"""Reading rollouts back: status, tolerance, lookup, listing and its index, paging, tree."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import call

from subsessions import Engine, ModelRequest, ScriptedModel, SessionConfig
from subsessions.errors import RolloutError, SubsessionError, UnknownSession
from subsessions.rollouts import (
    SkippedLine,
    find_rollout,
    list_rollouts,
    read_rollout,
    rollout_tree,
)
from subsessions.rollouts import index as index_module
from subsessions.rollouts.recorder import rollout_path


async def script(request: ModelRequest) -> list[Any]:
    """Children answer "<prompt> done"; "nest" spawns and waits for a grandchild; "block" hangs."""
    prompt = request.items[0]["content"][0]["text"]
    outputs = [orjson.loads(i["output"]) for i in request.items
               if i["type"] == "function_call_output"]
    if prompt == "nest" and not outputs:
        return [call("create_session", session_type="mathematician", prompt="leaf two")]
    if prompt == "nest" and len(outputs) == 1:
        return [call("wait_session", session_id=outputs[0]["session_id"], timeout_ms=5000)]
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
    assert meta["base_instructions"] == {"text": "be brief"}  # where Codex reads them
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
        idle.write_meta()  # a rollout that is only its session_meta (none before a task)
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
    [aborted] = cancelled.events("turn_aborted")
    # Codex's reason (it has no "cancelled"), told apart by who cancelled it
    assert (aborted["reason"], aborted["cancelled_by"]) == ("interrupted", "host")
    assert read_rollout(idle.recorder.path).status == "idle"
    assert read_rollout(idle.recorder.path).records == ()


async def test_child_meta_names_its_parent(home: Path, family: dict[str, str]) -> None:
    child = read_rollout(find_rollout(home, family["c1"]))
    assert child.meta["session_type"] == "tester"
    # Codex's sub-agent source, with the parent also at the top level where Codex looks
    assert child.meta["source"] == {"subagent": {"thread_spawn": {
        "parent_thread_id": family["parent"], "depth": 1, "agent_role": "tester",
        "agent_nickname": None, "agent_path": None}}}
    assert child.meta["parent_thread_id"] == family["parent"]
    assert child.parent_id == family["parent"]
    assert child.source_kind == "subsession"
    grandchild = read_rollout(find_rollout(home, family["gc"]))
    assert grandchild.meta["source"]["subagent"]["thread_spawn"]["depth"] == 2
    assert grandchild.meta["subsession"]["call_id"]  # spawned by a tool call


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
    ids = set(family.values()) - {a}
    unique = next(a[:n] for n in range(1, 37) if not any(i.startswith(a[:n]) for i in ids))
    assert read_rollout(find_rollout(home, unique)).session_id == a
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


# -- hand-made rollouts: statuses, summaries, the index, paging ------------------------------

START = 1_790_000_000.0  # 2026-09-21, well before any process of this test run started


def uuid7_at(seconds: float, tail: int = 0) -> str:
    """A uuid7 for a chosen creation time (so tests control order and --since)."""
    value = (int(seconds * 1000) << 80) | (0x7 << 76) | (0b10 << 62) | tail
    return str(uuid.UUID(int=value))


def record(kind: str, payload: dict[str, Any], stamp: str = "2026-09-21T12:00:00.000Z") -> bytes:
    return orjson.dumps({"timestamp": stamp, "type": kind, "payload": payload}) + b"\n"


def event(kind: str, stamp: str = "2026-09-21T12:00:01.500Z", **fields: Any) -> bytes:
    return record("event_msg", {"type": kind, **fields}, stamp)


def tokens(total: int) -> bytes:
    usage = {"input_tokens": total, "output_tokens": 0, "total_tokens": total}
    return event("token_count", info={"last_token_usage": usage, "total_token_usage": usage})


def write_rollout(
    home: Path,
    *lines: bytes,
    session_id: str | None = None,
    started: float = START,
    pid: int | None = None,
    parent: str | None = None,
    timestamp: str | None = None,
) -> Path:
    """A rollout as the engine lays it out: the meta line, then `lines` as given."""
    session_id = session_id or uuid7_at(started)
    meta: dict[str, Any] = {
        "id": session_id,
        "timestamp": timestamp or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "cwd": "/work", "originator": "subsessions", "cli_version": "0", "model": "m",
        "model_provider": "scripted", "instructions": "be brief",
        "source": "exec" if parent is None else {
            "subsession": {"parent_session_id": parent, "depth": 1, "session_type": "tester"}
        },
    }
    if parent is not None:
        meta["session_type"] = "tester"
    if pid is not None:
        meta["pid"] = pid
    path = Path(rollout_path(home, session_id, started))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record("session_meta", meta, "2026-09-21T12:00:00.250Z") + b"".join(lines))
    return path


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


OPEN_TASK = (event("task_started"), tokens(40))


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        ((), "idle"),
        ((*OPEN_TASK, event("task_complete", last_agent_message="ok")), "completed"),
        ((*OPEN_TASK, event("error", message="boom")), "failed"),
        ((*OPEN_TASK, event("turn_aborted", reason="cancelled")), "cancelled"),
        ((*OPEN_TASK, event("turn_aborted", reason="interrupted")), "interrupted"),
        # a second task that has not ended decides, not the first one's ending
        ((*OPEN_TASK, event("task_complete"), event("task_started")), "running"),
        # a parent's rollout gains child notices after its own task ended
        ((*OPEN_TASK, event("task_complete"), event("background_event", message="x")),
         "completed"),
    ],
    ids=["idle", "completed", "failed", "cancelled", "aborted-interrupted", "second-task",
         "notice-after-end"],
)
def test_status_from_the_last_task_record(
    home: Path, lines: tuple[bytes, ...], status: str
) -> None:
    path = write_rollout(home, *lines, pid=os.getpid(), started=time.time())
    assert read_rollout(path).status == status
    (listed,) = list_rollouts(home)
    assert listed.status == status


def test_open_task_is_running_only_while_its_writer_lives(home: Path, dead_pid: int) -> None:
    now = time.time()
    alive = write_rollout(home, *OPEN_TASK, pid=os.getpid(), started=now)
    gone = write_rollout(home, *OPEN_TASK, pid=dead_pid, started=now + 1)
    no_pid = write_rollout(home, *OPEN_TASK, started=now + 2)
    # our pid, but this process started long after the session did: the pid was reused
    reused = write_rollout(home, *OPEN_TASK, pid=os.getpid(), started=START)
    assert read_rollout(alive).status == "running"
    assert read_rollout(gone).status == "interrupted"
    assert read_rollout(no_pid).status == "interrupted"
    assert read_rollout(reused).status == "interrupted"
    statuses = {r.path: r.status for r in list_rollouts(home)}
    assert statuses == {str(alive): "running", str(gone): "interrupted",
                        str(no_pid): "interrupted", str(reused): "interrupted"}


def test_a_task_resumed_by_another_process_is_judged_by_that_process(
    home: Path, dead_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed session keeps its first session_meta; its turn_context names the new writer."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time()))

    def resumed_by(pid: int, stamp: str, started: float) -> Path:
        return write_rollout(
            home, *OPEN_TASK, event("task_complete"),
            record("turn_context", {"cwd": "/work", "pid": pid}, stamp), event("task_started"),
            pid=dead_pid, started=started,
        )

    live = resumed_by(os.getpid(), now, START)
    stale = resumed_by(os.getpid(), "2001-01-01T00:00:00.000Z", START + 1)  # an earlier owner
    gone = resumed_by(dead_pid, now, START + 2)
    assert len({live, stale, gone}) == 3
    expected = {str(live): "running", str(stale): "interrupted", str(gone): "interrupted"}
    assert {str(p): read_rollout(p).status for p in (live, stale, gone)} == expected
    assert {r.path: r.status for r in list_rollouts(home)} == expected
    monkeypatch.setattr(index_module, "_DIRECT", 0)
    for _ in range(2):  # building the index, then reading from it
        assert {r.path: r.status for r in list_rollouts(home)} == expected


KILLED = r"""
import asyncio, sys
from pathlib import Path
from subsessions import Engine, ScriptedModel

async def main(home):
    async def hang(request):
        await asyncio.Event().wait()

    async with Engine(home, model_client=ScriptedModel(hang)) as engine:
        parent = await engine.create_session()
        asyncio.get_running_loop().create_task(parent.send_and_wait("work"))
        child = await parent.subsessions.spawn_child("tester", "work too")
        while len(engine.model_client.requests) < 2:
            await asyncio.sleep(0.01)
        paths = [Path(parent.recorder.path), *Path(home).glob(f"sessions/*/*/*/*{child}.jsonl")]
        while len(paths) < 2 or any(b"user_message" not in p.read_bytes() for p in paths):
            await asyncio.sleep(0.01)
            paths = paths[:1] + list(Path(home).glob(f"sessions/*/*/*/*{child}.jsonl"))
        print(parent.session_id, child, flush=True)
        await asyncio.Event().wait()

asyncio.run(main(sys.argv[1]))
"""


def test_a_process_killed_mid_task_leaves_interrupted_whole_rollouts(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(home)], stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        parent, child = line.split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    for session_id in (parent, child):
        path = find_rollout(home, session_id)
        rollout = read_rollout(path)
        assert rollout.status == "interrupted"
        assert rollout.skipped == ()
        data = path.read_bytes()
        assert data.endswith(b"\n")
        assert all(orjson.loads(line) for line in data.splitlines())  # every line whole
        assert rollout.events("task_started") and rollout.events("user_message")
    assert {r.session_id: r.status for r in list_rollouts(home)} == {
        parent: "interrupted", child: "interrupted"
    }
    assert list_rollouts(home, parent=parent)[0].session_id == child


def test_non_utf8_bytes_in_the_middle_are_skipped_and_reported(home: Path) -> None:
    path = write_rollout(home, event("task_started"), b'{"text": "\xff\xfe"}\n',
                         event("task_complete"))
    rollout = read_rollout(path)
    assert rollout.skipped == (SkippedLine(3, "invalid JSON"),)
    assert rollout.status == "completed"


def test_a_junk_first_line_means_not_a_rollout(home: Path) -> None:
    path = write_rollout(home, event("task_started"))
    path.write_bytes(b"junk\n" + path.read_bytes())
    with pytest.raises(RolloutError, match="not a subsessions rollout"):
        read_rollout(path)
    assert list(list_rollouts(home)) == []
    assert list_rollouts(home).unreadable == (str(path),)


def test_summaries_agree_with_whole_reads(home: Path, family: dict[str, str]) -> None:
    for summary in list_rollouts(home):
        whole = read_rollout(summary.path)
        assert summary.session_id == whole.session_id
        assert summary.status == whole.status
        assert summary.tokens == (whole.total_tokens or None)
        assert summary.duration == whole.duration
        assert (summary.parent_id, summary.source_kind, summary.profile, summary.model) == (
            whole.parent_id, whole.source_kind, whole.profile, whole.model
        )
        assert (summary.started, summary.pid) == (whole.meta["timestamp"], whole.meta["pid"])


def test_summary_reads_back_past_a_long_ending(home: Path) -> None:
    """The token total lies before an answer far longer than the tail window."""
    answer = "x" * 100_000
    path = write_rollout(
        home, event("task_started"), tokens(1234),
        record("response_item", {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": answer}]}),
        event("agent_message", message=answer),
        event("task_complete", "2026-09-21T12:00:09.750Z", last_agent_message=answer),
        b'{"timestamp":"2026-09-21T12:00:10.000Z","type":"event_msg","payl',  # torn
    )
    (summary,) = list_rollouts(home)
    assert (summary.status, summary.tokens, summary.duration) == ("completed", 1234, 9.5)
    assert summary.size == len(path.read_bytes()) - len(path.read_bytes().rsplit(b"\n", 1)[1])


# -- the index beside the rollouts ---------------------------------------------------------


@pytest.fixture
def indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the index from the first file on (normally only past the first 128)."""
    monkeypatch.setattr(index_module, "_DIRECT", 0)


def rows(home: Path) -> list[tuple[str, str, int | None]]:
    return [(r.session_id, r.status, r.tokens) for r in list_rollouts(home)]


def test_index_is_written_and_gives_the_same_rows(home: Path, indexed: None) -> None:
    for offset in range(3):
        write_rollout(home, *OPEN_TASK, event("task_complete"), started=START + offset)
    first = rows(home)
    index = home / "sessions" / "index.jsonl"
    assert index.exists() and index.stat().st_mode & 0o777 == 0o600
    before = index.read_bytes()
    assert rows(home) == first
    assert index.read_bytes() == before  # nothing changed, nothing written
    assert [s for s, _, _ in first] == sorted((s for s, _, _ in first), reverse=True)


def test_index_notices_a_rollout_that_grew(home: Path, indexed: None) -> None:
    path = write_rollout(home, *OPEN_TASK, pid=os.getpid(), started=time.time())
    assert rows(home)[0][1:] == ("running", 40)
    with path.open("ab") as f:
        f.write(tokens(90) + event("task_complete"))
    assert rows(home)[0][1:] == ("completed", 90)


def test_index_rederives_liveness_of_an_unchanged_open_task(home: Path, indexed: None) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_rollout(home, *OPEN_TASK, pid=sleeper.pid, started=time.time() + 1)
        assert rows(home)[0][1] == "running"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert rows(home)[0][1] == "interrupted"  # same file, same index entry


@pytest.mark.parametrize(
    "damage",
    [b"", b"garbage\n\xff\n", b'{"index":"something-else","version":9}\n["x"]\n', b"TORN"],
    ids=["empty", "garbage", "foreign", "torn-tail"],
)
def test_a_damaged_index_is_ignored_and_rebuilt(home: Path, indexed: None, damage: bytes) -> None:
    for offset in range(3):
        write_rollout(home, *OPEN_TASK, event("error", message="x"), started=START + offset)
    good = rows(home)
    index = home / "sessions" / "index.jsonl"
    index.write_bytes(index.read_bytes() + damage if damage == b"TORN" else damage)
    assert rows(home) == good
    assert rows(home) == good


def test_index_entries_of_another_file_are_not_trusted(home: Path, indexed: None) -> None:
    """An entry is tied to its file's size, mtime and inode, not to its id alone."""
    path = write_rollout(home, *OPEN_TASK, event("task_complete"))
    assert rows(home)[0][1] == "completed"
    data = path.read_bytes().replace(b'"task_complete"', b'"error"        ')
    path.unlink()
    path.write_bytes(data)  # same id, same size, new file
    assert rows(home)[0][1] == "failed"


# -- paging, filters, lookups ----------------------------------------------------------------


def test_pages_are_stable_while_new_rollouts_appear(home: Path) -> None:
    made = [write_rollout(home, event("task_started"), event("task_complete"),
                          started=START + i) for i in range(7)]
    expected = [read_rollout(p).session_id for p in reversed(made)]
    seen: list[str] = []
    cursor = None
    for page_number in range(10):
        page = list_rollouts(home, limit=3, cursor=cursor)
        seen += [r.session_id for r in page]
        write_rollout(home, event("task_started"), started=START + 100 + page_number)  # newer
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == expected
    assert list_rollouts(home, cursor=expected[-1]).items == ()


def test_since_filters_by_creation_time(home: Path) -> None:
    old = write_rollout(home, event("task_started"), started=START)
    new = write_rollout(home, event("task_started"), started=START + 3600)
    since = datetime.fromtimestamp(START + 60)
    assert [r.path for r in list_rollouts(home, since=since)] == [str(new)]
    assert {r.path for r in list_rollouts(home)} == {str(old), str(new)}


@pytest.mark.parametrize(
    ("filters", "problem"),
    [({"status": "done"}, "status must be one of"), ({"limit": 0}, "limit"),
     ({"cursor": "../x"}, "not a cursor"), ({"parent": "a/b"}, "not a parent session id")],
)
def test_bad_list_arguments_are_clear_errors(
    home: Path, filters: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SubsessionError, match=problem):
        list_rollouts(home, **filters)


def test_find_rollout_accepts_an_upper_case_prefix(home: Path) -> None:
    path = write_rollout(home, event("task_started"))
    session_id = read_rollout(path).session_id
    assert find_rollout(home, session_id[:13].upper()) == path


def test_find_rollout_refuses_a_symlink(home: Path, tmp_path: Path) -> None:
    target = write_rollout(tmp_path / "elsewhere", event("task_started"))
    link = home / "sessions" / "2026" / "09" / "21" / target.name
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    with pytest.raises(RolloutError, match="symlink"):
        find_rollout(home, read_rollout(target).session_id)
    assert list_rollouts(home).unreadable == (str(link),)


@pytest.mark.parametrize("bad", ["\x00", "a\\b", "..\\x", "x\n", "%2e%2e/x"])
def test_find_rollout_rejects_more_hostile_ids(home: Path, bad: str) -> None:
    write_rollout(home, event("task_started"))
    with pytest.raises(UnknownSession):
        find_rollout(home, bad)


def test_tree_survives_a_parent_cycle_in_hand_made_files(home: Path) -> None:
    a, b = uuid7_at(START), uuid7_at(START + 1)
    write_rollout(home, session_id=a, parent=b, started=START)
    write_rollout(home, session_id=b, parent=a, started=START + 1)
    (cut,) = rollout_tree(home)  # the oldest of the cycle is shown as a root, and marked
    assert (cut.rollout.session_id, cut.cycle) == (a, True)
    assert [(n.rollout.session_id, n.cycle, n.children) for n in cut.children] == [(b, False, ())]
    (root,) = rollout_tree(home, a)
    assert [n.rollout.session_id for n in root.children] == [b]
    assert root.children[0].children == ()
