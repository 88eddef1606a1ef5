"""Resume and fork: a session continued from its rollout, in the same file or in a new one.

What a user notices: the model sees the old conversation followed by the new prompt;
the rollout grows (its old lines untouched) or a fork starts a new file that names its
origin; a resumed parent knows how each of its children ended; a damaged rollout still
resumes and says what was skipped; bad ids and foreign files give clear errors.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from subsessions import (
    ChildCancelled,
    ChildFailed,
    ChildStatus,
    Engine,
    ModelRequest,
    Profile,
    RolloutError,
    ScriptedModel,
    SessionBusy,
    SessionConfig,
    SubsessionError,
    Tool,
    UnknownSession,
)
from subsessions.ids import new_session_id
from subsessions.items import assistant_message, user_message
from subsessions.rollouts import list_rollouts, read_rollout, rollout_files
from subsessions.rollouts.recorder import rollout_path
from subsessions.testing import plain_ending

INSTRUCTIONS = "Answer about the weather, briefly."
FIRST_PROMPT = "What is the weather in Paris?"
FIRST_ANSWER = "It is sunny in Paris."
WORKER = Profile(name="worker", description="does one job",
                 developer_instructions="You are a worker.")


# -- helpers ------------------------------------------------------------------------------
def fn_call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "call_id": call_id, "arguments": arguments}


def lookup_tool() -> Tool:
    return Tool(
        name="lookup", description="the weather in a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        handler=lambda arguments, invocation: f"sunny in {arguments['city']}",
    )


def first_prompt(request: ModelRequest) -> str:
    return str(request.items[0]["content"][0]["text"])


def last_user_text(request: ModelRequest) -> str:
    users = [i for i in request.items if i.get("type") == "message" and i.get("role") == "user"]
    return str(users[-1]["content"][0]["text"])


def outputs(request: ModelRequest) -> list[str]:
    return [str(i["output"]) for i in request.items if i["type"] == "function_call_output"]


def answering(text: str) -> Callable[[ModelRequest], list[Any]]:
    return lambda request: [text]


async def weather_session(home: Path) -> tuple[str, Path, list[dict[str, Any]]]:
    """A finished session: a user question, a tool call and its output, an answer.

    Returns its id, its rollout and its history as the model would see it next.
    """

    def script(request: ModelRequest) -> list[Any]:
        if not outputs(request):
            return [fn_call("lookup", "call_paris", city="Paris")]
        return [FIRST_ANSWER]

    async with Engine(home, model_client=ScriptedModel(script)) as engine:
        session = await engine.create_session(
            SessionConfig(instructions=INSTRUCTIONS, tools=[lookup_tool()])
        )
        assert await session.send_and_wait(FIRST_PROMPT) == FIRST_ANSWER
        history = list(session.history)
    return session.session_id, Path(session.recorder.path), history


def content(path: Path) -> bytes:
    return path.read_bytes()


def file_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def background_messages(path: Path) -> list[str]:
    return [str(e["message"]) for e in read_rollout(path).events("background_event")]


def unique_prefix(target: str, others: list[str]) -> str:
    """The shortest prefix (8 characters at least) of `target` that no other id starts with."""
    for length in range(8, len(target) + 1):
        prefix = target[:length]
        if not any(other.startswith(prefix) for other in others):
            return prefix
    raise AssertionError("ids are not distinct")


def dead_pid() -> int:
    """A pid no process can have: one above the kernel's limit."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except OSError:  # pragma: no cover - no /proc
        return 2**31 - 2


def stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"


def write_rollout(
    home: Path,
    *body: tuple[str, dict[str, Any]],
    pid: int,
    session_id: str | None = None,
    source: str | dict[str, Any] = "exec",
    session_type: str | None = None,
    at: float | None = None,
    last_after: float = 0.0,
) -> tuple[str, Path]:
    """A rollout as another (now gone) process would have left it, started `at` (now) and
    written last `last_after` seconds later."""
    session_id = session_id or new_session_id()
    now = time.time() if at is None else at
    meta: dict[str, Any] = {
        "id": session_id, "timestamp": stamp(now)[:19] + "Z", "cwd": str(home),
        "originator": "subsessions", "cli_version": "0.1.0", "source": source,
        "model": "scripted", "model_provider": "scripted", "instructions": "", "pid": pid,
    }
    if session_type is not None:
        meta["session_type"] = session_type
    lines = [{"timestamp": stamp(now), "type": "session_meta", "payload": meta}]
    lines += [{"timestamp": stamp(now), "type": kind, "payload": payload} for kind, payload in body]
    if body:
        lines[-1]["timestamp"] = stamp(now + last_after)
    path = Path(rollout_path(home, session_id, now))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return session_id, path


def open_task(prompt: str, pid: int) -> list[tuple[str, dict[str, Any]]]:
    """The head of a task that never ended."""
    return [
        ("turn_context", {"cwd": "/", "approval_policy": "never", "model": "scripted",
                          "pid": pid}),
        ("event_msg", {"type": "task_started"}),
        ("response_item", user_message(prompt)),
        ("event_msg", {"type": "user_message", "message": prompt}),
    ]


def snapshot(root: Path) -> dict[str, tuple[bool, bytes | None]]:
    """Every path under `root`, with the content of each file."""
    found: dict[str, tuple[bool, bytes | None]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.join(folder, name)] = (True, None)
        for name in files:
            path = os.path.join(folder, name)
            found[path] = (False, Path(path).read_bytes())
    return found


# -- resume continues the conversation ------------------------------------------------------
@pytest.mark.parametrize("how", ["full id", "unique prefix", "path"])
async def test_resume_shows_the_model_the_old_conversation_then_the_new_prompt(
    home: Path, how: str
) -> None:
    session_id, path, history = await weather_session(home)
    other_id, _, _ = await weather_session(home)  # a neighbour, so a prefix must tell them apart
    target: str | Path = {
        "full id": session_id,
        "unique prefix": unique_prefix(session_id, [other_id]),
        "path": path,
    }[how]
    assert len(history) == 4  # the question, the call, its output, the answer
    model = ScriptedModel(answering("Also sunny in Rome."))

    async with Engine(home, model_client=model) as engine:
        resumed = await engine.resume_session(target, SessionConfig(tools=[lookup_tool()]))
        assert resumed.session_id == session_id
        assert engine.get_session(session_id) is resumed
        answer = await resumed.send_and_wait("And in Rome?")

    assert answer == "Also sunny in Rome."
    [request] = model.requests
    assert list(request.items) == [*history, user_message("And in Rome?")]
    kinds = [(i["type"], i.get("role")) for i in request.items]
    assert kinds == [("message", "user"), ("function_call", None),
                     ("function_call_output", None), ("message", "assistant"),
                     ("message", "user")]
    assert request.items[1]["call_id"] == request.items[2]["call_id"] == "call_paris"
    assert request.items[2]["output"] == "sunny in Paris"
    assert request.instructions == INSTRUCTIONS  # kept from the rollout
    assert "lookup" in [spec["name"] for spec in request.tools]  # the config supplied it


async def test_resume_appends_a_new_task_to_the_same_file(home: Path) -> None:
    session_id, path, _ = await weather_session(home)
    before = path.read_bytes()
    old_lines = file_lines(path)
    model = ScriptedModel(answering("Also sunny in Rome."))

    async with Engine(home, model_client=model) as engine:
        resumed = await engine.resume_session(session_id)
        assert resumed.recorder.path == str(path)
        await resumed.send_and_wait("And in Rome?")

    assert rollout_files(home) == [path]  # no second file
    after = path.read_bytes()
    assert after.startswith(before)
    new_lines = file_lines(path)
    assert new_lines[: len(old_lines)] == old_lines  # byte for byte
    every = records(path)
    assert [r["type"] for r in every].count("session_meta") == 1
    assert every[0]["payload"]["id"] == session_id
    appended = every[len(old_lines):]
    events = [r["payload"] for r in appended if r["type"] == "event_msg"]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "background_event"
    assert "resumed" in events[0]["message"]
    assert session_id in events[0]["message"]
    assert kinds.count("task_started") == 1
    terminal = [e for e in events if e["type"] in ("task_complete", "error", "turn_aborted")]
    assert [plain_ending(e) for e in terminal] == [
        {"type": "task_complete", "last_agent_message": "Also sunny in Rome."}]
    # the resumed task is a turn of its own: a new turn id on its context, start and end
    started = next(e for e in events if e["type"] == "task_started")
    context = next(r["payload"] for r in appended if r["type"] == "turn_context")
    old_turns = {r["payload"].get("turn_id") for r in every[:len(old_lines)]} - {None}
    assert started["turn_id"] == context["turn_id"] == terminal[0]["turn_id"]
    assert started["turn_id"] not in old_turns
    assert {"type": "user_message", "message": "And in Rome?"} in events
    context = next(r for r in appended if r["type"] == "turn_context")
    assert context["payload"]["pid"] == os.getpid()
    rollout = read_rollout(path)
    assert rollout.skipped == ()
    assert rollout.status == "completed"
    assert rollout.last_agent_message == "Also sunny in Rome."
    texts = [i["content"][0]["text"] for i in rollout.response_items() if i["type"] == "message"]
    assert texts == [FIRST_PROMPT, FIRST_ANSWER, "And in Rome?", "Also sunny in Rome."]
    # token totals carry on from the first run
    totals = [e["info"]["total_token_usage"]["total_tokens"] for e in rollout.events("token_count")]
    assert totals == sorted(totals)
    assert len(totals) == 3


async def test_a_session_resumed_twice_sees_both_earlier_tasks(home: Path) -> None:
    session_id, path, history = await weather_session(home)
    for prompt in ("And in Rome?", "And in Oslo?"):
        async with Engine(home, model_client=ScriptedModel(answering(f"{prompt} sunny"))) as e:
            await (await e.resume_session(session_id)).send_and_wait(prompt)
    model = ScriptedModel(answering("done"))
    async with Engine(home, model_client=model) as engine:
        await (await engine.resume_session(session_id)).send_and_wait("Thanks")

    assert list(model.requests[0].items) == [
        *history,
        user_message("And in Rome?"), assistant_message("And in Rome? sunny"),
        user_message("And in Oslo?"), assistant_message("And in Oslo? sunny"),
        user_message("Thanks"),
    ]
    every = records(path)
    assert [r["type"] for r in every].count("session_meta") == 1
    tasks = [r for r in every if r["type"] == "event_msg" and r["payload"]["type"] in
             ("task_started", "task_complete")]
    assert [r["payload"]["type"] for r in tasks] == ["task_started", "task_complete"] * 4


# -- fork -----------------------------------------------------------------------------------
async def test_fork_starts_a_new_file_naming_its_origin_and_leaves_the_original_alone(
    home: Path,
) -> None:
    session_id, path, history = await weather_session(home)
    before = path.read_bytes()

    def script(request: ModelRequest) -> list[Any]:
        return [f"answer to {last_user_text(request)}"]

    model = ScriptedModel(script)
    async with Engine(home, model_client=model) as engine:
        fork = await engine.fork_session(session_id)
        assert fork.session_id != session_id
        assert fork.forked_from == session_id
        fork_path = Path(fork.recorder.path)
        assert fork_path != path
        assert await fork.send_and_wait("And in Rome?") == "answer to And in Rome?"
        # the original continues on its own: it never sees the fork's question
        original = await engine.resume_session(session_id)
        assert await original.send_and_wait("And in Oslo?") == "answer to And in Oslo?"

    fork_request, original_request = model.requests
    assert list(fork_request.items) == [*history, user_message("And in Rome?")]
    assert list(original_request.items) == [*history, user_message("And in Oslo?")]
    assert fork_request.instructions == INSTRUCTIONS

    assert sorted(rollout_files(home)) == sorted([path, fork_path])
    fork_records = records(fork_path)
    assert fork_records[0]["type"] == "session_meta"
    meta = fork_records[0]["payload"]
    assert meta["id"] == fork.session_id
    assert meta["forked_from_id"] == session_id
    assert [r["type"] for r in fork_records].count("session_meta") == 1
    forked = read_rollout(fork_path)
    assert forked.status == "completed"
    assert forked.response_items() == [
        *history, user_message("And in Rome?"), assistant_message("answer to And in Rome?"),
    ]
    assert any("forked from" in m and session_id in m for m in background_messages(fork_path))

    original_now = path.read_bytes()
    assert original_now.startswith(before)
    assert b"And in Rome?" not in original_now  # nothing of the fork reached the original
    assert "forked_from_id" not in records(path)[0]["payload"]


async def test_fork_of_a_forgotten_fork_leaves_both_files_as_they_were(home: Path) -> None:
    _, path, history = await weather_session(home)
    async with Engine(home, model_client=ScriptedModel(answering("from the fork"))) as engine:
        fork = await engine.fork_session(path)  # by path this time
        await fork.send_and_wait("fork question")
    fork_path = Path(fork.recorder.path)
    before = {p: p.read_bytes() for p in (path, fork_path)}

    model = ScriptedModel(answering("second generation"))
    async with Engine(home, model_client=model) as engine:
        grandchild = await engine.fork_session(fork.session_id)
        await grandchild.send_and_wait("another question")

    assert records(Path(grandchild.recorder.path))[0]["payload"]["forked_from_id"] == (
        fork.session_id
    )
    assert list(model.requests[0].items) == [
        *history, user_message("fork question"), assistant_message("from the fork"),
        user_message("another question"),
    ]
    assert {p: p.read_bytes() for p in (path, fork_path)} == before


# -- a resumed parent and its children ------------------------------------------------------
async def parent_with_children(home: Path) -> dict[str, str]:
    """A parent whose children completed, failed, were cancelled, or were interrupted."""
    blocking = asyncio.Event()

    async def script(request: ModelRequest) -> Any:
        prompt = first_prompt(request)
        if prompt == "fail":
            return RuntimeError("disk on fire")
        if prompt == "block":
            blocking.set()
            await asyncio.Event().wait()
        return [f"{prompt} done"]

    async with Engine(home, model_client=ScriptedModel(script)) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=[WORKER]))
        await parent.send_and_wait("plan")
        manager = parent.subsessions
        done = await manager.spawn_child("worker", "ok")
        assert await manager.wait_child(done, timeout=5) == "ok done"
        failed = await manager.spawn_child("worker", "fail")
        with pytest.raises(ChildFailed):
            await manager.wait_child(failed, timeout=5)
        cancelled = await manager.spawn_child("worker", "block")
        await asyncio.wait_for(blocking.wait(), 5)
        assert await manager.cancel_child(cancelled)
    # a child whose process died mid-task: no terminal record, and its writer is gone
    gone = dead_pid()
    source = {"subsession": {"parent_session_id": parent.session_id, "depth": 1,
                             "session_type": "worker", "call_id": "spawn_lost"}}
    interrupted, _ = write_rollout(home, *open_task("long job", gone), pid=gone, source=source,
                                   session_type="worker")
    return {"parent": parent.session_id, "done": done, "failed": failed,
            "cancelled": cancelled, "interrupted": interrupted}


async def test_a_resumed_parent_knows_how_each_child_ended(home: Path) -> None:
    ids = await parent_with_children(home)
    statuses = {r.session_id: r.status for r in list_rollouts(home, parent=ids["parent"])}
    assert statuses == {ids["done"]: "completed", ids["failed"]: "failed",
                        ids["cancelled"]: "cancelled", ids["interrupted"]: "interrupted"}

    async with Engine(home, model_client=ScriptedModel(answering("unused"))) as engine:
        parent = await engine.resume_session(ids["parent"])
        manager = parent.subsessions
        assert manager.status(ids["done"]) is ChildStatus.DONE
        assert manager.status(ids["failed"]) is ChildStatus.FAILED
        assert manager.status(ids["cancelled"]) is ChildStatus.CANCELLED
        assert manager.status(ids["interrupted"]) is ChildStatus.FAILED
        assert manager.running() == []

        assert await manager.wait_child(ids["done"], timeout=0) == "ok done"
        with pytest.raises(ChildFailed) as failed:
            await manager.wait_child(ids["failed"], timeout=0)
        assert failed.value.session_id == ids["failed"]
        assert "disk on fire" in failed.value.error
        with pytest.raises(ChildCancelled) as cancelled:
            await manager.wait_child(ids["cancelled"], timeout=0)
        assert cancelled.value.session_id == ids["cancelled"]
        with pytest.raises(ChildFailed) as lost:
            await manager.wait_child(ids["interrupted"], timeout=0)
        assert "interrupted" in lost.value.error
        assert "interrupted" in str(lost.value)

        infos = {info.session_id: info for info in manager.children()}
        assert set(infos) == {ids["done"], ids["failed"], ids["cancelled"], ids["interrupted"]}
        assert {i: info.status for i, info in infos.items()} == {
            ids["done"]: ChildStatus.DONE, ids["failed"]: ChildStatus.FAILED,
            ids["cancelled"]: ChildStatus.CANCELLED, ids["interrupted"]: ChildStatus.FAILED,
        }
        assert infos[ids["done"]].result == "ok done"
        assert "disk on fire" in (infos[ids["failed"]].error or "")
        assert "interrupted" in (infos[ids["interrupted"]].error or "")
        assert {info.session_type for info in infos.values()} == {"worker"}
        for child_id, info in infos.items():
            assert Path(info.rollout_path).name.endswith(f"{child_id}.jsonl")
        assert infos[ids["done"]].usage.total_tokens > 0  # from the child's rollout


async def test_a_resumed_parent_lists_its_children_oldest_first(home: Path) -> None:
    ids = await parent_with_children(home)
    async with Engine(home, model_client=ScriptedModel(answering("unused"))) as engine:
        parent = await engine.resume_session(ids["parent"])
        order = [info.session_id for info in parent.subsessions.children()]

    # as before the resume (and as `children()` promises): the order they were started in
    assert order == [ids["done"], ids["failed"], ids["cancelled"], ids["interrupted"]]


async def test_a_resumed_parent_reports_how_long_its_children_ran(home: Path) -> None:
    ids = await parent_with_children(home)
    # one more child, run yesterday by a process long gone: it worked for five seconds
    source = {"subsession": {"parent_session_id": ids["parent"], "depth": 1,
                             "session_type": "worker", "call_id": "spawn_old"}}
    yesterday = time.time() - 86_400
    slow, _ = write_rollout(
        home, *open_task("slow job", dead_pid()),
        ("event_msg", {"type": "task_complete", "last_agent_message": "slow job done"}),
        pid=dead_pid(), source=source, session_type="worker", at=yesterday, last_after=5.0,
    )
    async with Engine(home, model_client=ScriptedModel(answering("unused"))) as engine:
        parent = await engine.resume_session(ids["parent"])
        infos = {info.session_id: info for info in parent.subsessions.children()}
        assert await parent.subsessions.wait_child(slow, timeout=0) == "slow job done"

    for info in infos.values():
        assert info.ended_at is not None
        assert info.started_at <= info.ended_at, info
        assert info.duration_ms is not None
        assert 0 <= info.duration_ms < 60_000, info
    old = infos[slow]
    assert old.ended_at == pytest.approx(yesterday + 5, abs=1)
    assert old.started_at == pytest.approx(yesterday, abs=1)
    assert old.duration_ms == pytest.approx(5_000, abs=1_000)


async def test_damaged_children_are_reported_and_the_rest_resumes(home: Path) -> None:
    ids = await parent_with_children(home)
    paths = {r.session_id: Path(r.path) for r in list_rollouts(home, parent=ids["parent"])}
    done = records(paths[ids["done"]])
    del done[-1]["timestamp"]  # the last record of a child lost its timestamp
    paths[ids["done"]].write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in done))
    gone = dead_pid()
    source = {"subsession": {"parent_session_id": ids["parent"], "depth": 1,
                             "session_type": "worker", "call_id": "spawn_counted"}}

    def counted(info: object) -> str:
        """A child that ended well but whose token count is not what a reader expects."""
        session_id, _ = write_rollout(
            home, *open_task("count", gone), ("event_msg", {"type": "token_count", "info": info}),
            ("event_msg", {"type": "task_complete", "last_agent_message": "counted"}),
            pid=gone, source=source, session_type="worker",
        )
        return session_id

    listed = counted([1, 2])
    worded = counted({"total_token_usage": {"input_tokens": "many", "output_tokens": 3}})

    async with Engine(home, model_client=ScriptedModel(answering("still here"))) as engine:
        parent = await engine.resume_session(ids["parent"])
        manager = parent.subsessions
        assert await manager.wait_child(ids["done"], timeout=0) == "ok done"
        assert await manager.wait_child(listed, timeout=0) == "counted"
        assert await manager.wait_child(worded, timeout=0) == "counted"
        with pytest.raises(ChildCancelled):
            await manager.wait_child(ids["cancelled"], timeout=0)
        usage = {info.session_id: info.usage.total_tokens for info in manager.children()}
        assert usage[listed] == usage[worded] == 0 < usage[ids["done"]]
        assert await parent.send_and_wait("and now?") == "still here"

    report = parent.resume_report or ""
    damaged = report.partition("; skipped what was damaged: ")[2]
    assert f"the token counts of {listed}" in damaged and f"the token counts of {worded}" in damaged
    assert f"when {ids['done']} ended" in damaged
    assert ids["failed"] not in damaged and ids["cancelled"] not in damaged
    assert report in background_messages(Path(parent.recorder.path))


async def test_the_model_of_a_resumed_parent_can_wait_for_an_earlier_child(home: Path) -> None:
    ids = await parent_with_children(home)

    def script(request: ModelRequest) -> list[Any]:
        done = outputs(request)
        if not done:
            return [fn_call("wait_session", "w1", session_id=ids["done"], timeout_ms=1000),
                    fn_call("wait_session", "w2", session_id=ids["interrupted"], timeout_ms=0)]
        return ["collected"]

    model = ScriptedModel(script)
    async with Engine(home, model_client=model) as engine:
        parent = await engine.resume_session(ids["parent"])
        assert await parent.send_and_wait("collect the results") == "collected"

    done_output, lost_output = outputs(model.requests[-1])
    assert "ok done" in done_output
    assert "interrupted" in lost_output
    assert "ok done" not in lost_output
    # the children's rollouts are read, never written
    for child in ("done", "failed", "cancelled"):
        assert read_rollout(next(p for p in rollout_files(home)
                                 if p.name.endswith(f"{ids[child]}.jsonl"))).skipped == ()


async def test_a_resumed_parent_starts_new_children_beside_the_old_ones(home: Path) -> None:
    ids = await parent_with_children(home)
    old = {ids[k] for k in ("done", "failed", "cancelled", "interrupted")}
    before = {p: p.read_bytes() for p in rollout_files(home)}

    async with Engine(home, model_client=ScriptedModel(answering("fresh"))) as engine:
        parent = await engine.resume_session(
            ids["parent"], SessionConfig(custom_agents=[WORKER], max_children=1)
        )
        manager = parent.subsessions
        new = await manager.spawn_child("worker", "more work")  # old ones hold no slot
        assert await manager.wait_child(new, timeout=5) == "fresh"
        assert {info.session_id for info in manager.children()} == old | {new}

    [row] = [r for r in list_rollouts(home, parent=ids["parent"]) if r.session_id == new]
    assert row.status == "completed"
    for path, data in before.items():  # earlier children's files are left as they were
        if path.name[-42:-6] in old:
            assert path.read_bytes() == data


# -- running and interrupted sessions ---------------------------------------------------------
async def test_a_resumed_task_lists_as_running_under_its_new_writer(home: Path) -> None:
    gone = dead_pid()
    session_id, path = write_rollout(home, *open_task("first try", gone), pid=gone)
    assert read_rollout(path).status == "interrupted"
    asked = asyncio.Event()
    release = asyncio.Event()

    async def script(request: ModelRequest) -> list[str]:
        asked.set()
        await release.wait()
        return ["finished this time"]

    model = ScriptedModel(script)
    async with Engine(home, model_client=model) as engine:
        resumed = await engine.resume_session(session_id[:13])
        task = asyncio.create_task(resumed.send_and_wait("try again"))
        try:
            await asyncio.wait_for(asked.wait(), 5)
            await resumed.recorder.flush_durable()
            rollout = read_rollout(path)
            assert rollout.status == "running"
            assert rollout.meta["pid"] == gone  # the first session_meta stays
            contexts = [r["payload"] for r in rollout.records if r["type"] == "turn_context"]
            assert contexts[-1]["pid"] == os.getpid()
            [row] = [r for r in list_rollouts(home) if r.session_id == session_id]
            assert row.status == "running"
            assert [r.session_id for r in list_rollouts(home, status="running")] == [session_id]
        finally:
            release.set()
            assert await task == "finished this time"

    assert list(model.requests[0].items) == [user_message("first try"), user_message("try again")]
    assert read_rollout(path).status == "completed"
    [row] = list_rollouts(home)
    assert row.status == "completed"


# -- damaged rollouts -----------------------------------------------------------------------
def damage(path: Path) -> list[int]:
    """Junk in the middle (bad JSON, an unknown record) and a torn last line.

    Returns the numbers of the damaged lines. The torn line is the task_complete
    event, so every conversation item is still readable.
    """
    lines = file_lines(path)
    assert orjson.loads(lines[-1])["payload"]["type"] == "task_complete"
    torn = lines[-1][: len(lines[-1]) // 2]
    damaged = [*lines[:4], b"this is not json {\n", *lines[4:7],
               b'{"type": "mystery", "payload": {}}\n', *lines[7:-1], torn]
    path.write_bytes(b"".join(damaged))
    return [5, 9, len(damaged)]


async def test_a_damaged_rollout_resumes_from_what_could_be_read(home: Path) -> None:
    session_id, path, history = await weather_session(home)
    bad = damage(path)
    assert [s.line for s in read_rollout(path).skipped] == bad
    model = ScriptedModel(answering("Still sunny."))

    async with Engine(home, model_client=model) as engine:
        resumed = await engine.resume_session(session_id)
        report = resumed.resume_report
        assert report is not None
        for number in bad:
            assert re.search(rf"\b{number}\b", report), report
        assert "skipped" in report
        assert await resumed.send_and_wait("And now?") == "Still sunny."

    assert list(model.requests[0].items) == [*history, user_message("And now?")]


async def test_the_new_task_of_a_rollout_with_a_torn_tail_is_readable(home: Path) -> None:
    session_id, path, _ = await weather_session(home)
    damaged = damage(path)
    before = path.read_bytes()

    async with Engine(home, model_client=ScriptedModel(answering("Still sunny."))) as engine:
        resumed = await engine.resume_session(session_id)
        await resumed.send_and_wait("And now?")

    assert path.read_bytes().startswith(before)
    rollout = read_rollout(path)
    assert rollout.status == "completed"
    assert rollout.last_agent_message == "Still sunny."
    # nothing written after the torn line may be lost to it: the resume note is readable
    assert any(m.startswith(f"resumed {session_id}") for m in background_messages(path))
    assert [s.line for s in rollout.skipped] == damaged
    appended = path.read_bytes()[len(before):]
    assert all(orjson.loads(line) for line in appended.splitlines() if line.strip())


async def test_fork_of_a_damaged_rollout_says_what_was_skipped(home: Path) -> None:
    session_id, path, history = await weather_session(home)
    bad = damage(path)
    before = path.read_bytes()
    async with Engine(home, model_client=ScriptedModel(answering("ok"))) as engine:
        fork = await engine.fork_session(session_id)
        report = fork.resume_report
        await fork.send_and_wait("go on")

    assert report is not None
    for number in bad:
        assert re.search(rf"\b{number}\b", report), report
    forked = read_rollout(fork.recorder.path)
    assert forked.skipped == ()  # the fork's own file is clean
    assert forked.response_items()[: len(history)] == history
    assert path.read_bytes() == before


# -- bad ids and foreign files ----------------------------------------------------------------
@pytest.fixture
def ambiguous(home: Path) -> str:
    """Two rollouts whose ids share a prefix; returns the prefix."""
    first = "01900000-aaaa-7aaa-8aaa-aaaaaaaaaaa1"
    second = "01900000-aaaa-7aaa-8aaa-aaaaaaaaaaa2"
    for session_id in (first, second):
        write_rollout(home, session_id=session_id, pid=dead_pid())
    return "01900000-aaaa"


HOSTILE = ["../x", "a/b", "", "x" * 200, "unknown-id", "ambiguous"]


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("action", ["resume", "fork"])
async def test_hostile_ids_give_clear_errors_and_touch_nothing(
    home: Path, tmp_path: Path, ambiguous: str, hostile: str, action: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await weather_session(home)  # a real session in the home, which must stay untouched
    session_id = {"unknown-id": new_session_id(), "ambiguous": ambiguous}.get(hostile, hostile)
    cwd = tmp_path / "work" / "cwd"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)  # where a relative path would land
    before = snapshot(tmp_path)

    async with Engine(home, model_client=ScriptedModel([])) as engine:
        method = engine.resume_session if action == "resume" else engine.fork_session
        with pytest.raises((UnknownSession, RolloutError)) as caught:
            await method(session_id)
        assert engine.sessions() == []

    message = str(caught.value)
    assert "Traceback" not in message
    assert len(message) < 300
    if hostile == "ambiguous":
        assert "ambiguous" in message
        assert "01900000-aaaa-7aaa-8aaa-aaaaaaaaaaa1" in message
        assert "01900000-aaaa-7aaa-8aaa-aaaaaaaaaaa2" in message
    elif hostile == "x" * 200:
        assert "x" * 40 in message
    elif hostile:
        assert session_id in message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b'{"a": 1}\n{"b": 2}\n', id="random-jsonl"),
        pytest.param(b"\x00\xff\xfe\x89PNG binary\n\x00", id="binary"),
        pytest.param(b'{"timestamp": "2026-01-01T00:00:00.000Z", "type": "event_msg", '
                     b'"payload": {"type": "task_started"}}\n', id="no-session-meta"),
        pytest.param(b"not json at all\n", id="text"),
    ],
)
@pytest.mark.parametrize("by", ["path", "id"])
async def test_a_file_that_is_not_a_rollout_is_refused_naming_the_file(
    home: Path, tmp_path: Path, content: bytes, by: str
) -> None:
    if by == "path":
        path = tmp_path / "notes.jsonl"
        target: str | Path = path
    else:  # it is named like a rollout, in the sessions folder
        target = new_session_id()
        path = Path(rollout_path(home, target, time.time()))
        path.parent.mkdir(parents=True)
    path.write_bytes(content)

    async with Engine(home, model_client=ScriptedModel([])) as engine:
        for method in (engine.resume_session, engine.fork_session):
            with pytest.raises(RolloutError) as caught:
                await method(target)
            assert caught.value.path == str(path)
            assert str(path) in str(caught.value)
            assert "not a subsessions rollout" in str(caught.value)
        assert engine.sessions() == []

    assert path.read_bytes() == content  # nothing was appended to it
    assert rollout_files(home) == ([] if by == "path" else [path])


async def test_a_missing_rollout_path_is_refused_and_not_created(
    home: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "elsewhere" / "rollout-missing.jsonl"
    async with Engine(home, model_client=ScriptedModel([])) as engine:
        with pytest.raises(RolloutError) as caught:
            await engine.resume_session(missing)
    assert str(missing) in str(caught.value)
    assert not missing.parent.exists()


# -- a session already open -----------------------------------------------------------------
@pytest.mark.parametrize("opened", ["created", "resumed"])
async def test_resuming_a_session_already_open_in_the_engine_is_refused(
    home: Path, opened: str
) -> None:
    finished_id, _, _ = await weather_session(home)
    async with Engine(home, model_client=ScriptedModel(answering("fine"))) as engine:
        if opened == "created":
            session = await engine.create_session()
            await session.send_and_wait("hello")
        else:
            session = await engine.resume_session(finished_id)
        path = Path(session.recorder.path)
        await session.recorder.flush_durable()
        before = content(path)

        for target in (session.session_id, session.session_id[:13] if opened == "created"
                       else session.session_id, path):
            with pytest.raises(SubsessionError) as caught:
                await engine.resume_session(target)
            assert isinstance(caught.value, SessionBusy)
            assert session.session_id in str(caught.value)
        assert engine.sessions() == [session]
        assert engine.get_session(session.session_id) is session
        assert await session.send_and_wait("still there?") == "fine"  # still usable

    after = content(path)
    assert after.startswith(before)
    added = after[len(before):]
    # the refused attempts left no trace in the open session's transcript
    assert b"resumed" not in added, added.decode()
    assert plain_ending(records(path)[-1]["payload"]) == {"type": "task_complete",
                                                          "last_agent_message": "fine"}


async def test_forking_a_session_open_in_the_engine_is_allowed(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel(answering("fine"))) as engine:
        session = await engine.create_session()
        await session.send_and_wait("hello")
        fork = await engine.fork_session(session.session_id)
        assert fork.session_id != session.session_id
        assert await fork.send_and_wait("from the fork") == "fine"
        assert await session.send_and_wait("from the original") == "fine"
    original = read_rollout(session.recorder.path)
    texts = [i["content"][0]["text"] for i in original.response_items()]
    assert texts == ["hello", "fine", "from the original", "fine"]
    forked = read_rollout(fork.recorder.path)
    texts = [i["content"][0]["text"] for i in forked.response_items()]
    assert texts == ["hello", "fine", "from the fork", "fine"]
