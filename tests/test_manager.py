"""SubsessionManager through the programmatic API (DESIGN 3.2, 3.5, 4).

Children are held "running" by futures the test resolves, never by sleeping: a
child whose prompt is held waits on its gate inside the model call until the
test answers it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    FOREVER_MS,
    PARENT_PROMPT,
    SUBSESSION_TOOLS,
    WORKER,
    Script,
    call,
    events,
    first_prompt,
    outputs,
    plain_ending,
    rollout_of,
    spawn_held,
    terminals,
)

from subsessions import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    ChildNotFinished,
    ChildStatus,
    ChildTimeout,
    DepthLimitReached,
    Engine,
    EngineClosed,
    InvalidArguments,
    ModelRequest,
    ModelResponse,
    Profile,
    Session,
    SessionConfig,
    StillRunning,
    SubsessionError,
    Tool,
    UnknownSession,
    UnknownSessionType,
)
from subsessions.ids import is_session_id, new_session_id
from subsessions.rollouts.reader import Rollout, find_rollout, read_rollout
from subsessions.rollouts.summary import spawn_of


# -- helpers ------------------------------------------------------------------------------
@pytest.fixture
def script() -> Script:
    """Routed by each session's first message, the user's prompt."""
    return Script(route=first_prompt)


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="engine-model",
                      backend=backend) as engine:
        yield engine


@pytest.fixture
async def parent(engine: Engine) -> Session:
    return await engine.create_session(SessionConfig(model="parent-model", custom_agents=(WORKER,)))


# -- spawning and waiting -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "instructions", "model"),
    [
        ("worker", "You are a worker.", "parent-model"),
        (Profile(name="adhoc", developer_instructions="Ad hoc."), "Ad hoc.", "parent-model"),
        (
            SessionConfig(instructions="From a config.", model="cfg-model"),
            "From a config.",
            "cfg-model",
        ),
    ],
    ids=["name", "profile", "config"],
)
async def test_spawn_returns_an_id_at_once_and_the_child_runs_later(
    parent: Session, script: Script, spec: Any, instructions: str, model: str
) -> None:
    cid = await parent.subsessions.spawn_child(spec, "do it")
    assert is_session_id(cid)
    assert script.seen["do it"] == []  # queued, not yet run
    assert parent.subsessions.status(cid) is ChildStatus.PENDING

    assert await parent.subsessions.wait_child(cid) == "answer to do it"
    assert parent.subsessions.status(cid) is ChildStatus.DONE
    [request] = script.seen["do it"]
    assert request.session_id == cid
    assert request.instructions == instructions
    assert request.model == model
    assert [i["role"] for i in request.items] == ["user"]  # never the parent's history


async def test_child_with_no_assistant_message_results_in_none(
    parent: Session, script: Script
) -> None:
    script.handlers["quiet"] = lambda request: []
    cid = await parent.subsessions.spawn_child("worker", "quiet")
    assert await parent.subsessions.wait_child(cid) is None
    assert parent.subsessions.status(cid) is ChildStatus.DONE


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5])
async def test_wait_that_does_not_wait_on_a_running_child(
    parent: Session, script: Script, timeout: float
) -> None:
    cid = await spawn_held(parent, script, "slow")
    with pytest.raises(ChildNotFinished) as caught:
        await parent.subsessions.wait_child(cid, timeout=timeout)
    assert str(caught.value) == f"session {cid} has not completed"
    assert parent.subsessions.status(cid) is ChildStatus.PENDING

    script.answer("slow", ["finally"])
    assert await parent.subsessions.wait_child(cid) == "finally"
    # once finished, a wait that does not wait returns the result
    assert await parent.subsessions.wait_child(cid, timeout=0) == "finally"


async def test_wait_timeout_leaves_the_child_running(parent: Session, script: Script) -> None:
    cid = await spawn_held(parent, script, "slow")
    with pytest.raises(ChildTimeout) as caught:
        await parent.subsessions.wait_child(cid, timeout=0.01)
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, SubsessionError)
    assert caught.value.timeout_ms == 10
    assert str(caught.value) == f"session {cid} did not complete within 10ms"
    assert parent.subsessions.status(cid) is ChildStatus.PENDING
    assert script.cancelled == []  # the child's model call was not interrupted

    script.answer("slow", ["late but done"])
    assert await parent.subsessions.wait_child(cid, timeout=5) == "late but done"
    assert parent.subsessions.status(cid) is ChildStatus.DONE


@pytest.mark.parametrize("timeout", [-math.inf, -1e308])
async def test_an_infinitely_negative_timeout_does_not_wait(
    parent: Session, script: Script, timeout: float
) -> None:
    cid = await spawn_held(parent, script, "slow")
    with pytest.raises(ChildNotFinished):
        await parent.subsessions.wait_child(cid, timeout=timeout)
    script.answer("slow", ["done"])
    assert await parent.subsessions.wait_child(cid) == "done"
    assert await parent.subsessions.wait_child(cid, timeout=timeout) == "done"


@pytest.mark.parametrize("timeout", [0.0004, 1e-9])
async def test_a_tiny_positive_timeout_still_waits_and_times_out(
    parent: Session, script: Script, timeout: float
) -> None:
    """Only `timeout <= 0` means "do not wait"; any positive timeout ends in ChildTimeout."""
    cid = await spawn_held(parent, script, "slow")
    with pytest.raises(ChildTimeout):
        await parent.subsessions.wait_child(cid, timeout=timeout)
    assert parent.subsessions.status(cid) is ChildStatus.PENDING
    script.answer("slow", ["done"])
    assert await parent.subsessions.wait_child(cid) == "done"


async def test_an_infinite_timeout_waits_for_the_child(parent: Session, script: Script) -> None:
    cid = await spawn_held(parent, script, "slow")
    asyncio.get_running_loop().call_soon(script.answer, "slow", ["worth it"])
    assert await parent.subsessions.wait_child(cid, timeout=math.inf) == "worth it"


@pytest.mark.parametrize("bad_id", [new_session_id(), "not-a-uuid", "", "../x", "a/../../b"])
async def test_unknown_ids_are_unknown_sessions(parent: Session, bad_id: str) -> None:
    manager = parent.subsessions
    for attempt in (manager.wait_child(bad_id, timeout=0), manager.cancel_child(bad_id)):
        with pytest.raises(UnknownSession) as caught:
            await attempt
        assert str(caught.value) == f"unknown session {bad_id}"
    for query in (manager.status, manager.info):
        with pytest.raises(UnknownSession, match=f"^unknown session {re.escape(bad_id)}$"):
            query(bad_id)


async def test_the_model_is_told_a_path_like_id_is_an_unknown_session(
    parent: Session, script: Script
) -> None:
    """DESIGN 3.1: `../x` is an id that is not a child, like any other (not a bad argument)."""
    script.play(PARENT_PROMPT, [lambda done: [
        call("wait_session", session_id="../x", timeout_ms=10),
        call("cancel_session", session_id="../x"),
        call("wait_sessions", session_ids=["../x"], timeout_ms=10, mode="all"),
    ]])
    assert await parent.send_and_wait(PARENT_PROMPT) == "parent done"
    waited, cancelled, many = outputs(script.seen[PARENT_PROMPT][-1])
    assert (waited["output"], waited["success"]) == ("unknown session ../x", False)
    assert (cancelled["output"], cancelled["success"]) == ("unknown session ../x", False)
    assert orjson.loads(many["output"]) == {
        "results": {"../x": {"status": "unknown", "error": "unknown session ../x"}},
        "timed_out": False,
    }


async def test_a_parent_sees_only_its_own_children(
    engine: Engine, parent: Session, script: Script
) -> None:
    other = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    script.hold("theirs")
    theirs = await other.subsessions.spawn_child("worker", "theirs")
    await script.started("theirs")

    with pytest.raises(UnknownSession, match=f"^unknown session {theirs}$"):
        await parent.subsessions.wait_child(theirs)
    with pytest.raises(UnknownSession):
        parent.subsessions.status(theirs)
    with pytest.raises(UnknownSession):
        await parent.subsessions.cancel_child(theirs)
    assert parent.subsessions.children() == []

    # the other parent's child was left alone
    assert other.subsessions.status(theirs) is ChildStatus.PENDING
    script.answer("theirs", ["mine after all"])
    assert await other.subsessions.wait_child(theirs) == "mine after all"


async def test_model_error_fails_the_child(
    engine: Engine, parent: Session, script: Script, home: Path
) -> None:
    script.handlers["explode"] = lambda request: RuntimeError("model exploded")
    cid = await parent.subsessions.spawn_child("worker", "explode")
    with pytest.raises(ChildFailed) as caught:
        await parent.subsessions.wait_child(cid)
    assert caught.value.error == "model exploded"
    assert caught.value.session_id == cid
    assert str(caught.value) == f"session {cid} failed: model exploded"
    assert parent.subsessions.status(cid) is ChildStatus.FAILED
    assert parent.subsessions.info(cid).error == "model exploded"
    # a later wait gives the same answer
    with pytest.raises(ChildFailed):
        await parent.subsessions.wait_child(cid, timeout=0)

    assert terminals(rollout_of(home, cid)) == [{"type": "error", "message": "model exploded"}]
    await engine.close()
    messages = [e.get("message") for e in events(rollout_of(home, parent.session_id))]
    assert f"child session {cid} failed: model exploded" in messages


class Exploding:
    """A model client (our own interface) that raises what is not a model error: every call
    fails with RuntimeError; a call whose prompt is `slow` first waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if first_prompt(request) == "slow":
            await self.gate.wait()
        raise RuntimeError("model exploded")


async def test_a_model_raising_fails_each_task_once_and_leaves_no_exception_unretrieved(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A child's task, a top-level task its caller stopped waiting for, and a task woken by
    a child's end, each failed by a model raising RuntimeError: each fails once with the
    message, and asyncio never reports a task exception that nobody retrieved."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    model = Exploding()
    errors: list[str] = []
    failed = asyncio.Event()

    def heard(event: Any) -> None:
        if event.type == "session.error" and event.session_id == root.session_id:
            errors.append(event.data["message"])
            failed.set()

    async with Engine(home, model_client=model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                         wake_on_child_end=True))
        root.on(heard)
        with pytest.raises(StillRunning):
            await root.send_and_wait("slow", timeout=0.01)
        model.gate.set()
        await failed.wait()
        failed.clear()
        manager = root.subsessions
        cid = await manager.spawn_child("worker", "explode")
        await failed.wait()  # the task its child's end woke (unseen) failed too
        with pytest.raises(ChildFailed) as caught:
            await manager.wait_child(cid)
        assert str(caught.value) == f"session {cid} failed: model exploded"
        assert manager.info(cid).error == "model exploded"
    assert errors == ["model exploded", "model exploded"]
    failure = {"type": "error", "message": "model exploded"}
    assert terminals(rollout_of(home, cid)) == [failure]
    assert terminals(rollout_of(home, root.session_id)) == [failure, failure]
    told = [e.get("message") for e in events(rollout_of(home, root.session_id))]
    assert told.count(f"child session {cid} failed: model exploded") == 1
    gc.collect()  # a task whose exception nobody retrieved says so when it is collected
    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


# -- cancelling -------------------------------------------------------------------------
async def test_cancel_a_running_child(parent: Session, script: Script, home: Path) -> None:
    cid = await spawn_held(parent, script, "slow")

    assert await parent.subsessions.cancel_child(cid) is True
    assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
    assert script.cancelled == ["slow"]  # the in-flight model request was aborted
    with pytest.raises(ChildCancelled) as caught:
        await parent.subsessions.wait_child(cid)
    assert str(caught.value) == f"session {cid} was cancelled"
    assert await parent.subsessions.cancel_child(cid) is False  # already ended
    assert terminals(rollout_of(home, cid)) == [{"type": "turn_aborted", "reason": "cancelled"}]


async def test_cancel_a_child_that_already_ended_returns_false(
    parent: Session, script: Script
) -> None:
    script.handlers["bad"] = lambda request: RuntimeError("nope")
    done = await parent.subsessions.spawn_child("worker", "good")
    failed = await parent.subsessions.spawn_child("worker", "bad")
    assert await parent.subsessions.wait_child(done) == "answer to good"
    with pytest.raises(ChildFailed):
        await parent.subsessions.wait_child(failed)

    assert await parent.subsessions.cancel_child(done) is False
    assert await parent.subsessions.cancel_child(failed) is False
    assert parent.subsessions.status(done) is ChildStatus.DONE
    assert parent.subsessions.status(failed) is ChildStatus.FAILED
    assert await parent.subsessions.wait_child(done, timeout=0) == "answer to good"


def _child_that_waits_on_a_grandchild(ids: dict[str, str]) -> Callable[[ModelRequest], Any]:
    """A child's script: spawn a grandchild, then wait for it as long as possible."""

    def respond(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:
            return [call("create_session", session_type="worker", prompt="grandchild")]
        if len(done) == 1:
            assert done[0]["success"], done[0]
            ids["grandchild"] = orjson.loads(done[0]["output"])["session_id"]
            return [call("wait_session", session_id=ids["grandchild"], timeout_ms=FOREVER_MS)]
        return ["child saw " + done[-1]["output"]]

    return respond


async def test_cancelling_a_child_cancels_its_grandchild_first(
    parent: Session, script: Script, home: Path
) -> None:
    ids: dict[str, str] = {}
    script.handlers["child"] = _child_that_waits_on_a_grandchild(ids)
    script.hold("grandchild")
    cid = await parent.subsessions.spawn_child("worker", "child")
    await script.started("grandchild")

    assert await parent.subsessions.cancel_child(cid) is True
    assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
    assert script.cancelled == ["grandchild"]

    grand = rollout_of(home, ids["grandchild"])
    child = rollout_of(home, cid)
    assert grand.parent_id == cid
    assert terminals(grand) == [{"type": "turn_aborted", "reason": "cancelled"}]
    assert terminals(child) == [{"type": "turn_aborted", "reason": "cancelled"}]

    # the grandchild had settled before the child recorded its own abort
    child_events = [plain_ending(e) for e in events(child)]
    settled = child_events.index(
        {"type": "background_event", "message": f"child session {ids['grandchild']} cancelled"}
    )
    assert settled < child_events.index({"type": "turn_aborted", "reason": "cancelled"})

    def aborted_at(rollout: Rollout) -> str:
        [stamp] = [
            r["timestamp"]
            for r in rollout.records
            if r["type"] == "event_msg" and r["payload"]["type"] == "turn_aborted"
        ]
        return str(stamp)

    assert aborted_at(grand) <= aborted_at(child)


async def test_a_child_cancelled_before_it_ran_still_has_a_whole_rollout(
    parent: Session, script: Script, home: Path
) -> None:
    cid = await parent.subsessions.spawn_child("worker", "never")
    assert await parent.subsessions.cancel_child(cid) is True  # no await in between: not run
    assert script.seen["never"] == []
    assert parent.subsessions.status(cid) is ChildStatus.CANCELLED

    rollout = rollout_of(home, cid)
    assert rollout.meta["id"] == cid
    assert rollout.meta["session_type"] == "worker"
    assert spawn_of(rollout.meta)["parent"] == parent.session_id
    assert terminals(rollout) == [{"type": "turn_aborted", "reason": "cancelled"}]
    assert rollout.status == "cancelled"


async def test_cancel_while_a_child_is_ending_its_own_children_records_one_abort(
    home: Path, script: Script
) -> None:
    """A cancel landing while a finished child still ends its grandchild: one terminal record."""
    blocking = asyncio.Event()
    grandchild_cancelling = asyncio.Event()
    release = asyncio.Event()

    async def block(arguments: dict[str, Any], invocation: Any) -> str:
        blocking.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            grandchild_cancelling.set()
            await release.wait()  # a slow clean-up
            raise
        return "unreachable"

    async def child(request: ModelRequest) -> Any:
        if not outputs(request):
            return [call("create_session", session_type="worker", prompt="grandchild")]
        await blocking.wait()
        return ["child finished while its grandchild still runs"]

    script.handlers["child"] = child
    script.handlers["grandchild"] = lambda request: (
        [call("block")] if not outputs(request) else ["unreachable"]
    )
    tool = Tool("block", "blocks until cancelled", handler=block)
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(tools=(tool,), custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "child")
        await asyncio.wait_for(grandchild_cancelling.wait(), 10)  # the child is ending it
        cancelling = asyncio.create_task(parent.subsessions.cancel_child(cid))
        await asyncio.sleep(0)  # let the cancel land while the clean-up is still blocked
        release.set()
        cancelled = await cancelling
        status = parent.subsessions.status(cid)
        assert status in (ChildStatus.DONE, ChildStatus.CANCELLED)
        assert cancelled is (status is ChildStatus.CANCELLED)
        records = terminals(rollout_of(home, cid))
        assert len(records) == 1, records
        expected = "task_complete" if status is ChildStatus.DONE else "turn_aborted"
        assert records[0]["type"] == expected


# -- limits ----------------------------------------------------------------------------
async def test_depth_limit_refuses_a_spawn(engine: Engine, script: Script) -> None:
    top = await engine.create_session(SessionConfig(max_depth=0, custom_agents=(WORKER,)))
    with pytest.raises(DepthLimitReached) as caught:
        await top.subsessions.spawn_child("worker", "too deep")
    assert str(caught.value) == (
        "sub-session depth limit reached (max_depth=0); solve the task yourself"
    )
    assert top.subsessions.children() == []
    assert script.seen["too deep"] == []


async def test_a_child_at_the_depth_limit_is_not_offered_the_tools(
    engine: Engine, script: Script
) -> None:
    def child(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:  # called anyway, as a confused model might
            return [call("create_session", session_type="worker", prompt="grandchild")]
        return [f"{done[0]['success']}|{done[0]['output']}"]

    script.handlers["child"] = child
    top = await engine.create_session(SessionConfig(max_depth=1, custom_agents=(WORKER,)))
    cid = await top.subsessions.spawn_child("worker", "child")
    assert await top.subsessions.wait_child(cid) == (
        "False|sub-session depth limit reached (max_depth=1); solve the task yourself"
    )
    assert SUBSESSION_TOOLS.isdisjoint(script.seen["child"][0].tool_names)
    assert script.seen["grandchild"] == []


async def test_below_the_depth_limit_a_child_may_spawn(engine: Engine, script: Script) -> None:
    ids: dict[str, str] = {}
    script.handlers["child"] = _child_that_waits_on_a_grandchild(ids)
    top = await engine.create_session(SessionConfig(max_depth=2, custom_agents=(WORKER,)))
    cid = await top.subsessions.spawn_child("worker", "child")
    assert await top.subsessions.wait_child(cid) == ('child saw {"result":"answer to grandchild"}')
    assert set(script.seen["child"][0].tool_names) >= SUBSESSION_TOOLS
    # the grandchild is at depth 2 = max_depth: no sub-session tools for it
    assert SUBSESSION_TOOLS.isdisjoint(script.seen["grandchild"][0].tool_names)


async def test_child_limit_counts_running_children(engine: Engine, script: Script) -> None:
    top = await engine.create_session(SessionConfig(max_children=2, max_queued=0,
                                                    custom_agents=(WORKER,)))
    script.hold("a", "b")
    a = await top.subsessions.spawn_child("worker", "a")
    b = await top.subsessions.spawn_child("worker", "b")
    with pytest.raises(ChildLimitReached) as caught:
        await top.subsessions.spawn_child("worker", "c")
    assert str(caught.value) == (
        "sub-session limit reached (max_children=2); wait for or cancel a running session first"
    )
    assert len(top.subsessions.children()) == 2

    script.answer("a", ["a done"])
    assert await top.subsessions.wait_child(a) == "a done"
    c = await top.subsessions.spawn_child("worker", "c")  # a slot came free
    with pytest.raises(ChildLimitReached):
        await top.subsessions.spawn_child("worker", "d")

    assert await top.subsessions.cancel_child(b) is True  # cancelling frees one too
    d = await top.subsessions.spawn_child("worker", "d")
    assert await top.subsessions.wait_child(c) == "answer to c"
    assert await top.subsessions.wait_child(d) == "answer to d"


async def test_child_limit_counts_the_whole_tree(engine: Engine, script: Script) -> None:
    ids: dict[str, str] = {}
    script.handlers["child"] = _child_that_waits_on_a_grandchild(ids)
    script.hold("grandchild")
    top = await engine.create_session(SessionConfig(max_children=2, max_queued=0,
                                                    custom_agents=(WORKER,)))
    cid = await top.subsessions.spawn_child("worker", "child")
    await script.started("grandchild")
    with pytest.raises(ChildLimitReached):
        await top.subsessions.spawn_child("worker", "sibling")

    script.answer("grandchild", ["deep answer"])
    assert await top.subsessions.wait_child(cid) == 'child saw {"result":"deep answer"}'
    sibling = await top.subsessions.spawn_child("worker", "sibling")
    assert await top.subsessions.wait_child(sibling) == "answer to sibling"


# -- the child's configuration --------------------------------------------------------------
def _tools(log: list[str]) -> tuple[Tool, ...]:
    def handler(name: str) -> Callable[[dict[str, Any], Any], str]:
        def run(arguments: dict[str, Any], invocation: Any) -> str:
            log.append(name)
            return f"{name} ran"

        return run

    return tuple(Tool(n, f"tool {n}", handler=handler(n)) for n in ("a", "b", "c"))


@pytest.mark.parametrize(
    ("allowlist", "offered"),
    [(None, ["a", "b", "c"]), ([], []), (["c", "a", "zzz"], ["c", "a"])],
    ids=["all", "none", "some"],
)
async def test_the_parents_tools_are_filtered_by_the_profile(
    engine: Engine, script: Script, allowlist: list[str] | None, offered: list[str]
) -> None:
    log: list[str] = []

    def child(request: ModelRequest) -> Any:
        if not outputs(request):
            return [call("a"), call("b")]
        return [" / ".join(f"{o['success']}:{o['output']}" for o in outputs(request))]

    script.handlers["child"] = child
    profile = Profile(name="picky", developer_instructions="P", tools=allowlist)
    top = await engine.create_session(SessionConfig(tools=_tools(log), custom_agents=(profile,)))
    cid = await top.subsessions.spawn_child("picky", "child")
    answer = await top.subsessions.wait_child(cid)

    engine_tools = SUBSESSION_TOOLS | {"send_parent_message"}
    names = [n for n in script.seen["child"][0].tool_names if n not in engine_tools]
    assert names == offered
    # what the agent is told: its allowlist's tools; without one, nothing (DESIGN 3.6)
    told = [d["name"] for d in top.subsessions.tool_definitions("picky")]
    assert told == ([] if allowlist is None else offered)
    expected = [
        f"True:{n} ran"
        if n in offered
        else f"False:Tool '{n}' is not supported by this client instance."
        for n in ("a", "b")
    ]
    assert answer == " / ".join(expected)
    assert sorted(log) == [n for n in ("a", "b") if n in offered]  # denied: never invoked


@pytest.mark.parametrize(("model", "expected"), [("inherit", "parent-model"), ("other", "other")])
async def test_child_model_is_inherited_or_explicit(
    engine: Engine, script: Script, home: Path, model: str, expected: str
) -> None:
    profile = Profile(name="m", developer_instructions="M", model=model)
    top = await engine.create_session(SessionConfig(model="parent-model", custom_agents=(profile,)))
    cid = await top.subsessions.spawn_child("m", "which model")
    await top.subsessions.wait_child(cid)
    assert script.seen["which model"][0].model == expected
    assert top.subsessions.info(cid).model == expected
    assert rollout_of(home, cid).meta["model"] == expected


@pytest.mark.parametrize(
    "spec",
    ["worker", SessionConfig(instructions="From a config.")],
    ids=["profile", "config-without-cwd"],
)
async def test_child_inherits_the_parents_cwd(
    engine: Engine, home: Path, tmp_path: Path, spec: Any
) -> None:
    """DESIGN 4: a child inherits its parent's cwd (unless its config names another)."""
    cwd = str(tmp_path / "project")
    top = await engine.create_session(SessionConfig(cwd=cwd, custom_agents=(WORKER,)))
    cid = await top.subsessions.spawn_child(spec, "where am I")
    await top.subsessions.wait_child(cid)
    assert rollout_of(home, cid).meta["cwd"] == cwd


async def test_a_config_child_without_a_model_runs_the_parents_model(
    engine: Engine, script: Script, home: Path
) -> None:
    """An unset model means the parent's model, as a profile's "inherit" does."""
    top = await engine.create_session(SessionConfig(model="parent-model"))
    cid = await top.subsessions.spawn_child(SessionConfig(instructions="x"), "which model")
    await top.subsessions.wait_child(cid)
    assert script.seen["which model"][0].model == "parent-model"
    assert rollout_of(home, cid).meta["model"] == "parent-model"


async def test_persona_and_memory_never_reach_a_childs_model(
    engine: Engine, script: Script, home: Path
) -> None:
    profile = Profile(
        name="character",
        developer_instructions="Only these instructions.",
        persona="PERSONA-SECRET",
        memory="MEMORY-SECRET",
    )
    top = await engine.create_session(SessionConfig(custom_agents=(profile,)))
    by_name = await top.subsessions.spawn_child("character", "by name")
    by_profile = await top.subsessions.spawn_child(profile, "by profile")
    for cid in (by_name, by_profile):
        await top.subsessions.wait_child(cid)
        path = find_rollout(home, cid)
        assert b"SECRET" not in path.read_bytes()
    for prompt in ("by name", "by profile"):
        [request] = script.seen[prompt]
        assert request.instructions == "Only these instructions."
        seen = orjson.dumps([request.instructions, request.items, request.tools])
        assert b"SECRET" not in seen


# -- the child's loop -------------------------------------------------------------------
async def test_max_turns_exceeded_fails_the_child(
    engine: Engine, script: Script, home: Path
) -> None:
    script.handlers["loop"] = lambda request: [call("no_such_tool")]
    looper = Profile(name="looper", developer_instructions="L", max_turns=2)
    top = await engine.create_session(SessionConfig(custom_agents=(looper,)))
    cid = await top.subsessions.spawn_child("looper", "loop")
    with pytest.raises(ChildFailed) as caught:
        await top.subsessions.wait_child(cid)
    assert caught.value.error == "max_turns (2) exceeded without a final answer"
    assert top.subsessions.status(cid) is ChildStatus.FAILED
    assert len(script.seen["loop"]) == 2
    assert terminals(rollout_of(home, cid)) == [
        {"type": "error", "message": "max_turns (2) exceeded without a final answer"}
    ]


async def test_a_raising_tool_handler_is_a_failed_output_and_the_loop_goes_on(
    engine: Engine, script: Script
) -> None:
    def explode(arguments: dict[str, Any], invocation: Any) -> str:
        raise ValueError("kaboom")

    def child(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:
            return [call("explode", x=1)]
        return [f"recovered from {done[0]['output']} (success={done[0]['success']})"]

    script.handlers["child"] = child
    top = await engine.create_session(
        SessionConfig(tools=(Tool("explode", "raises", handler=explode),), custom_agents=(WORKER,))
    )
    cid = await top.subsessions.spawn_child("worker", "child")
    assert await top.subsessions.wait_child(cid) == "recovered from kaboom (success=False)"
    assert top.subsessions.status(cid) is ChildStatus.DONE
    assert len(script.seen["child"]) == 2


# -- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["", "   ", "\n\t "])
async def test_an_empty_prompt_is_refused(parent: Session, script: Script, prompt: str) -> None:
    with pytest.raises(InvalidArguments):
        await parent.subsessions.spawn_child("worker", prompt)
    assert parent.subsessions.children() == []
    assert script.model.requests == []


async def test_an_unknown_profile_name_is_refused(parent: Session, script: Script) -> None:
    with pytest.raises(UnknownSessionType) as caught:
        await parent.subsessions.spawn_child("nope", "hello")
    message = str(caught.value)
    assert message.startswith("unknown session_type nope; expected one of: ")
    names = message.split("expected one of: ", 1)[1].split(", ")
    assert {"worker", "tester", "mathematician", "default"} <= set(names)
    assert parent.subsessions.children() == []
    assert script.model.requests == []


# -- aborting and closing -------------------------------------------------------------------
async def test_abort_all_children(parent: Session, script: Script, home: Path) -> None:
    done = await parent.subsessions.spawn_child("worker", "quick")
    assert await parent.subsessions.wait_child(done) == "answer to quick"
    script.hold("x", "y", "z")
    running = [await parent.subsessions.spawn_child("worker", p) for p in ("x", "y", "z")]
    await script.started("x")

    await parent.subsessions.abort_all_children()
    assert parent.subsessions.running() == []
    assert parent.subsessions.status(done) is ChildStatus.DONE
    for cid in running:
        assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
        with pytest.raises(ChildCancelled):
            await parent.subsessions.wait_child(cid, timeout=0)
        assert [t["type"] for t in terminals(rollout_of(home, cid))] == ["turn_aborted"]
    assert await parent.subsessions.wait_child(done) == "answer to quick"


@pytest.mark.parametrize("how", ["abort", "caller"])
async def test_a_cancelled_top_level_task_cancels_its_children_first(
    home: Path, script: Script, how: str
) -> None:
    """`Session.abort()`, or cancelling the caller of `send_and_wait`, while the task waits
    for the children it spawned: they end cancelled (by their parent, grandchild included)
    before the cancel reaches the caller, the engine still open."""
    ids: dict[str, str] = {}
    script.handlers["child"] = _child_that_waits_on_a_grandchild(ids)
    script.hold("grandchild", "plain")
    script.play(PARENT_PROMPT, [
        lambda outs: [call("create_session", session_type="worker", prompt="child"),
                      call("create_session", session_type="worker", prompt="plain")],
        lambda outs: [call("wait_sessions", session_ids=[orjson.loads(o["output"])["session_id"]
                                                         for o in outs],
                           mode="all", timeout_ms=FOREVER_MS)],
    ])
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        task = asyncio.ensure_future(root.send_and_wait(PARENT_PROMPT))
        await script.started("grandchild", "plain")
        if how == "abort":
            assert root.abort() is True
        else:
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        children = root.subsessions.children()
        assert [c.status for c in children] == [ChildStatus.CANCELLED] * 2
        assert sorted(script.cancelled) == ["grandchild", "plain"]  # their model calls
        assert not engine.closed
        for sid in [*(c.session_id for c in children), ids["grandchild"]]:
            [ending] = [e for e in events(rollout_of(home, sid)) if e["type"] == "turn_aborted"]
            assert (ending["reason"], ending["cancelled_by"]) == ("interrupted", "parent"), sid
    [ending] = [e for e in events(rollout_of(home, root.session_id))
                if e["type"] == "turn_aborted"]
    assert ending["cancelled_by"] == "host"


async def test_closing_the_engine_cancels_every_child(home: Path, script: Script) -> None:
    ids: dict[str, str] = {}
    script.handlers["child"] = _child_that_waits_on_a_grandchild(ids)
    script.hold("grandchild", "plain", "last")
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        children = [await parent.subsessions.spawn_child("worker", p) for p in ("child", "plain")]
        await script.started("grandchild")
        await script.started("plain")
        children.append(await parent.subsessions.spawn_child("worker", "last"))  # just queued

    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert engine.closed
    for cid in children:
        assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
        with pytest.raises(ChildCancelled):
            await parent.subsessions.wait_child(cid, timeout=0)
    for sid in [*children, ids["grandchild"]]:
        rollout = rollout_of(home, sid)
        assert terminals(rollout) == [{"type": "turn_aborted", "reason": "cancelled"}], sid
        assert events(rollout)[-1]["type"] == "turn_aborted"

    with pytest.raises(EngineClosed):
        await parent.subsessions.spawn_child("worker", "too late")
    with pytest.raises(EngineClosed):
        await engine.create_session(SessionConfig())


async def test_the_result_is_on_disk_when_wait_returns(parent: Session, script: Script) -> None:
    script.hold(*(f"job {n}" for n in range(5)))
    cids = [await parent.subsessions.spawn_child("worker", f"job {n}") for n in range(5)]
    for n, cid in enumerate(cids):
        script.answer(f"job {n}", [f"result number {n}"])
        result = await parent.subsessions.wait_child(cid)
        rollout = read_rollout(parent.subsessions.info(cid).rollout_path)  # no await between
        assert result == f"result number {n}"
        assert terminals(rollout) == [{"type": "task_complete", "last_agent_message": result}]
        assert rollout.status == "completed"
