"""The model-callable tools, driven by a scripted PARENT model (DESIGN 3.1, 3.5).

The parent is a top-level session whose model calls create_session /
wait_session / cancel_session; what the tools return is read back from the
`function_call_output` items the parent's model is shown, and from the rollouts.
Children are held running by futures the test resolves, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    FOREVER_MS,
    PARENT_PROMPT,
    TERMINAL,
    WORKER,
    Script,
    Step,
    call,
    cancel,
    create,
    events,
    failure,
    outputs,
    plain_ending,
    rollout_of,
    script,
    spawned,
    value,
    wait,
)

from subsessions import (
    ChildStatus,
    Engine,
    EngineClosed,
    ModelRequest,
    Profile,
    Session,
    SessionConfig,
)
from subsessions.ids import new_session_id
from subsessions.rollouts.reader import Rollout, find_rollout

__all__ = ["script"]  # the fixture, imported so that pytest finds it here

BUILTINS = {"default", "linter_fixer", "mathematician", "tester"}


# -- helpers ------------------------------------------------------------------------------
@pytest.fixture
async def engine(home: Path, script: Script) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="gpt-test") as engine:
        yield engine


async def drive(
    engine: Engine,
    script: Script,
    steps: Sequence[Step],
    config: SessionConfig | None = None,
    prompt: str = PARENT_PROMPT,
) -> tuple[Session, list[dict[str, Any]]]:
    """Run a top-level session through `steps`; returns it and every tool output it saw."""
    parent = await engine.create_session(config or SessionConfig(custom_agents=(WORKER,)))
    script.play(prompt, steps)
    assert await parent.send_and_wait(prompt) == "parent done"
    return parent, outputs(script.seen[prompt][-1])


def assert_one_terminal_per_task(rollout: Rollout) -> list[str]:
    """Every task_started is followed by exactly one terminal record before the next one,
    each carrying the turn id its task_started gave (a failure's `error` + `task_complete`
    pair is one ending: the second repeats the first's error for Codex)."""
    endings: list[str] = []
    open_task = False
    turn = None
    previous: dict[str, Any] = {}
    for event in events(rollout):
        if event["type"] == "task_complete" and "error" in event:
            assert previous["type"] == "error" and previous["turn_id"] == event["turn_id"]
            assert event["error"] == {"message": previous["message"], "codex_error_info": "other"}
            continue
        previous = event
        if event["type"] == "task_started":
            turn = event["turn_id"]
            assert not open_task, "a task started before the previous one ended"
            open_task = True
        elif event["type"] in TERMINAL:
            assert open_task, f"{event['type']} outside a task"
            assert event["turn_id"] == turn
            open_task = False
            endings.append(event["type"])
    assert not open_task, "a task never ended"
    return endings


# -- the happy paths --------------------------------------------------------------------
async def test_create_then_wait_returns_the_childs_last_message(
    engine: Engine, script: Script
) -> None:
    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "add 2 and 2")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    assert value(outs[1]) == {"result": "answer to add 2 and 2"}
    assert parent.subsessions.status(spawned(outs)) is ChildStatus.DONE


async def test_a_child_without_a_message_results_in_null(engine: Engine, script: Script) -> None:
    script.handlers["silent"] = lambda request: []
    _, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "silent")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    assert outs[1]["output"] == '{"result":null}'
    assert value(outs[1]) == {"result": None}


async def test_create_returns_before_the_child_runs(engine: Engine, script: Script) -> None:
    seen_at_create: list[int] = []

    def after_create(outs: list[dict[str, Any]]) -> Any:
        seen_at_create.append(len(script.seen["job"]))
        return [wait(spawned(outs), FOREVER_MS)]

    await drive(engine, script, [lambda outs: [create("worker", "job")], after_create])
    assert seen_at_create == [0]
    assert len(script.seen["job"]) == 1


async def test_two_children_spawned_in_one_response_run_at_the_same_time(
    engine: Engine, script: Script
) -> None:
    arrived = {"left": asyncio.Event(), "right": asyncio.Event()}

    def meet(me: str, other: str) -> Callable[[ModelRequest], Any]:
        async def respond(request: ModelRequest) -> Any:
            arrived[me].set()
            try:  # only possible if the other child is running at the same time
                await asyncio.wait_for(arrived[other].wait(), 5)
            except TimeoutError:
                return [f"{me} ran alone"]
            return [f"{me} met {other}"]

        return respond

    script.handlers["left"] = meet("left", "right")
    script.handlers["right"] = meet("right", "left")
    _, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "left"), create("worker", "right")],
            lambda outs: [wait(spawned(outs, 0), FOREVER_MS), wait(spawned(outs, 1), FOREVER_MS)],
        ],
    )
    assert spawned(outs, 0) != spawned(outs, 1)
    assert value(outs[2]) == {"result": "left met right"}
    assert value(outs[3]) == {"result": "right met left"}


async def test_cancel_session_then_again(engine: Engine, script: Script, home: Path) -> None:
    script.hold("slow")

    async def cancel_when_running(outs: list[dict[str, Any]]) -> Any:
        await script.started("slow")
        return [cancel(spawned(outs))]

    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "slow")],
            cancel_when_running,
            lambda outs: [cancel(spawned(outs))],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    cid = spawned(outs)
    assert value(outs[1]) == {"cancelled": True}
    assert value(outs[2]) == {"cancelled": False}
    assert failure(outs[3]) == f"session {cid} was cancelled"
    assert script.cancelled == ["slow"]
    assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
    assert assert_one_terminal_per_task(rollout_of(home, cid)) == ["turn_aborted"]

    await engine.close()
    messages = [e.get("message") for e in events(rollout_of(home, parent.session_id))]
    assert f"child session {cid} cancelled" in messages


# -- the error texts of DESIGN 3.1 ------------------------------------------------------------
@pytest.mark.parametrize(
    "bad_id", [new_session_id(), "not-a-uuid", "", "x" * 40, "../x", "../../etc/passwd", "a/b"]
)
async def test_unknown_ids(engine: Engine, script: Script, bad_id: str) -> None:
    _, outs = await drive(
        engine,
        script,
        [
            lambda outs: [wait(bad_id, 0)],
            lambda outs: [wait(bad_id, 50)],
            lambda outs: [cancel(bad_id)],
        ],
    )
    assert [failure(o) for o in outs] == [f"unknown session {bad_id}"] * 3


async def test_another_parents_child_is_unknown(engine: Engine, script: Script) -> None:
    script.hold("theirs")
    owner, owner_outs = await drive(
        engine, script, [lambda outs: [create("worker", "theirs")]], prompt="owner"
    )
    theirs = spawned(owner_outs)
    _, outs = await drive(
        engine,
        script,
        [
            lambda outs: [wait(theirs, 0)],
            lambda outs: [wait(theirs, FOREVER_MS)],
            lambda outs: [cancel(theirs)],
        ],
        prompt="intruder",
    )
    assert [failure(o) for o in outs] == [f"unknown session {theirs}"] * 3
    assert owner.subsessions.status(theirs) is ChildStatus.PENDING  # not cancelled by them
    script.answer("theirs", ["still mine"])
    assert await owner.subsessions.wait_child(theirs) == "still mine"


@pytest.mark.timeout(30)  # a check that waits instead hangs on the held child: fail early
@pytest.mark.parametrize("timeout_ms", [0, -1, -(10**12)])
async def test_not_completed(engine: Engine, script: Script, timeout_ms: int) -> None:
    script.hold("slow")

    async def check(outs: list[dict[str, Any]]) -> Any:
        await script.started("slow")
        return [wait(spawned(outs), timeout_ms)]

    _, outs = await drive(engine, script, [lambda outs: [create("worker", "slow")], check])
    assert failure(outs[1]) == f"session {spawned(outs)} has not completed"
    assert script.cancelled == []


async def test_timed_out_and_the_child_runs_on(engine: Engine, script: Script) -> None:
    script.hold("slow")

    def release_and_wait(outs: list[dict[str, Any]]) -> Any:
        script.answer_soon("slow", ["slow answer"])
        return [wait(spawned(outs), FOREVER_MS)]

    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "slow")],
            lambda outs: [wait(spawned(outs), 5)],
            release_and_wait,
        ],
    )
    cid = spawned(outs)
    assert failure(outs[1]) == f"session {cid} did not complete within 5ms"
    assert value(outs[2]) == {"result": "slow answer"}
    assert script.cancelled == []
    assert len(script.seen["slow"]) == 1  # the same model call went on
    assert parent.subsessions.status(cid) is ChildStatus.DONE


async def test_a_huge_timeout_is_clamped_and_waits_for_the_child(
    engine: Engine, script: Script
) -> None:
    script.hold("slow")

    def release_and_wait(outs: list[dict[str, Any]]) -> Any:
        script.answer_soon("slow", ["worth the wait"])
        return [wait(spawned(outs), 10**12)]

    _, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "slow")],
            release_and_wait,
        ],
    )
    assert value(outs[1]) == {"result": "worth the wait"}


async def test_failed(engine: Engine, script: Script, home: Path) -> None:
    script.handlers["doomed"] = lambda request: RuntimeError("model exploded")
    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "doomed")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
            lambda outs: [wait(spawned(outs), 0)],
        ],
    )
    cid = spawned(outs)
    assert failure(outs[1]) == f"session {cid} failed: model exploded"
    assert failure(outs[2]) == f"session {cid} failed: model exploded"
    assert assert_one_terminal_per_task(rollout_of(home, cid)) == ["error"]
    await engine.close()
    messages = [e.get("message") for e in events(rollout_of(home, parent.session_id))]
    assert f"child session {cid} failed: model exploded" in messages


async def test_unknown_session_type_lists_the_names(engine: Engine, script: Script) -> None:
    _, outs = await drive(engine, script, [lambda outs: [create("nope", "hello")]])
    text = failure(outs[0])
    prefix = "unknown session_type nope; expected one of: "
    assert text.startswith(prefix)
    assert set(text[len(prefix) :].split(", ")) == set(engine.profiles) | {"worker"}
    assert set(engine.profiles) >= BUILTINS


async def test_depth_limit(engine: Engine, script: Script) -> None:
    config = SessionConfig(max_depth=0, custom_agents=(WORKER,))
    parent, outs = await drive(engine, script, [lambda outs: [create("worker", "deep")]], config)
    assert failure(outs[0]) == (
        "sub-session depth limit reached (max_depth=0); solve the task yourself"
    )
    assert parent.subsessions.children() == []
    # at the limit the tools are not offered at all
    assert {"create_session", "wait_session", "cancel_session"}.isdisjoint(
        script.seen[PARENT_PROMPT][0].tool_names
    )


async def test_concurrency_limit(engine: Engine, script: Script) -> None:
    script.hold("first")
    config = SessionConfig(max_children=1, max_queued=0, custom_agents=(WORKER,))
    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "first")],
            lambda outs: [create("worker", "second")],
        ],
        config,
    )
    assert failure(outs[1]) == (
        "sub-session limit reached (max_children=1); wait for or cancel a running session first"
    )
    assert [c.session_id for c in parent.subsessions.children()] == [spawned(outs)]
    assert script.seen["second"] == []


X = "01a1f000-0000-7000-8000-000000000000"


@pytest.mark.parametrize(
    ("tool", "arguments", "mentions"),
    [
        ("create_session", {"session_type": "worker"}, "prompt"),
        ("create_session", {"prompt": "hi"}, "session_type"),
        ("create_session", {"session_type": "worker", "prompt": 5}, "prompt"),
        ("create_session", {"session_type": 3, "prompt": "hi"}, "session_type"),
        ("create_session", {"session_type": "worker", "prompt": "hi", "x": 1}, "x"),
        ("create_session", {"session_type": "worker", "prompt": "   "}, "prompt"),
        ("create_session", '{"session_type": "worker", ', "JSON"),
        ("create_session", "[1, 2]", ""),
        ("wait_session", {"session_id": X}, "timeout_ms"),
        ("wait_session", {"session_id": X, "timeout_ms": "soon"}, "timeout_ms"),
        ("wait_session", {"session_id": X, "timeout_ms": 1.5}, "timeout_ms"),
        ("wait_session", {"session_id": X, "timeout_ms": True}, "timeout_ms"),
        ("wait_session", {"session_id": 7, "timeout_ms": 0}, "session_id"),
        ("wait_session", {"session_id": X, "timeout_ms": 0, "poll": 1}, "poll"),
        ("wait_session", "not json", "JSON"),
        ("cancel_session", {}, "session_id"),
        ("cancel_session", {"session_id": X, "force": True}, "force"),
        ("cancel_session", {"session_id": None}, "session_id"),
    ],
    ids=[
        "create-missing-prompt",
        "create-missing-type",
        "create-prompt-int",
        "create-type-int",
        "create-extra",
        "create-blank-prompt",
        "create-not-json",
        "create-not-object",
        "wait-missing-timeout",
        "wait-timeout-str",
        "wait-timeout-float",
        "wait-timeout-bool",
        "wait-id-int",
        "wait-extra",
        "wait-not-json",
        "cancel-missing-id",
        "cancel-extra",
        "cancel-id-null",
    ],
)
async def test_invalid_arguments(
    engine: Engine, script: Script, tool: str, arguments: Any, mentions: str
) -> None:
    parent, outs = await drive(engine, script, [lambda outs: [call(tool, arguments)]])
    text = failure(outs[0])
    prefix = f"invalid arguments for {tool}: "
    assert text.startswith(prefix), text
    assert len(text) > len(prefix)
    assert mentions in text[len(prefix) :]
    assert parent.subsessions.children() == []


# -- what the model is told -------------------------------------------------------------------
async def test_tool_schemas(engine: Engine, script: Script) -> None:
    alpha = Profile(name="alpha", description="first", developer_instructions="A")
    beta = Profile(name="beta", description="second", developer_instructions="B")
    config = SessionConfig(custom_agents=(alpha, beta))
    await drive(
        engine,
        script,
        [
            lambda outs: [create("alpha", "child")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
        config,
    )

    names = set(engine.profiles) | {"alpha", "beta"}
    for request in (script.seen[PARENT_PROMPT][0], script.seen["child"][0]):
        specs = {spec["name"]: spec for spec in request.tools}
        assert {"create_session", "wait_session", "cancel_session"} <= set(specs)
        for name in ("create_session", "wait_session", "cancel_session"):
            spec = specs[name]
            assert spec["type"] == "function"
            params = spec["parameters"]
            assert params["type"] == "object"
            assert params["additionalProperties"] is False
            assert set(params["required"]) == set(params["properties"])
        create_props = specs["create_session"]["parameters"]["properties"]
        # DESIGN 3.1, and 3.13's fork_turns, output_schema and isolation (required-nullable,
        # as budget)
        assert set(create_props) == {"session_type", "prompt", "budget", "fork_turns",
                                     "output_schema", "isolation"}
        assert create_props["isolation"]["enum"] == ["none", "worktree", None]
        assert create_props["budget"]["type"] == ["object", "null"]
        assert set(create_props["budget"]["required"]) == {
            "max_turns", "max_tokens", "max_seconds"}
        assert create_props["session_type"]["type"] == "string"
        assert set(create_props["session_type"]["enum"]) == names
        assert len(create_props["session_type"]["enum"]) == len(names)
        assert create_props["prompt"]["type"] == "string"
        wait_props = specs["wait_session"]["parameters"]["properties"]
        assert set(wait_props) == {"session_id", "timeout_ms"}
        assert wait_props["session_id"]["type"] == "string"
        assert wait_props["timeout_ms"]["type"] == "integer"
        assert set(specs["cancel_session"]["parameters"]["properties"]) == {"session_id"}


# -- the rollouts ---------------------------------------------------------------------------
def _shape(record: dict[str, Any]) -> tuple[str, ...]:
    payload = record["payload"]
    if record["type"] == "response_item":
        kind = payload["type"]
        if kind == "message":
            return ("response_item", "message", payload["role"])
        if kind == "function_call":
            return ("response_item", "function_call", payload["name"])
        return ("response_item", kind)
    if record["type"] == "event_msg":
        if payload["type"] == "background_event":
            return ("event_msg", "background_event", payload["message"])
        return ("event_msg", payload["type"])
    return (record["type"],)


async def test_the_parents_rollout_line_by_line(engine: Engine, script: Script, home: Path) -> None:
    script.hold("job")

    def release_and_wait(outs: list[dict[str, Any]]) -> Any:
        script.answer_soon("job", ["job result"])
        return [wait(spawned(outs), FOREVER_MS, call_id="call_wait")]

    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "job", call_id="call_create")],
            release_and_wait,
        ],
    )
    cid = spawned(outs)
    await engine.close()

    path = find_rollout(home, parent.session_id)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = path.read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    for record in records:
        assert set(record) == {"timestamp", "type", "payload"}
        assert record["timestamp"].endswith("Z")
    shapes = [_shape(r) for r in records if r["payload"].get("type") != "token_count"]
    assert shapes == [
        ("session_meta",),
        ("turn_context",),
        ("event_msg", "task_started"),
        ("response_item", "message", "user"),
        ("event_msg", "user_message"),
        ("response_item", "function_call", "create_session"),
        ("event_msg", "background_event", f"spawned child session {cid} with model gpt-test"),
        ("response_item", "function_call_output"),
        ("response_item", "function_call", "wait_session"),
        ("event_msg", "background_event", f"child session {cid} completed"),
        ("response_item", "function_call_output"),
        ("response_item", "message", "assistant"),
        ("event_msg", "agent_message"),
        ("event_msg", "task_complete"),
    ]

    meta = records[0]["payload"]
    assert meta["id"] == parent.session_id
    assert meta["source"] == "exec"
    assert meta["originator"] == "subsessions"
    assert meta["model"] == "gpt-test"
    assert "session_type" not in meta
    items = [r["payload"] for r in records if r["type"] == "response_item"]
    assert items[1] == {
        "type": "function_call",
        "name": "create_session",
        "arguments": orjson.dumps({"session_type": "worker", "prompt": "job"}).decode(),
        "call_id": "call_create",
    }
    assert items[2] == {
        "type": "function_call_output",
        "call_id": "call_create",
        "output": orjson.dumps({"session_id": cid}).decode(),
        "success": True,
    }
    assert items[4]["call_id"] == "call_wait"
    assert orjson.loads(items[4]["output"]) == {"result": "job result"}
    assert plain_ending(records[-1]["payload"]) == {
        "type": "task_complete", "last_agent_message": "parent done"}


async def test_the_childs_rollout(engine: Engine, script: Script, home: Path) -> None:
    parent, outs = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "job", call_id="call_create")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    cid = spawned(outs)
    child = rollout_of(home, cid)
    assert child.meta["id"] == cid
    assert child.meta["source"] == {"subagent": {"thread_spawn": {
        "parent_thread_id": parent.session_id, "depth": 1, "agent_role": "worker",
        "agent_nickname": None, "agent_path": None,
    }}}
    assert child.meta["parent_thread_id"] == parent.session_id
    assert child.meta["subsession"] == {"call_id": "call_create"}
    assert child.meta["session_type"] == "worker"
    assert child.meta["base_instructions"] == {"text": "You are a worker."}
    assert child.meta["model"] == "gpt-test"
    assert child.parent_id == parent.session_id
    assert assert_one_terminal_per_task(child) == ["task_complete"]
    assert child.last_agent_message == "answer to job"
    # the child never saw the parent's conversation
    assert [i["role"] for i in script.seen["job"][0].items] == ["user"]


async def test_one_terminal_record_per_task(engine: Engine, script: Script, home: Path) -> None:
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    script.hold("job two")
    script.play(
        "first",
        [
            lambda outs: [create("worker", "job one")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    script.play("second", [lambda outs: [create("worker", "job two")]])
    assert await parent.send_and_wait("first") == "parent done"
    assert await parent.send_and_wait("second") == "parent done"
    ids = [c.session_id for c in parent.subsessions.children()]
    await engine.close()  # the second child was never waited for: closing cancels it

    assert assert_one_terminal_per_task(rollout_of(home, parent.session_id)) == [
        "task_complete",
        "task_complete",
    ]
    assert assert_one_terminal_per_task(rollout_of(home, ids[0])) == ["task_complete"]
    assert assert_one_terminal_per_task(rollout_of(home, ids[1])) == ["turn_aborted"]
    assert parent.subsessions.status(ids[1]) is ChildStatus.CANCELLED


@pytest.mark.parametrize("how", ["engine closes", "caller cancels"])
async def test_ending_a_waiting_parent_cancels_its_child(
    home: Path, script: Script, how: str
) -> None:
    script.hold("slow")
    script.play(
        PARENT_PROMPT,
        [
            lambda outs: [create("worker", "slow")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    engine = Engine(home, model_client=script.model, model="gpt-test")
    try:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        task = asyncio.create_task(parent.send_and_wait(PARENT_PROMPT))
        await script.started("slow")  # children only run once the parent waits
        if how == "engine closes":
            await engine.close()
            with pytest.raises(EngineClosed):
                await task
        else:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await engine.close()

    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    [child] = parent.subsessions.children()
    assert child.status is ChildStatus.CANCELLED
    assert script.cancelled == ["slow"]
    for session_id in (parent.session_id, child.session_id):
        rollout = rollout_of(home, session_id)
        assert assert_one_terminal_per_task(rollout) == ["turn_aborted"]
        [aborted] = rollout.events("turn_aborted")
        assert aborted["reason"] == "interrupted"
        # a closing engine ends both; otherwise the host ended the parent, which ended its child
        expected = "close" if how == "engine closes" else (
            "parent" if session_id == child.session_id else "host")
        assert aborted["cancelled_by"] == expected


async def test_the_parents_task_is_on_disk_when_send_and_wait_returns(
    engine: Engine, script: Script, home: Path
) -> None:
    """Like a child's result (DESIGN 4, nothing is lost): a host that reads the rollout, or
    crashes, right after send_and_wait returns must find the task's ending in the file."""
    parent, _ = await drive(
        engine,
        script,
        [
            lambda outs: [create("worker", "job")],
            lambda outs: [wait(spawned(outs), FOREVER_MS)],
        ],
    )
    rollout = rollout_of(home, parent.session_id)  # engine still open, no await in between
    assert rollout.status == "completed"
    assert [plain_ending(e) for e in rollout.events("task_complete")] == [
        {"type": "task_complete", "last_agent_message": "parent done"}
    ]
