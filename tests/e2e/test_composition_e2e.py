"""Composition through the model-callable tools (issue 5; DESIGN 3.1, 3.4, 3.5).

A scripted PARENT model calls wait_sessions / run_sessions / list_profiles next to
create / wait / cancel; what the tools return is read back from the
`function_call_output` items the parent's model is shown. Completion notices are
read from the developer messages the parent's model receives. Children are held
running by futures the test resolves and ordered by events, never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import (
    FOREVER_MS,
    LIMIT_TEXT,
    PARENT_PROMPT,
    SUBSESSION_TOOLS,
    WORKER,
    Script,
    Step,
    Watch,
    call,
    create,
    failure,
    meet_then_end_in_reverse,
    outputs,
    prompt_of,
    rollout_of,
    script,
    spawned,
    value,
    wait,
    watch,
)

from subsessions import (
    ChildStatus,
    Engine,
    ModelRequest,
    Profile,
    ProfileError,
    Session,
    SessionConfig,
)
from subsessions.ids import new_session_id
from subsessions.profiles import parse_profile
from subsessions.rollouts.reader import find_rollout

__all__ = ["script", "watch"]  # the fixtures, imported so that pytest finds them here

NOTICE_OPEN, NOTICE_CLOSE = "<subsession_notification>", "</subsession_notification>"
DEPTH_TEXT = "sub-session depth limit reached (max_depth={n}); solve the task yourself"


# -- helpers ------------------------------------------------------------------------------
def wait_many(ids: Sequence[str], mode: str, timeout_ms: int = FOREVER_MS) -> dict[str, Any]:
    return call("wait_sessions", session_ids=list(ids), timeout_ms=timeout_ms, mode=mode)


def run(mode: str, *tasks: tuple[str, str], timeout_ms: int = FOREVER_MS) -> dict[str, Any]:
    listed = [{"session_type": kind, "prompt": prompt} for kind, prompt in tasks]
    return call("run_sessions", mode=mode, tasks=listed, timeout_ms=timeout_ms)


def notices(request: ModelRequest) -> list[dict[str, Any]]:
    """The completion notices in what a model was shown, parsed, in order."""
    found = []
    for item in request.items:
        if item.get("type") != "message" or item.get("role") != "developer":
            continue
        text = item["content"][0]["text"]
        if text.startswith(NOTICE_OPEN):
            assert text.endswith(NOTICE_CLOSE), text
            found.append(orjson.loads(text[len(NOTICE_OPEN) : -len(NOTICE_CLOSE)]))
    return found


@pytest.fixture
async def engine(home: Path, script: Script) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="gpt-test") as engine:
        yield engine


async def new_parent(engine: Engine, watch: Watch, config: SessionConfig | None = None) -> Session:
    parent = await engine.create_session(config or SessionConfig(custom_agents=(WORKER,)))
    parent.on(watch)
    return parent


async def task(
    parent: Session, script: Script, steps: Sequence[Step], prompt: str = PARENT_PROMPT
) -> list[dict[str, Any]]:
    """One task of `parent` through `steps`; every tool output its model saw. A wait that
    should return but does not fails the test instead of blocking it for an hour."""
    script.play(prompt, steps)
    try:
        answer = await asyncio.wait_for(parent.send_and_wait(prompt), 10)
    except TimeoutError:
        calls = [o["call_id"] for o in outputs(script.seen[prompt][-1])]
        pytest.fail(f"task {prompt!r} hung in a tool call after the outputs of {calls}")
    assert answer == "parent done"
    return outputs(script.seen[prompt][-1])


def done(result: str | None) -> dict[str, Any]:
    return {"status": "completed", "result": result}


PENDING = {"status": "running"}


# -- wait_sessions ---------------------------------------------------------------------------
async def test_wait_sessions_any_with_three_children_ending_at_different_times(
    engine: Engine, script: Script, watch: Watch
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("alpha", "bravo", "charlie")
    ids: list[str] = []

    async def first_wait(outs: list[dict[str, Any]]) -> Any:
        ids.extend(spawned(outs, n) for n in range(3))
        await script.started("alpha", "bravo", "charlie")
        script.answer_soon("bravo", ["bravo answer"])  # the middle one ends first
        return [wait_many(ids, "any")]

    async def second_wait(outs: list[dict[str, Any]]) -> Any:
        script.answer("charlie", ["charlie answer"])  # ends while nobody waits
        await watch.ended(ids[2])
        return [wait_many(ids, "any")]

    def last_wait(outs: list[dict[str, Any]]) -> Any:
        script.answer_soon("alpha", ["alpha answer"])
        return [wait_many(ids, "all")]

    outs = await task(
        parent,
        script,
        [
            lambda outs: [create("worker", p) for p in ("alpha", "bravo", "charlie")],
            first_wait,
            second_wait,
            last_wait,
        ],
    )
    a, b, c = ids
    assert value(outs[3]) == {
        "results": {a: PENDING, b: done("bravo answer"), c: PENDING},
        "timed_out": False,
    }
    assert value(outs[4]) == {  # returned at once, with both that had ended by then
        "results": {a: PENDING, b: done("bravo answer"), c: done("charlie answer")},
        "timed_out": False,
    }
    assert value(outs[5]) == {
        "results": {a: done("alpha answer"), b: done("bravo answer"), c: done("charlie answer")},
        "timed_out": False,
    }
    assert script.cancelled == []  # the waits that returned early left alpha running
    assert len(script.seen["alpha"]) == 1
    assert watch.ending_order() == [b, c, a]


async def test_wait_sessions_all_times_out_leaving_one_running_then_cancel_it(
    engine: Engine, script: Script, watch: Watch
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("charlie")
    ids: list[str] = []
    status_before_cancel: list[ChildStatus] = []

    async def wait_all_briefly(outs: list[dict[str, Any]]) -> Any:
        ids.extend(spawned(outs, n) for n in range(3))
        await watch.ended(ids[0], ids[1])
        await script.started("charlie")
        return [wait_many(ids, "all", timeout_ms=20)]

    def cancel_the_last(outs: list[dict[str, Any]]) -> Any:
        status_before_cancel.append(parent.subsessions.status(ids[2]))
        return [call("cancel_session", session_id=ids[2])]

    outs = await task(
        parent,
        script,
        [
            lambda outs: [create("worker", p) for p in ("alpha", "bravo", "charlie")],
            wait_all_briefly,
            cancel_the_last,
            lambda outs: [wait_many(ids, "all", timeout_ms=0)],
        ],
    )
    a, b, c = ids
    assert value(outs[3]) == {
        "results": {a: done("answer to alpha"), b: done("answer to bravo"), c: PENDING},
        "timed_out": True,
    }
    assert status_before_cancel == [ChildStatus.PENDING]  # the timeout did not end it
    assert value(outs[4]) == {"cancelled": True}
    assert script.cancelled == ["charlie"]
    assert value(outs[5]) == {
        "results": {
            a: done("answer to alpha"),
            b: done("answer to bravo"),
            c: {"status": "cancelled", "error": "cancelled"},
        },
        "timed_out": False,
    }
    assert parent.subsessions.status(c) is ChildStatus.CANCELLED


async def test_wait_sessions_reports_unknown_ids_per_id(
    engine: Engine, script: Script, watch: Watch
) -> None:
    other = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    theirs = await other.subsessions.spawn_child("worker", "theirs")
    parent = await new_parent(engine, watch)
    stranger = new_session_id()
    unknown = [stranger, theirs, "not-a-uuid", "../x", "a/b"]  # all simply unknown (3.1)

    outs = await task(
        parent,
        script,
        [
            lambda outs: [create("worker", "mine")],
            lambda outs: [wait_many([spawned(outs), *unknown], "all")],
            lambda outs: [wait_many(unknown, "any")],  # nothing known: returns at once
        ],
    )
    mine = spawned(outs)
    unknown_results = {
        cid: {"status": "unknown", "error": f"unknown session {cid}"} for cid in unknown
    }
    assert value(outs[1]) == {
        "results": {mine: done("answer to mine"), **unknown_results},
        "timed_out": False,
    }
    assert value(outs[2]) == {"results": unknown_results, "timed_out": False}
    assert other.subsessions.status(theirs) in (ChildStatus.PENDING, ChildStatus.DONE)
    assert await other.subsessions.wait_child(theirs) == "answer to theirs"


X = "01a1f000-0000-7000-8000-000000000000"


@pytest.mark.parametrize(
    ("arguments", "mentions"),
    [
        ({"session_ids": [], "timeout_ms": 0, "mode": "any"}, "empty"),
        ({"session_ids": [X], "timeout_ms": 0, "mode": "first"}, "mode"),
        ({"session_ids": [X], "timeout_ms": 0, "mode": None}, "mode"),
        ({"timeout_ms": 0, "mode": "any"}, "session_ids"),
        ({"session_ids": [X], "mode": "any"}, "timeout_ms"),
        ({"session_ids": [X], "timeout_ms": 0}, "mode"),
        ({"session_ids": X, "timeout_ms": 0, "mode": "any"}, "session_ids"),
        ({"session_ids": [7], "timeout_ms": 0, "mode": "any"}, "session_ids[0]"),
        ({"session_ids": [X], "timeout_ms": "soon", "mode": "any"}, "timeout_ms"),
        ({"session_ids": [X], "timeout_ms": 0, "mode": "any", "poll": 1}, "poll"),
        ('{"session_ids": [', "JSON"),
    ],
    ids=[
        "empty-list", "bad-mode", "null-mode",
        "missing-ids", "missing-timeout", "missing-mode", "ids-not-a-list", "id-not-a-string",
        "timeout-str", "extra-field", "not-json",
    ],
)
async def test_wait_sessions_invalid_arguments(
    engine: Engine, script: Script, watch: Watch, arguments: Any, mentions: str
) -> None:
    parent = await new_parent(engine, watch)
    outs = await task(parent, script, [lambda outs: [call("wait_sessions", arguments)]])
    text = failure(outs[0])
    prefix = "invalid arguments for wait_sessions: "
    assert text.startswith(prefix), text
    assert mentions in text[len(prefix) :]
    assert parent.subsessions.children() == []


# -- run_sessions ------------------------------------------------------------------------
async def test_run_sessions_parallel_overlaps_and_returns_results_in_task_order(
    engine: Engine, script: Script, watch: Watch
) -> None:
    prompts = ["p0", "p1", "p2"]
    meet_then_end_in_reverse(script, watch, prompts)
    parent = await new_parent(engine, watch)
    tasks = [("worker", p) for p in prompts]
    outs = await task(parent, script, [lambda outs: [run("parallel", *tasks)]])

    ids = [script.seen[p][0].session_id for p in prompts]
    assert value(outs[0]) == {
        "mode": "parallel",
        "results": [
            {"session_id": cid, "session_type": "worker", "status": "completed",
             "result": f"{p} done"}
            for cid, p in zip(ids, prompts, strict=True)
        ],
        "timed_out": False,
    }
    assert watch.ending_order() == ids[::-1]
    assert [info.session_id for info in parent.subsessions.children()] == ids


async def test_run_sessions_chain_replaces_previous_with_the_previous_result(
    engine: Engine, script: Script, watch: Watch
) -> None:
    parent = await new_parent(engine, watch)
    outs = await task(
        parent,
        script,
        [lambda outs: [run("chain", ("worker", "start"), ("worker", "then {previous}"),
                           ("worker", "last: {previous}!"))]],
    )
    second, third = "then answer to start", "last: answer to then answer to start!"
    assert [len(script.seen[p]) for p in ("start", second, third)] == [1, 1, 1]
    body = value(outs[0])
    assert body["mode"] == "chain"
    assert body["timed_out"] is False
    assert "failed_step" not in body
    assert [r["result"] for r in body["results"]] == [
        "answer to start", f"answer to {second}", f"answer to {third}",
    ]
    assert [r["session_id"] for r in body["results"]] == [
        script.seen[p][0].session_id for p in ("start", second, third)
    ]


async def test_run_sessions_chain_stops_at_a_failing_middle_step(
    engine: Engine, script: Script, watch: Watch
) -> None:
    script.handlers["then answer to start"] = lambda request: RuntimeError("middle broke")
    parent = await new_parent(engine, watch)
    outs = await task(
        parent,
        script,
        [lambda outs: [run("chain", ("worker", "start"), ("worker", "then {previous}"),
                           ("worker", "never {previous}"))]],
    )
    body = value(outs[0])  # the run reports the failure; the call itself succeeded
    assert body["failed_step"] == 1
    assert body["error"] == "step 1 (worker) failed: middle broke"
    assert body["timed_out"] is False
    assert [r["status"] for r in body["results"]] == ["completed", "failed"]
    assert body["results"][1]["error"] == "middle broke"
    assert [p for p in script.seen if p.startswith("never")] == []  # never spawned
    assert len(parent.subsessions.children()) == 2


async def test_run_sessions_children_are_ordinary_children(
    engine: Engine, script: Script, watch: Watch, home: Path
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("stuck")
    running = asyncio.create_task(
        task(parent, script, [lambda o: [run("parallel", ("worker", "kept"), ("worker", "stuck"))]])
    )
    await script.started("stuck")
    kept, stuck = script.seen["kept"][0].session_id, script.seen["stuck"][0].session_id
    assert [info.session_id for info in parent.subsessions.children()] == [kept, stuck]
    assert await parent.subsessions.cancel_child(stuck) is True  # cancellable mid-run
    outs = await running

    results = value(outs[0])["results"]
    assert results[0] == {"session_id": kept, "session_type": "worker", **done("answer to kept")}
    assert results[1] == {"session_id": stuck, "session_type": "worker", "status": "cancelled",
                          "error": "cancelled"}
    await engine.close()
    notes = [e["message"] for e in rollout_of(home, parent.session_id).events("background_event")]
    for cid, ending in ((kept, "completed"), (stuck, "cancelled")):
        rollout = rollout_of(home, cid)
        assert rollout.parent_id == parent.session_id
        assert rollout.meta["session_type"] == "worker"
        assert notes.count(f"child session {cid} {ending}") == 1
        assert notes.count(f"spawned child session {cid} with model gpt-test") == 1


async def test_run_sessions_parallel_over_the_child_limit(
    engine: Engine, script: Script, watch: Watch
) -> None:
    config = SessionConfig(max_children=2, max_queued=0, custom_agents=(WORKER,))
    parent = await new_parent(engine, watch, config)
    outs = await task(
        parent,
        script,
        [lambda outs: [run("parallel", *(("worker", f"p{i}") for i in range(3)))]],
    )
    results = value(outs[0])["results"]
    assert [r["status"] for r in results] == ["completed", "completed", "failed"]
    assert [r.get("result") for r in results[:2]] == ["answer to p0", "answer to p1"]
    assert results[2] == {"status": "failed", "error": LIMIT_TEXT.format(n=2)}
    assert script.seen["p2"] == []
    assert len(parent.subsessions.children()) == 2


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"mode": "star", "tasks": [{"session_type": "worker", "prompt": "x"}], "timeout_ms": 0},
         "invalid arguments for run_sessions: mode"),
        ({"mode": "chain", "tasks": [], "timeout_ms": 0},
         "invalid arguments for run_sessions: tasks must not be empty"),
        ({"mode": "chain", "tasks": [{"session_type": "worker"}], "timeout_ms": 0},
         "invalid arguments for run_sessions: "),
        ({"mode": "parallel", "tasks": [{"session_type": "nope", "prompt": "x"}],
          "timeout_ms": 0}, "unknown session_type nope; expected one of: "),
    ],
    ids=["bad-mode", "no-tasks", "task-without-prompt", "unknown-type"],
)
async def test_run_sessions_refuses_bad_arguments_before_spawning(
    engine: Engine, script: Script, watch: Watch, arguments: dict[str, Any], expected: str
) -> None:
    parent = await new_parent(engine, watch)
    outs = await task(parent, script, [lambda outs: [call("run_sessions", arguments)]])
    assert failure(outs[0]).startswith(expected)
    assert parent.subsessions.children() == []


# -- completion notices -----------------------------------------------------------------
@pytest.mark.parametrize("how", ["done", "failed"])
@pytest.mark.parametrize("between", ["tasks", "model turns"])
async def test_a_child_that_ended_unwaited_is_announced_once_at_the_next_turn(
    engine: Engine, script: Script, watch: Watch, home: Path, how: str, between: str
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("job")
    ending: Any = ["job result"] if how == "done" else RuntimeError("job broke")
    expected_tail = (
        {"status": "completed", "result": "job result"}
        if how == "done"
        else {"status": "failed", "error": "job broke"}
    )

    async def end_the_job(outs: list[dict[str, Any]]) -> Any:
        script.answer("job", ending)
        await watch.ended(spawned(outs))
        return [call("list_profiles")]  # not a wait: the parent goes on with something else

    if between == "tasks":
        outs = await task(parent, script, [lambda outs: [create("worker", "job")]], "first")
        cid = spawned(outs)
        script.answer("job", ending)
        await watch.ended(cid)
        await task(parent, script, [], "second")
        announced = script.seen["second"][0]
        later = [script.seen["second"][-1]]
    else:
        await task(
            parent,
            script,
            [lambda o: [create("worker", "job")], end_the_job, lambda o: [call("list_profiles")]],
            "first",
        )
        cid = parent.subsessions.children()[0].session_id
        announced = script.seen["first"][2]
        later = script.seen["first"][3:]
    await task(parent, script, [], "third")
    later += script.seen["third"]

    assert notices(announced) == [{"session_id": cid, **expected_tail}]
    assert announced.items[-1]["role"] == "developer"  # given before this turn's model call
    for request in later:  # never announced again
        assert notices(request) == [{"session_id": cid, **expected_tail}]  # in the history only
    await engine.close()
    records = [i for i in rollout_of(home, parent.session_id).response_items()
               if i.get("role") == "developer"]
    assert len(records) == 1
    assert records[0]["content"][0]["text"].startswith(NOTICE_OPEN)


@pytest.mark.parametrize(
    ("tool", "ends"),
    [
        ("wait_session", "during the wait"),
        ("wait_session", "before the wait"),
        ("wait_sessions", "during the wait"),
        ("wait_sessions", "before the wait"),
        ("cancel_session", "by the cancel"),
    ],
)
async def test_no_notice_for_a_child_the_parent_waited_for(
    engine: Engine, script: Script, watch: Watch, tool: str, ends: str
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("job")

    async def wait_for_it(outs: list[dict[str, Any]]) -> Any:
        cid = spawned(outs)
        if tool == "cancel_session":
            return [call("cancel_session", session_id=cid)]
        if ends == "before the wait":  # ended unseen while the parent's model was thinking
            script.answer("job", ["job result"])
            await watch.ended(cid)
        else:
            script.answer_soon("job", ["job result"])
        return [wait(cid) if tool == "wait_session" else wait_many([cid], "all")]

    outs = await task(
        parent,
        script,
        [lambda outs: [create("worker", "job")], wait_for_it, lambda outs: [call("list_profiles")]],
        "first",
    )
    assert outs[1]["success"] is True
    await task(parent, script, [], "second")
    assert [notices(r) for r in [*script.seen["first"], *script.seen["second"]]] == [[]] * 5


async def test_two_children_ending_together_give_two_notices_once(
    engine: Engine, script: Script, watch: Watch
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("left", "right")
    outs = await task(
        parent, script, [lambda o: [create("worker", "left"), create("worker", "right")]], "first"
    )
    left, right = spawned(outs, 0), spawned(outs, 1)
    script.answer("left", ["left result"])
    script.answer("right", RuntimeError("right broke"))
    await watch.ended(left, right)

    await task(parent, script, [lambda outs: [call("list_profiles")]], "second")
    await task(parent, script, [], "third")
    expected = [
        {"session_id": left, "status": "completed", "result": "left result"},
        {"session_id": right, "status": "failed", "error": "right broke"},
    ]
    first_sight = script.seen["second"][0]
    assert sorted(notices(first_sight), key=lambda n: n["session_id"] != left) == expected
    assert [i["role"] for i in first_sight.items[-3:]] == ["user", "developer", "developer"]
    for request in [*script.seen["second"][1:], *script.seen["third"]]:
        assert len(notices(request)) == 2  # the same two, in the history; none added


async def test_notify_on_child_end_false_suppresses_notices(
    engine: Engine, script: Script, watch: Watch
) -> None:
    config = SessionConfig(custom_agents=(WORKER,), notify_on_child_end=False)
    parent = await new_parent(engine, watch, config)
    script.hold("job")
    outs = await task(parent, script, [lambda outs: [create("worker", "job")]], "first")
    cid = spawned(outs)
    script.answer("job", ["job result"])
    await watch.ended(cid)
    outs = await task(parent, script, [lambda outs: [wait(cid, 0)]], "second")
    assert value(outs[-1]) == {"result": "job result"}  # still there to be collected
    assert all(notices(r) == [] for r in [*script.seen["first"], *script.seen["second"]])
    assert all(i.get("role") != "developer" for i in script.seen["second"][-1].items)


# -- persona and memory -----------------------------------------------------------------
async def test_persona_and_memory_never_reach_a_child_or_a_tool_output(
    home: Path, script: Script, watch: Watch
) -> None:
    marker = uuid.uuid4().hex
    keeper = Profile(
        name="keeper",
        description="keeps secrets",
        developer_instructions="Keep things.",
        persona=f"PERSONA-{marker}",
        memory=f"MEMORY-{marker}",
    )

    def nested(next_prompt: str | None) -> Callable[[ModelRequest], Any]:
        def respond(request: ModelRequest) -> Any:
            done_so_far = outputs(request)
            if not done_so_far:
                first = [call("list_profiles"), create("nope", "x")]
                return first + ([create("keeper", next_prompt)] if next_prompt else [])
            if next_prompt and len(done_so_far) == 3:
                return [wait(spawned(done_so_far, 2))]
            return [f"finished with {len(done_so_far)} outputs"]

        return respond

    script.handlers["child task"] = nested("grandchild task")
    script.handlers["grandchild task"] = nested(None)
    config = SessionConfig(custom_agents=(keeper, WORKER), max_depth=3)
    async with Engine(home, model_client=script.model, model="gpt-test") as engine:
        parent = await new_parent(engine, watch, config)
        outs = await task(
            parent,
            script,
            [
                lambda outs: [call("list_profiles"), create("keeper", "child task")],
                lambda outs: [wait(spawned(outs, 1))],
                lambda outs: [run("parallel", ("keeper", "run one"), ("keeper", "run two"))],
                lambda outs: [run("chain", ("keeper", "chain one"), ("keeper", "then {previous}"))],
            ],
        )
        children = [s.session_id for s in parent.subsessions.tree()]
    assert len(children) == 6  # child, grandchild, two parallel, two chained

    listing = value(outs[0])
    assert all(set(entry) == {"name", "description", "tools"} for entry in listing)
    assert {"name": "keeper", "description": "keeps secrets", "tools": None} in listing
    child_requests = [r for r in script.model.requests if r.session_id in children]
    assert {r.session_id for r in child_requests} == set(children)
    for request in child_requests:
        assert request.instructions == "Keep things."
        seen = orjson.dumps([request.instructions, request.items, request.tools]).decode()
        assert marker not in seen
    tool_outputs = [o for r in script.model.requests for o in outputs(r)]
    assert len(tool_outputs) > 10
    assert all(marker not in o["output"] for o in tool_outputs)
    for cid in children:
        assert marker.encode() not in find_rollout(home, cid).read_bytes()


# -- depth ------------------------------------------------------------------------------
async def test_depth_three_runs_a_great_grandchild_and_stops_there(
    engine: Engine, script: Script, watch: Watch, home: Path
) -> None:
    def level(next_prompt: str) -> Callable[[ModelRequest], Any]:
        def respond(request: ModelRequest) -> Any:
            done_so_far = outputs(request)
            if not done_so_far:
                return [create("worker", next_prompt)]
            if len(done_so_far) == 1 and done_so_far[0]["success"]:
                return [wait(spawned(done_so_far))]
            last = done_so_far[-1]
            return [f"{prompt_of(request)} got {last['success']}: {last['output']}"]

        return respond

    for n in (1, 2, 3):
        script.handlers[f"level {n}"] = level(f"level {n + 1}")
    parent = await new_parent(engine, watch, SessionConfig(max_depth=3, custom_agents=(WORKER,)))
    outs = await task(
        parent,
        script,
        [lambda outs: [create("worker", "level 1")], lambda outs: [wait(spawned(outs))]],
    )
    result = value(outs[1])["result"]
    depth_error = DEPTH_TEXT.format(n=3)
    assert result.startswith("level 1 got True: ")
    assert f"level 3 got False: {depth_error}" in result  # the forced call at the limit
    assert script.seen["level 4"] == []

    for n in (1, 2):  # the child and the grandchild are offered every sub-session tool
        assert set(script.seen[f"level {n}"][0].tool_names) >= SUBSESSION_TOOLS
    great = script.seen["level 3"][0]
    assert SUBSESSION_TOOLS.isdisjoint(great.tool_names)  # at the limit: not offered
    spawn = rollout_of(home, great.session_id).meta["source"]["subagent"]["thread_spawn"]
    assert spawn["depth"] == 3


async def test_a_profile_cannot_raise_its_own_depth_limit(
    engine: Engine, script: Script, watch: Watch
) -> None:
    # a profile carries no limits at all: neither in code nor in a profile file
    with pytest.raises(TypeError):
        Profile(name="deep", max_depth=9)  # type: ignore[call-arg]
    with pytest.raises(ProfileError) as caught:
        parse_profile('name = "deep"\nmax_depth = 9\n', "deep.toml")
    assert "max_depth" in str(caught.value)

    # nor does a child's own config: the root's limit holds for the whole tree
    def forced(request: ModelRequest) -> Any:
        done_so_far = outputs(request)
        if not done_so_far:
            return [create("worker", "too deep")]
        return [done_so_far[0]["output"]]

    script.handlers["reach down"] = forced
    parent = await new_parent(engine, watch, SessionConfig(max_depth=1, custom_agents=(WORKER,)))
    greedy = SessionConfig(instructions="Go deeper.", max_depth=10, custom_agents=(WORKER,))
    cid = await parent.subsessions.spawn_child(greedy, "reach down")
    assert await parent.subsessions.wait_child(cid) == DEPTH_TEXT.format(n=1)
    assert SUBSESSION_TOOLS.isdisjoint(script.seen["reach down"][0].tool_names)
    assert script.seen["too deep"] == []


async def test_a_child_the_host_cancelled_is_announced_but_not_one_the_model_cancelled(
    engine: Engine, script: Script, watch: Watch
) -> None:
    parent = await new_parent(engine, watch)
    script.hold("by host", "by model")
    outs = await task(parent, script, [
        lambda outs: [create("worker", "by host"), create("worker", "by model")],
    ], "first")
    by_host, by_model = spawned(outs, 0), spawned(outs, 1)
    assert await parent.subsessions.cancel_child(by_host) is True
    outs = await task(parent, script, [lambda outs: [call("cancel_session", session_id=by_model)]],
                      "second")
    assert value(outs[-1]) == {"cancelled": True}
    await task(parent, script, [], "third")
    # the history of the last request holds every notice ever given, each once
    shown = notices(script.seen["third"][-1])
    assert shown == [{"session_id": by_host, "status": "cancelled", "error": "cancelled"}]
