"""Budgets per child and per tree (issue 15): limits reached stop the session at once, its
rollout ends `turn_aborted(budget_limited)`, its status is Failed with the exact text, its
descendants end the same way, and its last message stays readable."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from scripting import (
    PARENT_PROMPT,
    WORKER,
    Script,
    call,
    create,
    events,
    outputs,
    rollout_of,
    spawned,
    terminals,
    tokens,
    wait,
)
from scripting import script as script  # the fixture

from subsessions import (
    Budget,
    BudgetExhausted,
    ChildFailed,
    ChildStatus,
    Engine,
    InvalidArguments,
    ModelRequest,
    Profile,
    SessionConfig,
    Tool,
)
from subsessions._util.clock import clock
from subsessions.budget import parse_budget
from subsessions.config import derive_config
from subsessions.profiles import parse_profile

NOOP = Tool("noop", "Does nothing.", handler=lambda arguments, invocation: "ok")


def config(**kw: Any) -> SessionConfig:
    return SessionConfig(custom_agents=(WORKER,), tools=(NOOP,), **kw)


def limited(kind: str, limit: str) -> dict[str, Any]:
    return {"type": "turn_aborted", "reason": "budget_limited",
            "limit": {"kind": kind, "max": float(limit) if "." in limit else int(limit)},
            "message": f"budget exhausted: {kind} limit {limit} reached"}


async def warmed(engine: Engine, root_config: SessionConfig) -> Any:
    """A top-level session whose children's place is ready: on Ray a child's clock counts
    from its spawn, and starting the shards is not what these tests time."""
    root = await engine.create_session(root_config)
    await root.subsessions.wait_child(await root.subsessions.spawn_child("worker", "warm-up"))
    return root


def busy(spent: int, text: str = "working") -> Any:
    """A model that says `text`, calls a tool and reports `spent` tokens, every turn."""
    return lambda request: [text, call("noop"), tokens(spent)]


# -- the value --------------------------------------------------------------------------------
@pytest.mark.parametrize(("kw", "problem"), [
    ({"max_turns": 0}, "max_turns must be positive"),
    ({"max_tokens": -5}, "max_tokens must be positive"),
    ({"max_turns": 1.5}, "max_turns must be an integer"),
    ({"max_tokens": True}, "max_tokens must be an integer"),
    ({"max_seconds": float("nan")}, "max_seconds must be positive"),
    ({"max_seconds": "3"}, "max_seconds must be a number"),
])
def test_a_budget_refuses_a_malformed_limit(kw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Budget(**kw)


@pytest.mark.parametrize(("value", "problem"), [
    ([1], "budget must be an object or null"),
    ({"max_tokens": 0}, "budget.max_tokens must be positive"),
    ({"max_turns": 2.5}, "budget.max_turns must be an integer or null"),
    ({"max_seconds": "1"}, "budget.max_seconds must be a number or null"),
    ({"max_tokens": 10, "max_dollars": 1}, "budget has an unexpected property 'max_dollars'"),
    ({"max_seconds": float("inf")}, "budget.max_seconds must be positive"),
])
def test_a_callers_budget_is_checked_with_one_clear_text(value: Any, problem: str) -> None:
    with pytest.raises(InvalidArguments) as raised:
        parse_budget(value, "create_session")
    assert str(raised.value).startswith(f"invalid arguments for create_session: {problem}")


def test_budgets_meet_at_the_tighter_limit_of_each_kind() -> None:
    assert parse_budget({"max_turns": 3.0, "max_tokens": None}, "x") == Budget(max_turns=3)
    assert parse_budget(None, "x") is None
    mine = Budget(max_turns=5, max_tokens=1000)
    assert mine.clamp(Budget(max_tokens=200, max_seconds=2.5)) == Budget(
        max_turns=5, max_tokens=200, max_seconds=2.5)
    assert mine.clamp(None) == mine


def test_a_profile_carries_a_budget_table() -> None:
    profile = parse_profile('name = "capped"\n[budget]\nmax_tokens = 500\nmax_seconds = 30\n',
                            "capped.toml")
    assert profile.budget == Budget(max_tokens=500, max_seconds=30.0)
    assert derive_config(SessionConfig(), profile, model="m").budget == profile.budget
    with pytest.raises(Exception, match=r"capped.toml.*budget.max_turns must be positive"):
        parse_profile('name = "capped"\n[budget]\nmax_turns = -1\n', "capped.toml")
    with pytest.raises(Exception, match=r"budget must be a table"):
        parse_profile('name = "capped"\nbudget = 3\n', "capped.toml")


# -- one child's limits -----------------------------------------------------------------------
async def test_a_child_that_spends_its_tokens_stops_before_its_next_tool_call(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["job"] = busy(60)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(config())
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "job", budget=Budget(max_tokens=100))
        with pytest.raises(ChildFailed) as failed:
            await manager.wait_child(cid)
        assert str(failed.value) == (
            f"session {cid} failed: budget exhausted: tokens limit 100 reached")
        info = manager.info(cid)
        assert info.status is ChildStatus.FAILED
        assert info.error == "budget exhausted: tokens limit 100 reached"
        assert info.result == info.last_message == "working"  # still readable
        assert (info.usage.total_tokens, info.usage.turns, info.usage.tool_calls) == (120, 2, 1)
        assert info.budget == Budget(max_tokens=100)
    assert terminals(rollout_of(home, cid)) == [limited("tokens", "100")]
    background = [e["message"] for e in events(rollout_of(home, parent.session_id))
                  if e["type"] == "background_event"]
    assert f"child session {cid} failed: budget exhausted: tokens limit 100 reached" in background


async def test_a_child_out_of_turns_stops_but_one_that_answers_on_its_last_turn_completes(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["loops"] = busy(1)
    script.handlers["answers"] = lambda r: (
        ["done"] if len(script.seen["answers"]) == 2 else [call("noop")])
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(config())
        manager = parent.subsessions
        loops = await manager.spawn_child("worker", "loops", budget=Budget(max_turns=2))
        answers = await manager.spawn_child("worker", "answers", budget=Budget(max_turns=2))
        with pytest.raises(ChildFailed, match="budget exhausted: turns limit 2 reached"):
            await manager.wait_child(loops)
        assert await manager.wait_child(answers) == "done"
        assert manager.info(loops).usage.tool_calls == 1  # the second turn's call never ran
    assert terminals(rollout_of(home, loops)) == [limited("turns", "2")]


async def test_the_clock_cancels_a_child_in_the_middle_of_its_model_call(
    home: Path, script: Script, backend: Any
) -> None:
    script.hold("slow")
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await warmed(engine, config())
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "slow", budget=Budget(max_seconds=0.2))
        with pytest.raises(ChildFailed, match=r"seconds limit 0\.2 reached"):
            await manager.wait_child(cid, timeout=10)
        assert script.cancelled == ["slow"]  # the in-flight call was cancelled
        assert 0.2 <= manager.info(cid).listing()["seconds"] < 5
    assert terminals(rollout_of(home, cid)) == [limited("seconds", "0.2")]


async def test_a_child_stopped_by_its_budget_ends_its_own_children_the_same_way(
    home: Path, script: Script
) -> None:
    script.hold("minion")

    async def spend(outs: Any) -> Any:
        await script.started("minion")  # its model call is in flight
        return ["boss is thinking", call("noop"), tokens(500)]

    script.play("boss", [lambda outs: [create("worker", "minion"), tokens(10)], spend])
    async with Engine(home, model_client=script.model) as engine:
        manager, boss, minion = await boss_spent(engine, script)
        info = manager.info(boss)
        assert info.result == "boss is thinking"
        assert "minion" in script.cancelled
        assert boss_children(manager, boss) == {minion: ChildStatus.FAILED}
    assert terminals(rollout_of(home, boss)) == [limited("tokens", "100")]
    assert terminals(rollout_of(home, minion)) == [limited("tokens", "100")]


async def boss_spent(engine: Engine, script: Script) -> tuple[Any, str, str]:
    """A `boss` child with 100 tokens, run until its budget stopped it; its minion's id."""
    manager = (await engine.create_session(config())).subsessions
    boss = await manager.spawn_child("worker", "boss", budget=Budget(max_tokens=100))
    with pytest.raises(ChildFailed, match="tokens limit 100 reached"):
        await manager.wait_child(boss)
    return manager, boss, spawned(outputs(script.seen["boss"][1]))


def boss_children(manager: Any, boss: str) -> dict[str, ChildStatus]:
    child = next(s for s in manager.tree() if s.session_id == boss)
    return {i.session_id: i.status for i in child.subsessions.children()}


async def test_a_grandchilds_tokens_count_against_its_parent_and_stop_both(
    home: Path, script: Script
) -> None:
    script.handlers["minion"] = busy(80, "minion working")
    script.play("boss", [
        lambda outs: [create("worker", "minion"), tokens(10)],
        lambda outs: [wait(spawned(outs)), tokens(10)],
    ])
    async with Engine(home, model_client=script.model) as engine:
        manager, boss, minion = await boss_spent(engine, script)
        grand = next(s for s in manager.tree() if s.session_id == minion)
        assert grand.budget == Budget(max_tokens=90)  # clamped to what its parent had left
        assert grand.last_message == "minion working"
    # the minion's second turn (170 of the boss's 100) reached the boss's limit: both stop
    assert terminals(rollout_of(home, boss)) == [limited("tokens", "100")]
    assert terminals(rollout_of(home, minion)) == [limited("tokens", "100")]


async def test_a_childs_turns_are_clamped_to_what_its_parent_has_left(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["minion"] = busy(1)
    script.play("boss", [
        lambda outs: [create("worker", "minion", budget={"max_turns": 10})],
        lambda outs: [wait(spawned(outs))],
        lambda outs: ["boss done"],
    ])
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(config())
        manager = parent.subsessions
        boss = await manager.spawn_child("worker", "boss", budget=Budget(max_turns=3))
        assert await manager.wait_child(boss) == "boss done"
        minion = spawned(outputs(script.seen["boss"][1]))
        wait_output = outputs(script.seen["boss"][2])[-1]
        assert wait_output["output"] == (
            f"session {minion} failed: budget exhausted: turns limit 2 reached")
    assert terminals(rollout_of(home, minion)) == [limited("turns", "2")]


# -- the edges: a limit is reached at exactly its value -----------------------------------------
class StillClock:
    """The seconds budgets count in, standing still until a test moves them."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def still(monkeypatch: pytest.MonkeyPatch) -> StillClock:
    """Put `clock.monotonic` (what meters and their alarms read) at 1000.0 until moved."""
    standing = StillClock(1000.0)
    monkeypatch.setattr(clock, "monotonic", standing)
    return standing


async def test_a_child_that_spends_exactly_its_tokens_stops_and_one_token_less_carries_on(
    home: Path, script: Script
) -> None:
    script.play("exact", [lambda outs: ["working", call("noop"), tokens(60, 40)]])
    script.play("under", [lambda outs: ["working", call("noop"), tokens(60, 39)],
                          lambda outs: ["done", tokens(0)]])
    async with Engine(home, model_client=script.model) as engine:
        manager = (await engine.create_session(config())).subsessions
        exact = await manager.spawn_child("worker", "exact", budget=Budget(max_tokens=100))
        under = await manager.spawn_child("worker", "under", budget=Budget(max_tokens=100))
        with pytest.raises(ChildFailed, match="budget exhausted: tokens limit 100 reached"):
            await manager.wait_child(exact)
        assert await manager.wait_child(under) == "done"
        spent = manager.info(exact).usage
        assert (spent.total_tokens, spent.turns, spent.tool_calls) == (100, 1, 0)
        spent = manager.info(under).usage
        assert (spent.total_tokens, spent.turns, spent.tool_calls) == (99, 2, 1)
    assert terminals(rollout_of(home, exact)) == [limited("tokens", "100")]
    assert terminals(rollout_of(home, under))[0]["type"] == "task_complete"


async def test_a_child_that_makes_exactly_its_turns_stops_and_one_turn_less_carries_on(
    home: Path, script: Script
) -> None:
    """Both want another call after their second: the one allowed two turns is stopped
    there, the one allowed three makes its third."""
    steps = [lambda outs: [call("noop"), tokens(1)], lambda outs: [call("noop"), tokens(1)],
             lambda outs: ["done", tokens(1)]]
    script.play("exact", steps)
    script.play("under", steps)
    async with Engine(home, model_client=script.model) as engine:
        manager = (await engine.create_session(config())).subsessions
        exact = await manager.spawn_child("worker", "exact", budget=Budget(max_turns=2))
        under = await manager.spawn_child("worker", "under", budget=Budget(max_turns=3))
        with pytest.raises(ChildFailed, match="budget exhausted: turns limit 2 reached"):
            await manager.wait_child(exact)
        assert await manager.wait_child(under) == "done"
        assert (len(script.seen["exact"]), manager.info(exact).usage.tool_calls) == (2, 1)
        assert (len(script.seen["under"]), manager.info(under).usage.tool_calls) == (3, 2)
    assert terminals(rollout_of(home, exact)) == [limited("turns", "2")]


async def test_a_task_at_exactly_its_seconds_limit_is_refused_and_a_moment_before_it_runs(
    home: Path, script: Script, still: StillClock
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(config(budget=Budget(max_seconds=0.5)))
        still.now = math.nextafter(1000.5, 0)  # the last moment before its limit
        assert await root.send_and_wait("before") == "answer to before"
        still.now = 1000.5
        with pytest.raises(BudgetExhausted, match=r"budget exhausted: seconds limit 0\.5 reached"):
            await root.send_and_wait("at")
        assert "at" not in script.seen  # refused before its model call
    assert terminals(rollout_of(home, root.session_id))[-1] == limited("seconds", "0.5")


async def test_a_childs_clock_rings_at_exactly_its_limit(
    home: Path, script: Script, still: StillClock
) -> None:
    script.hold("slow")
    async with Engine(home, model_client=script.model) as engine:
        manager = (await engine.create_session(config())).subsessions
        cid = await manager.spawn_child("worker", "slow", budget=Budget(max_seconds=0.01))
        await script.started("slow")
        still.now = 1000.0 + 0.01  # its alarm's deadline, to the last bit
        with pytest.raises(ChildFailed, match=r"seconds limit 0\.01 reached"):
            await manager.wait_child(cid, timeout=5)
        assert script.cancelled == ["slow"]
    assert terminals(rollout_of(home, cid)) == [limited("seconds", "0.01")]


# -- the tree's budget ------------------------------------------------------------------------
async def test_when_the_trees_budget_is_spent_every_session_of_it_ends_budget_limited(
    home: Path, script: Script, backend: Any
) -> None:
    script.hold("a")
    script.handlers["b"] = busy(600)
    script.play(PARENT_PROMPT, [
        lambda outs: [create("worker", "a"), create("worker", "b"), tokens(50)],
        lambda outs: [call("wait_sessions", session_ids=[spawned(outs, 0), spawned(outs, 1)],
                           mode="all", timeout_ms=60_000), tokens(50)],
    ])
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(config(budget=Budget(max_tokens=500)))
        with pytest.raises(BudgetExhausted) as raised:
            await root.send_and_wait(PARENT_PROMPT)
        assert str(raised.value) == "budget exhausted: tokens limit 500 reached"
        a, b = (c.session_id for c in root.subsessions.children())
        assert {c.status for c in root.subsessions.children()} == {ChildStatus.FAILED}
        assert root.subsessions.info(a).budget == Budget(max_tokens=450)
        assert "a" in script.cancelled
        # the next task of a spent tree ends at once, the same way
        with pytest.raises(BudgetExhausted, match="tokens limit 500 reached"):
            await root.send_and_wait("more")
    for session_id in (root.session_id, a, b):
        assert terminals(rollout_of(home, session_id))[-1] == limited("tokens", "500")


async def test_children_never_make_a_model_call_past_the_trees_turn_limit(
    home: Path, script: Script, backend: Any
) -> None:
    """Two children working at once (on two shards on Ray) share the tree's three turns:
    no call is made past them, and every session ends on the tree's limit.

    In process the third granted call reaches the model before the fourth is refused. On
    Ray a turn granted to one shard may still be on its way when another shard's refused
    turn stops the tree, so that call is cancelled before it is sent: two or three calls."""
    script.handlers["a"] = script.handlers["b"] = busy(1)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(config(budget=Budget(max_turns=3)))
        kids = [await root.subsessions.spawn_child("worker", p) for p in ("a", "b")]
        for cid in kids:
            with pytest.raises(ChildFailed, match="budget exhausted: turns limit 3 reached"):
                await root.subsessions.wait_child(cid, timeout=60)
        calls = len(script.seen["a"]) + len(script.seen["b"])
        assert calls == 3 if backend is None else 2 <= calls <= 3
        assert root.meter.turns == 3
    for cid in kids:
        assert terminals(rollout_of(home, cid)) == [limited("turns", "3")]


async def test_the_trees_clock_ends_children_of_an_idle_root(
    home: Path, script: Script, backend: Any
) -> None:
    script.hold("forever")
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(config(budget=Budget(max_seconds=0.3)))
        cid = await root.subsessions.spawn_child("worker", "forever")
        with pytest.raises(ChildFailed, match=r"seconds limit 0\.3 reached"):
            await root.subsessions.wait_child(cid, timeout=10)
    assert terminals(rollout_of(home, cid)) == [limited("seconds", "0.3")]


async def test_a_root_without_a_budget_gives_children_only_their_own(
    home: Path, script: Script, backend: Any
) -> None:
    capped = Profile(name="capped", budget=Budget(max_tokens=70))
    script.handlers["job"] = busy(40)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(capped,), tools=(NOOP,)))
        assert root.budget is None
        cid = await root.subsessions.spawn_child("capped", "job", budget=Budget(max_tokens=500))
        assert root.subsessions.info(cid).budget == Budget(max_tokens=70)  # the profile caps
        with pytest.raises(ChildFailed, match="tokens limit 70 reached"):
            await root.subsessions.wait_child(cid)


async def test_spawn_child_refuses_a_budget_that_is_not_one(home: Path, script: Script) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(config())
        with pytest.raises(InvalidArguments, match="budget must be a Budget or None"):
            await root.subsessions.spawn_child("worker", "x", budget={"max_turns": 1})  # type: ignore[arg-type]
        assert root.subsessions.children() == []


# -- a budget and a cancel racing ---------------------------------------------------------------
@pytest.mark.parametrize("delay", range(8))
async def test_a_budget_and_a_cancel_racing_give_exactly_one_ending(
    home: Path, script: Script, delay: int, backend: Any
) -> None:
    """The model calls that spend the budget return while the parent cancels, the cancel
    coming `delay` loop steps after the calls were let go: whichever comes first is the one
    ending, and the rollout and the status agree (both orders happen over the delays)."""
    gate = asyncio.Event()

    async def spender(request: ModelRequest) -> Any:
        await gate.wait()
        return ["spent", call("noop"), tokens(1000)]

    for n in range(4):
        script.handlers[f"job {n}"] = spender
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(config())
        manager = root.subsessions
        ids = [await manager.spawn_child("worker", f"job {n}", budget=Budget(max_tokens=10))
               for n in range(4)]
        await script.started(*(f"job {n}" for n in range(4)))

        async def cancel_later(cid: str) -> bool:
            for _ in range(delay):
                await asyncio.sleep(0)
            return await manager.cancel_child(cid)

        async def release() -> None:
            for _ in range(3):
                await asyncio.sleep(0)
            gate.set()

        *cancelled, _ = await asyncio.gather(*(cancel_later(cid) for cid in ids), release())
        for cid, was_cancelled in zip(ids, cancelled, strict=True):
            status = manager.status(cid)
            ending = terminals(rollout_of(home, cid))
            assert len(ending) == 1, ending
            if was_cancelled:
                assert status is ChildStatus.CANCELLED
                assert ending[0]["reason"] == "cancelled"
            else:
                assert status is ChildStatus.FAILED
                assert ending == [limited("tokens", "10")]


# -- the tree's clock ---------------------------------------------------------------------------
async def test_many_clocks_ring_in_order_on_one_timer_and_leave_nothing_set(
    home: Path, script: Script
) -> None:
    """Children with different limits on seconds: the held ones end at their own limit, the
    quick ones end first and take their alarm with them; no alarm outlives its child."""
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(config(max_children=200))
        manager = root.subsessions
        held = {}
        for n in range(6):
            script.hold(f"held {n}")
            seconds = 0.1 + 0.05 * (5 - n)  # later ones ring first
            held[await manager.spawn_child("worker", f"held {n}",
                                           budget=Budget(max_seconds=seconds))] = seconds
        quick = [await manager.spawn_child("worker", f"quick {n}",
                                           budget=Budget(max_seconds=60)) for n in range(150)]
        for cid in quick:
            assert await manager.wait_child(cid) == f"answer to quick {quick.index(cid)}"
        for cid, seconds in held.items():
            with pytest.raises(ChildFailed, match=f"seconds limit {seconds:g} reached"):
                await manager.wait_child(cid, timeout=10)
        assert in_order_of_ending(root, held) == sorted(held, key=held.__getitem__)
        assert len(root.tree.alarms) == 0


def in_order_of_ending(root: Any, ids: dict[str, float]) -> list[str]:
    infos = [root.subsessions.info(cid) for cid in ids]
    return [i.session_id for i in sorted(infos, key=lambda i: i.ended_at)]


def test_a_profile_run_top_level_gives_its_budget_to_the_tree() -> None:

    capped = Profile(name="capped", budget=Budget(max_turns=3))
    assert derive_config(SessionConfig(), capped).budget == Budget(max_turns=3)
    mine = Budget(max_tokens=10)
    assert derive_config(SessionConfig(budget=mine), capped).budget == mine
    child = derive_config(SessionConfig(budget=mine), capped, model="m", cwd="/")
    assert child.budget == Budget(max_turns=3)  # a child's own: clamped at spawn


async def test_the_clock_cancels_a_tool_in_flight(
    home: Path, script: Script, backend: Any
) -> None:
    running = asyncio.Event()
    cancelled: list[str] = []

    async def slow(arguments: dict[str, Any], invocation: Any) -> str:
        running.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(invocation.session_id)
            raise
        return "never"

    script.handlers["job"] = lambda r: ["calling the slow tool", call("slow")]
    tools = (Tool("slow", "Takes an hour.", handler=slow),)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await warmed(engine, SessionConfig(custom_agents=(WORKER,), tools=tools))
        cid = await root.subsessions.spawn_child("worker", "job",
                                                 budget=Budget(max_seconds=0.3))
        await asyncio.wait_for(running.wait(), 10)
        with pytest.raises(ChildFailed, match=r"seconds limit 0\.3 reached"):
            await root.subsessions.wait_child(cid, timeout=10)
        assert cancelled == [cid]
        assert root.subsessions.info(cid).result == "calling the slow tool"


async def test_a_spent_tree_refuses_the_roots_first_task_without_a_model_call(
    home: Path, script: Script, backend: Any
) -> None:
    script.handlers["spender"] = busy(100)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        root = await engine.create_session(config(budget=Budget(max_tokens=50)))
        cid = await root.subsessions.spawn_child("worker", "spender")
        with pytest.raises(ChildFailed, match="tokens limit 50 reached"):
            await root.subsessions.wait_child(cid)
        with pytest.raises(BudgetExhausted, match="tokens limit 50 reached"):
            await root.send_and_wait("first task")
        assert "first task" not in script.seen
