"""Composition through the programmatic API (issue 5; DESIGN 3.2, 3.5, 3.7).

wait_any / wait_all, run_parallel / run_chain, per-child usage and the usage of a
whole tree, the subagent.* ending events, and a profile run top-level with its
persona and memory. Children are held "running" by futures the test resolves and
ordered by events, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    FOREVER_MS,
    LIMIT_TEXT,
    WORKER,
    Script,
    Watch,
    call,
    meet_then_end_in_reverse,
    outputs,
    rollout_of,
    script,
    spawn_held,
    terminals,
    watch,
)

from subsessions import (
    ChildInfo,
    ChildStatus,
    Engine,
    ModelRequest,
    ModelResponse,
    Profile,
    Session,
    SessionConfig,
    Tool,
)
from subsessions.children import WaitResult
from subsessions.ids import new_session_id
from subsessions.rollouts.reader import Rollout, find_rollout
from subsessions.rollouts.summary import spawn_of
from subsessions.usage import Usage

__all__ = ["script", "watch"]  # the fixtures, imported so that pytest finds them here


# Why some tests run in process only (tests/conftest.py `in_process`):
TOP = "no child: nothing runs on a shard"


# -- helpers ------------------------------------------------------------------------------
def notes(rollout: Rollout) -> list[str]:
    return [e["message"] for e in rollout.events("background_event")]


def rollout_usage(rollout: Rollout) -> Usage:
    """What a session cost, counted from its rollout alone."""
    counts = rollout.events("token_count")
    total = counts[-1]["info"]["total_token_usage"] if counts else {}
    calls = [i for i in rollout.response_items() if i["type"] == "function_call"]
    return Usage(
        input_tokens=total.get("input_tokens", 0),
        output_tokens=total.get("output_tokens", 0),
        tool_calls=len(calls),
        turns=len(counts),  # one token_count per model call
    )


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="engine-model",
                      backend=backend) as engine:
        yield engine


@pytest.fixture
async def parent(engine: Engine, watch: Watch) -> Session:
    session = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    session.on(watch)
    return session


# -- wait_any / wait_all --------------------------------------------------------------------
async def test_wait_any_returns_at_the_first_ending_and_the_rest_run_on(
    parent: Session, script: Script, watch: Watch
) -> None:
    manager = parent.subsessions
    script.hold("alpha", "bravo", "charlie")
    a, b, c = [await manager.spawn_child("worker", p) for p in ("alpha", "bravo", "charlie")]
    await script.started("alpha", "bravo", "charlie")

    waiting = asyncio.create_task(manager.wait_any([a, b, c]))
    await asyncio.sleep(0)
    assert not waiting.done()  # nobody has ended yet
    script.answer("bravo", ["bravo answer"])  # the middle one ends first
    first = await waiting
    assert first.timed_out is False
    assert first.unknown == ()
    assert list(first.children) == [a, b, c]
    assert all(isinstance(info, ChildInfo) for info in first.children.values())
    assert {cid: info.status for cid, info in first.children.items()} == {
        a: ChildStatus.PENDING, b: ChildStatus.DONE, c: ChildStatus.PENDING,
    }
    assert first.children[b].result == "bravo answer"

    # charlie ends while nobody waits; a second wait_any returns at once (one has ended)
    # and reports both that have ended
    script.answer("charlie", ["charlie answer"])
    await watch.ended(c)
    try:
        second = await asyncio.wait_for(manager.wait_any([a, b, c]), 5)
    except TimeoutError:
        pytest.fail("wait_any kept waiting although two of its children had already ended")
    assert second.timed_out is False
    assert {cid: info.outcome() for cid, info in second.children.items()} == {
        a: {"status": "running"},
        b: {"status": "completed", "result": "bravo answer"},
        c: {"status": "completed", "result": "charlie answer"},
    }
    assert manager.status(a) is ChildStatus.PENDING  # not cancelled by any of the waits
    assert script.cancelled == []

    script.answer("alpha", ["alpha answer"])
    assert await manager.wait_child(a) == "alpha answer"


async def test_wait_any_and_wait_all_time_out_and_leave_the_children_running(
    parent: Session, script: Script, watch: Watch
) -> None:
    manager = parent.subsessions
    script.hold("charlie")
    a = await manager.spawn_child("worker", "alpha")
    b = await manager.spawn_child("worker", "bravo")
    c = await manager.spawn_child("worker", "charlie")
    await watch.ended(a, b)
    await script.started("charlie")

    every = await manager.wait_all([a, b, c], timeout=0.02)
    assert every.timed_out is True
    assert {cid: info.outcome() for cid, info in every.children.items()} == {
        a: {"status": "completed", "result": "answer to alpha"},
        b: {"status": "completed", "result": "answer to bravo"},
        c: {"status": "running"},
    }
    only_c = await manager.wait_any([c], timeout=0.01)
    assert only_c.timed_out is True
    assert only_c.children[c].status is ChildStatus.PENDING
    assert manager.status(c) is ChildStatus.PENDING
    assert script.cancelled == []

    assert await manager.cancel_child(c) is True
    assert script.cancelled == ["charlie"]
    after = await manager.wait_all([a, b, c])
    assert after.timed_out is False
    assert after.children[c].outcome() == {"status": "cancelled", "error": "cancelled"}


async def test_wait_many_reports_unknown_ids_without_failing(
    engine: Engine, parent: Session, script: Script
) -> None:
    other = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    theirs = await other.subsessions.spawn_child("worker", "theirs")
    mine = await parent.subsessions.spawn_child("worker", "mine")
    stranger = new_session_id()

    seen = await parent.subsessions.wait_all([mine, stranger, theirs, "not-an-id"])
    assert seen.timed_out is False
    assert list(seen.children) == [mine]
    assert seen.children[mine].result == "answer to mine"
    assert seen.unknown == (stranger, theirs, "not-an-id")

    # nothing known to wait for: both return at once, nothing timed out
    assert await parent.subsessions.wait_any([stranger]) == WaitResult({}, (stranger,), False)
    assert await parent.subsessions.wait_all([theirs]) == WaitResult({}, (theirs,), False)
    assert await other.subsessions.wait_child(theirs) == "answer to theirs"


# -- run_parallel / run_chain ------------------------------------------------------------
async def test_run_parallel_overlaps_and_returns_results_in_task_order(
    parent: Session, script: Script, watch: Watch
) -> None:
    prompts = ["p0", "p1", "p2"]
    meet_then_end_in_reverse(script, watch, prompts)
    run = await parent.subsessions.run_parallel([("worker", p) for p in prompts])

    assert run.timed_out is False
    assert run.failed_step is None
    assert [step.index for step in run.steps] == [0, 1, 2]
    assert run.results == ["p0 done", "p1 done", "p2 done"]
    ids = [script.seen[p][0].session_id for p in prompts]
    assert [step.child.session_id for step in run.steps if step.child] == ids
    assert [e.data["remote_session_id"] for e in watch.endings()] == ids[::-1]
    assert [step.outcome() for step in run.steps] == [
        {"session_id": cid, "session_type": "worker", "status": "completed", "result": f"{p} done"}
        for cid, p in zip(ids, prompts, strict=True)
    ]


async def test_run_children_are_ordinary_children(
    parent: Session, script: Script, home: Path, engine: Engine
) -> None:
    script.hold("stuck")
    running = asyncio.create_task(
        parent.subsessions.run_parallel([("worker", "kept"), ("worker", "stuck")])
    )
    await script.started("stuck", "kept")
    stuck = script.seen["stuck"][0].session_id
    listed = [info.session_id for info in parent.subsessions.children()]
    assert listed == [script.seen["kept"][0].session_id, stuck]
    assert await parent.subsessions.cancel_child(stuck) is True  # cancellable mid-run

    run = await running
    assert run.results == ["answer to kept", None]
    assert [step.child.status for step in run.steps if step.child] == [
        ChildStatus.DONE, ChildStatus.CANCELLED,
    ]
    await engine.close()
    parent_notes = notes(rollout_of(home, parent.session_id))
    for cid, ending in zip(listed, ("completed", "cancelled"), strict=True):
        rollout = rollout_of(home, cid)
        assert spawn_of(rollout.meta)["parent"] == parent.session_id
        assert rollout.meta["session_type"] == "worker"
        assert len(terminals(rollout)) == 1
        assert parent_notes.count(f"child session {cid} {ending}") == 1
        assert sum(n.startswith(f"spawned child session {cid} ") for n in parent_notes) == 1


async def test_run_parallel_over_the_child_limit_fails_the_overflow_steps(
    engine: Engine, script: Script
) -> None:
    top = await engine.create_session(SessionConfig(max_children=2, max_queued=0,
                                                    custom_agents=(WORKER,)))
    run = await top.subsessions.run_parallel([("worker", f"p{i}") for i in range(4)])
    assert run.results[:2] == ["answer to p0", "answer to p1"]
    for step in run.steps[2:]:
        assert step.child is None
        assert step.outcome() == {"status": "failed", "error": LIMIT_TEXT.format(n=2)}
    assert script.seen["p2"] == script.seen["p3"] == []
    assert len(top.subsessions.children()) == 2


async def test_run_chain_feeds_each_result_into_the_next_prompt(
    parent: Session, script: Script
) -> None:
    run = await parent.subsessions.run_chain(
        [("worker", "start"), ("worker", "then {previous}"), ("worker", "last: {previous}!")]
    )
    assert run.failed_step is None
    assert run.timed_out is False
    second, third = "then answer to start", "last: answer to then answer to start!"
    assert [len(script.seen[p]) for p in ("start", second, third)] == [1, 1, 1]
    assert run.results == ["answer to start", f"answer to {second}", f"answer to {third}"]
    assert len(parent.subsessions.children()) == 3


async def test_run_chain_stops_at_a_failing_middle_step(parent: Session, script: Script) -> None:
    script.handlers["then answer to start"] = lambda request: RuntimeError("middle broke")
    run = await parent.subsessions.run_chain(
        [("worker", "start"), ("worker", "then {previous}"), ("worker", "never {previous}")]
    )
    assert run.failed_step == 1
    assert run.timed_out is False
    assert len(run.steps) == 2
    assert run.steps[0].outcome()["status"] == "completed"
    assert run.steps[1].outcome()["status"] == "failed"
    assert run.steps[1].outcome()["error"] == "middle broke"
    assert [p for p in script.seen if p.startswith("never")] == []
    assert len(parent.subsessions.children()) == 2  # the last step was never spawned


# -- usage and the ending events -------------------------------------------------------------
class FallbackModel:
    """Answers `primary-model` requests as if its fallback `backup-model` had stood in."""

    def __init__(self, inner: Script) -> None:
        self.inner = inner

    async def respond(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.respond(request)
        if request.model == "primary-model":
            return ModelResponse(output=response.output, usage=response.usage, model="backup-model")
        return response


async def test_child_usage_duration_and_answering_model(home: Path, script: Script) -> None:
    lookup = Tool("lookup", "looks things up", handler=lambda arguments, invocation: "found")
    script.handlers["research"] = lambda request: (
        [call("lookup")] if not outputs(request) else ["researched"]
    )
    script.hold("plain")
    fallback = Profile(name="fb", model="primary-model", fallback_models=("backup-model",))
    watch = Watch()
    async with Engine(home, model_client=FallbackModel(script), model="engine-model") as engine:
        top = await engine.create_session(
            SessionConfig(tools=(lookup,), custom_agents=(WORKER, fallback))
        )
        top.on(watch)
        before = time.time()
        plain = await top.subsessions.spawn_child("worker", "plain")
        assert top.subsessions.info(plain).duration_ms is None  # still running
        script.answer("plain", ["plain answer"])
        research = await top.subsessions.spawn_child("fb", "research")
        for cid in (plain, research):
            await top.subsessions.wait_child(cid)
        elapsed_ms = (time.time() - before) * 1000

        info = top.subsessions.info(research)
        assert info.usage.turns == 2
        assert info.usage.tool_calls == 1
        assert info.usage.input_tokens > 0
        assert info.usage.output_tokens > 0
        assert info.usage.total_tokens == info.usage.input_tokens + info.usage.output_tokens
        assert info.usage == rollout_usage(rollout_of(home, research))
        assert (info.model, info.answering_model) == ("primary-model", "backup-model")
        plain_info = top.subsessions.info(plain)
        assert (plain_info.model, plain_info.answering_model) == ("engine-model", "engine-model")
        assert plain_info.usage == Usage(
            plain_info.usage.input_tokens, plain_info.usage.output_tokens, 0, 1
        )
        for child in (info, plain_info):
            assert isinstance(child.duration_ms, int)
            assert 0 <= child.duration_ms <= elapsed_ms + 1

            [ended] = watch.endings(child.session_id)
            assert ended.type == "subagent.completed"
            assert ended.data["total_tokens"] == child.usage.total_tokens
            assert ended.data["total_tool_calls"] == child.usage.tool_calls
            assert ended.data["duration_ms"] == child.duration_ms


@pytest.mark.parametrize("how", ["completed", "failed", "cancelled"])
async def test_the_ending_event_says_how_the_child_ended(
    parent: Session, script: Script, watch: Watch, how: str
) -> None:
    cid = await spawn_held(parent, script, "job")
    if how == "cancelled":
        assert await parent.subsessions.cancel_child(cid) is True
    else:
        script.answer("job", ["job answer"] if how == "completed" else RuntimeError("job broke"))
        await watch.ended(cid)
    [ended] = watch.endings(cid)
    info = parent.subsessions.info(cid)
    data = ended.data
    assert data["remote_session_id"] == cid
    assert data["agent_name"] == "worker"
    assert data["total_tokens"] == info.usage.total_tokens
    assert data["total_tool_calls"] == 0
    assert data["duration_ms"] == info.duration_ms
    if how == "completed":
        assert ended.type == "subagent.completed"
        assert "error" not in data
        assert not data.get("cancelled", False)
    elif how == "failed":
        assert ended.type == "subagent.failed"
        assert data["error"] == "job broke"
        assert data["cancelled"] is False
    else:
        assert ended.type == "subagent.failed"
        assert data["cancelled"] is True


async def test_tree_usage_is_the_sum_of_parent_child_and_grandchild(
    engine: Engine, parent: Session, script: Script, home: Path
) -> None:
    def waits_on(next_prompt: str) -> Callable[[ModelRequest], Any]:
        def respond(request: ModelRequest) -> Any:
            done = outputs(request)
            if not done:
                return [call("create_session", session_type="worker", prompt=next_prompt)]
            if len(done) == 1:
                child = orjson.loads(done[0]["output"])["session_id"]
                return [call("wait_session", session_id=child, timeout_ms=FOREVER_MS)]
            return [f"saw {done[-1]['output']}"]

        return respond

    script.handlers["top"] = waits_on("child")
    script.handlers["child"] = waits_on("grandchild")
    assert await parent.send_and_wait("top") == (
        'saw {"result":"saw {\\"result\\":\\"answer to grandchild\\"}"}'
    )
    [child] = parent.subsessions.children()
    [asked] = script.seen["grandchild"]  # run on the driver or on the child's shard
    grandchild = asked.session_id
    assert orjson.loads(outputs(script.seen["child"][1])[0]["output"])["session_id"] == (
        grandchild)  # the child spawned it

    await engine.close()
    parts = [
        rollout_usage(rollout_of(home, sid))
        for sid in (parent.session_id, child.session_id, grandchild)
    ]
    assert [p.turns for p in parts] == [3, 3, 1]
    assert [p.tool_calls for p in parts] == [2, 2, 0]
    assert parent.usage() == parts[0]
    assert parent.subsessions.info(child.session_id).usage == parts[1]
    assert parent.usage(include_children=True) == Usage.total(parts)


# -- persona and memory --------------------------------------------------------------------
@pytest.mark.in_process(TOP)
async def test_a_profile_run_top_level_gets_its_persona_and_memory(
    engine: Engine, script: Script, home: Path
) -> None:
    marker = new_session_id()
    profile = Profile(
        name="character",
        developer_instructions="Play the character.",
        persona=f"PERSONA {marker}",
        memory=f"MEMORY {marker}",
    )
    config = SessionConfig(custom_agents=(profile,))
    by_name = await engine.create_session(config, profile="character")
    by_object = await engine.create_session(SessionConfig(), profile=profile)
    for session, prompt in ((by_name, "top by name"), (by_object, "top by object")):
        assert await session.send_and_wait(prompt) == f"answer to {prompt}"
        [request] = script.seen[prompt]
        assert request.session_id == session.session_id
        for part in ("Play the character.", f"PERSONA {marker}", f"MEMORY {marker}"):
            assert part in request.instructions

    # the same profile as a child of that session: developer instructions only
    cid = await by_name.subsessions.spawn_child("character", "as a child")
    assert await by_name.subsessions.wait_child(cid) == "answer to as a child"
    [request] = script.seen["as a child"]
    assert request.instructions == "Play the character."
    assert marker not in orjson.dumps([request.instructions, request.items, request.tools]).decode()
    assert marker.encode() not in find_rollout(home, cid).read_bytes()
