"""Grouped dispatch on Ray (DESIGN 3.8, 3.11): children placed on a shard together travel in
one actor call; each ending comes back over the shard's channel; a cancel, a message or a
lost shard still reaches each child of a group on its own.

The first tests run the `Launcher` against a stand-in actor whose calls the test answers;
the others run on the shared cluster (conftest `ray_cluster`, two shards on two nodes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray_support import engine, script
from scripting import WORKER, Script, rollout_of, terminals

from subsessions import (
    ChildFailed,
    ChildStatus,
    Engine,
    RayBackend,
    ScriptedModel,
    SessionConfig,
)
from subsessions.errors import WorkerLost
from subsessions.models.base import NO_USAGE
from subsessions.ray.groups import Launch, Launcher, Unsent
from subsessions.ray.placement import ShardRef
from subsessions.ray.replies import Replies
from subsessions.ray.wire import Ended, Outcome
from subsessions.rollouts.reader import read_rollout

pytest.importorskip("ray", reason="pip install 'subsessions[ray]'")

__all__ = ["engine", "script"]


class FakeActor:
    """`run_children.remote(specs)`: each call recorded, answered when the test says."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], asyncio.Future[None]]] = []
        self.run_children = SimpleNamespace(remote=self._call)
        self.refuse: str | None = None  # a spec id that "cannot be sent"

    def _call(self, specs: list[Any]) -> asyncio.Future[None]:
        ids = [s.session_id for s in specs]
        if self.refuse in ids:
            raise TypeError(f"cannot pickle {self.refuse}")
        reply = asyncio.get_running_loop().create_future()
        self.calls.append((ids, reply))
        return reply


def _launch(session_id: str) -> Launch:
    return Launch.of(SimpleNamespace(session_id=session_id))  # type: ignore[arg-type]


def _done(session_id: str) -> Ended:
    return Ended(session_id, Outcome("done", f"result {session_id}", None, NO_USAGE, 1, 0,
                                     None))


async def _until(condition: Any) -> None:
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0)


@pytest.fixture
async def launcher() -> AsyncIterator[tuple[Launcher, FakeActor]]:
    actor = FakeActor()
    lost: list[str] = []
    launcher = Launcher(actor, lambda exc: lost.append(str(exc)) or "gone")
    launcher.start("test-groups")
    try:
        yield launcher, actor
    finally:
        await launcher.aclose()


async def test_children_added_while_a_group_travels_go_together_in_the_next(
    launcher: tuple[Launcher, FakeActor]
) -> None:
    groups, actor = launcher
    first = _launch("a")
    groups.add(first)
    await asyncio.wait_for(_until(lambda: len(actor.calls) == 1), 5)
    rest = [_launch(f"b{n}") for n in range(5)]
    for launch in rest:
        groups.add(launch)
    await asyncio.sleep(0)  # nothing goes while the first group is on its way
    assert [ids for ids, _ in actor.calls] == [["a"]]
    actor.calls[0][1].set_result(None)  # the shard has the first group
    await asyncio.wait_for(_until(lambda: len(actor.calls) == 2), 5)
    assert actor.calls[1][0] == [f"b{n}" for n in range(5)]
    assert await first.reached is True
    groups.ended(_done("b3"))  # endings come back one by one, in any order
    assert (await rest[3].ending).result == "result b3"  # type: ignore[union-attr]
    assert not rest[2].ending.done() and groups.calls == 2


async def test_a_lost_shard_ends_each_child_sent_there_as_lost_once_and_frees_the_rest(
    launcher: tuple[Launcher, FakeActor]
) -> None:
    groups, actor = launcher
    sent = [_launch(f"s{n}") for n in range(3)]
    for launch in sent:
        groups.add(launch)
    await asyncio.wait_for(_until(lambda: len(actor.calls) == 1), 5)
    waiting = _launch("w")
    groups.add(waiting)  # its group gathers while the first one travels
    groups.fail_all("shard 0 on node abc: died")
    groups.fail_all("a second time")  # once: the first reason stays
    for launch in sent:
        ending = await launch.ending
        assert isinstance(ending, WorkerLost) and str(ending) == (
            "worker lost: shard 0 on node abc: died")
    unsent = await waiting.ending  # it never ran there: free to go to another shard
    assert isinstance(unsent, Unsent) and str(unsent) == "shard 0 on node abc: died"
    assert await waiting.reached is False
    late = _launch("late")
    groups.add(late)  # placed there just before it was lost
    assert isinstance(await late.ending, Unsent)
    assert [ids for ids, _ in actor.calls] == [["s0", "s1", "s2"]]  # nothing more was sent


async def test_a_child_that_cannot_be_sent_fails_alone_and_its_group_goes_on(
    launcher: tuple[Launcher, FakeActor]
) -> None:
    groups, actor = launcher
    actor.refuse = "bad"
    group = [_launch(n) for n in ("x", "bad", "y")]
    for launch in group:
        groups.add(launch)
    await asyncio.wait_for(_until(lambda: len(actor.calls) >= 1), 5)
    for _, reply in actor.calls:
        reply.set_result(None)
    await asyncio.wait_for(_until(lambda: len(actor.calls) == 2), 5)
    actor.calls[1][1].set_result(None)
    assert [ids for ids, _ in actor.calls] == [["x"], ["y"]]
    ending = await group[1].ending
    assert isinstance(ending, TypeError) and "cannot pickle bad" in str(ending)
    assert [await g.reached for g in group] == [True, False, True]


async def test_a_stop_or_a_message_never_overtakes_its_child_on_the_way_to_its_shard() -> None:
    """Both wait until the child's group has reached the shard: sent before it, they would
    find no child there (and be lost)."""
    from subsessions.ray.backend import _send

    told: list[tuple[str, ...]] = []

    async def send(session_id: str, message: str) -> bool:
        told.append(("send", session_id, message))
        return True

    actor = SimpleNamespace(stop=SimpleNamespace(remote=lambda *a: told.append(("stop", *a))),
                            send=SimpleNamespace(remote=send))
    shard: Any = SimpleNamespace(actor=actor)
    child: Any = SimpleNamespace(budget_stop=None)
    launch = _launch("c")
    loop = asyncio.get_running_loop()
    message = loop.create_task(_send(shard, launch, "hello"))
    stopping = loop.create_task(RayBackend._stopped(shard, launch, child))
    for _ in range(5):
        await asyncio.sleep(0)
    assert told == []
    launch.reached.set_result(True)
    assert await message is True
    await asyncio.wait_for(_until(lambda: len(told) == 2), 5)
    assert sorted(told) == [("send", "c", "hello"), ("stop", "c", None)]
    launch.end(Outcome("cancelled", None, None, NO_USAGE, 0, 0, None))
    with pytest.raises(asyncio.CancelledError):
        await stopping
    lost = _launch("l")  # it never reached its shard: nothing is sent, it ends as lost
    lost.end(WorkerLost("shard 1 on node x"))
    assert await _send(shard, lost, "late") is False
    assert isinstance(await RayBackend._stopped(shard, lost, child), WorkerLost)
    assert len(told) == 2


class _Pool:
    """`place()` as the backend asks it: the one live shard left."""

    def __init__(self, shard: ShardRef) -> None:
        self.shard = shard
        self.placed = 0

    async def place(self, before: int | None = None) -> ShardRef:
        self.placed += 1
        return self.shard


async def _moving(home: Path, stop_first: bool) -> tuple[Any, ...]:
    """A child waiting to be sent to shard 0 when shard 0 is lost (its launcher busy with an
    earlier group): what `RayBackend._sent` makes of it, and what each shard received."""
    from subsessions._core.conversation import settle_itself
    from subsessions._core.kit import Kit
    from subsessions.ids import new_session_id
    from subsessions.ray.backend import RayBackend

    async with Engine(home, model_client=ScriptedModel([]), profiles={}) as engine:
        parent = await engine.create_session()
        kit = Kit.of(SessionConfig(model="m"), WORKER, None, parent.tree, 1)
        child = parent.new_child(new_session_id(), kit, "call_1", None, settle_itself, None)
        child.claim()
        actors = [FakeActor(), FakeActor()]
        shards = [ShardRef(n, a, Launcher(a, lambda exc: "lost"), Replies(a))
                  for n, a in enumerate(actors)]
        for shard in shards:
            shard.launcher.start(f"test-groups-{shard.index}")
        try:
            shards[0].launcher.add(_launch("earlier"))  # a group on its way: the next waits
            await asyncio.wait_for(_until(lambda: len(actors[0].calls) == 1), 5)
            pool = _Pool(shards[1])
            backend = RayBackend()
            spec: Any = SimpleNamespace(session_id=child.session_id)
            sent = asyncio.get_running_loop().create_task(
                backend._sent(pool, shards[0], spec, child, "go", True))  # type: ignore[arg-type]
            await asyncio.wait_for(_until(lambda: shards[0].load == 1), 5)  # queued there
            if stop_first:
                child.request_stop()  # cancelled on its way: it ends here
            shards[0].launcher.fail_all("shard 0 on node abc: died")
            if not stop_first:
                await asyncio.wait_for(_until(lambda: len(actors[1].calls) == 1), 5)
                actors[1].calls[0][1].set_result(None)
                shards[1].launcher.ended(_done(child.session_id))
            ending: Any = await asyncio.wait_for(asyncio.gather(sent, return_exceptions=True), 10)
            calls = [[ids for ids, _ in a.calls] for a in actors]
            await child.flush_durable()
            return ending[0], calls, pool.placed, child.rollout_path, child.session_id
        finally:
            for shard in shards:
                await shard.launcher.aclose()


async def test_a_child_waiting_for_a_lost_shard_goes_to_a_live_one(home: Path) -> None:
    outcome, calls, placed, _, child_id = await _moving(home, stop_first=False)
    assert isinstance(outcome, Outcome) and outcome.result == f"result {child_id}"
    assert calls == [[["earlier"]], [[child_id]]] and placed == 1  # never sent to shard 0


async def test_a_child_stopped_while_waiting_for_a_lost_shard_ends_here(home: Path) -> None:
    ended, calls, placed, path, _ = await _moving(home, stop_first=True)
    assert isinstance(ended, asyncio.CancelledError)
    assert calls == [[["earlier"]], []] and placed == 0  # sent nowhere
    assert terminals(read_rollout(path)) == [{"type": "turn_aborted", "reason": "cancelled"}]


async def test_answers_given_in_one_turn_go_to_their_shard_in_one_call() -> None:
    """A turn grant or an admission per model call or spawn: one call per loop turn, not
    one per answer; a value that cannot be sent fails its own request only."""
    import pickle

    from subsessions.ray.replies import Replies

    calls: list[Any] = []

    def answers(batch: list[Any]) -> None:
        pickle.dumps(batch)  # as Ray would, before anything is sent
        calls.append(batch)

    def answer(*one: Any) -> None:
        pickle.dumps(one)
        calls.append(one)

    replies = Replies(SimpleNamespace(answers=SimpleNamespace(remote=answers),
                                      answer=SimpleNamespace(remote=answer)))
    for n in range(5):
        replies.put(n, True, n)
    await asyncio.sleep(0)
    assert calls == [[(n, True, n) for n in range(5)]]
    calls.clear()
    replies.put(7, True, "fine")
    replies.put(8, True, lambda: None, "tool odd")  # cannot be pickled
    await asyncio.sleep(0)
    assert calls[0] == (7, True, "fine")
    assert calls[1][:2] == (8, False) and calls[1][2].startswith(
        "tool odd answered with a value that cannot be sent: ")


# -- on the cluster (two shards: ray_support's `engine`) ----------------------------------
async def _spawn_held(engine: Engine, script: Script, prompts: list[str]) -> tuple[Any, list[str]]:
    """A parent and its children spawned in one go, each held in its model call."""
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    script.hold(*prompts)
    ids = await asyncio.gather(*(parent.subsessions.spawn_child("worker", p) for p in prompts))
    await script.started(*prompts)
    return parent.subsessions, list(ids)


async def _groups(engine: Engine) -> list[tuple[int, int]]:
    """(groups, children) each shard has received."""
    backend = engine.runtime.backend
    assert isinstance(backend, RayBackend) and backend.pool is not None
    return [await s.actor.groups.remote() for s in backend.pool.shards]


async def test_children_spawned_together_reach_each_shard_in_few_calls(
    engine: Engine, script: Script
) -> None:
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                       max_children=64))
    manager = parent.subsessions
    await manager.wait_child(await manager.spawn_child("worker", "warm"))  # shards started
    before = await _groups(engine)
    ids = await asyncio.gather(*(manager.spawn_child("worker", f"item {n}")
                                 for n in range(40)))
    done = await manager.wait_all(list(ids), timeout=60)
    assert [done.children[c].result for c in ids] == [f"answer to item {n}" for n in range(40)]
    after = await _groups(engine)
    children = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    calls = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
    assert children == [20, 20]  # least-loaded placement splits the burst
    assert sum(calls) <= 8, calls  # not one call per child


async def test_a_batch_on_ray_reaches_its_shards_in_fewer_calls_than_items(
    engine: Engine, tmp_path: Path
) -> None:
    (tmp_path / "in.csv").write_text("name\n" + "".join(f"i{n}\n" for n in range(30)))
    parent = await engine.create_session(SessionConfig(
        custom_agents=(WORKER,), cwd=str(tmp_path), max_children=32))
    result = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}",
                                                "out.jsonl", max_concurrency=30)
    assert (result.completed, result.failed) == (30, 0)
    groups = await _groups(engine)
    assert sum(g[1] for g in groups) == 30 and sum(g[0] for g in groups) < 15, groups


async def test_cancelling_one_child_of_a_group_leaves_its_siblings_to_finish(
    engine: Engine, script: Script
) -> None:
    prompts = [f"held {n}" for n in range(6)]
    manager, ids = await _spawn_held(engine, script, prompts)
    assert sum(g[0] for g in await _groups(engine)) < 6  # they travelled together
    assert await asyncio.wait_for(manager.cancel_child(ids[2]), 30) is True
    assert manager.status(ids[2]) is ChildStatus.CANCELLED
    assert script.cancelled == ["held 2"]
    assert [manager.status(c) for c in ids].count(ChildStatus.PENDING) == 5
    for n, prompt in enumerate(prompts):
        if n != 2:
            script.answer(prompt, [f"done {n}"])
    assert [await manager.wait_child(c, timeout=60) for n, c in enumerate(ids) if n != 2] == [
        f"done {n}" for n in range(6) if n != 2]
    assert terminals(rollout_of(engine.runtime.home, ids[2])) == [
        {"type": "turn_aborted", "reason": "cancelled"}]


async def test_a_shard_lost_mid_group_fails_every_child_of_the_group(
    engine: Engine, script: Script
) -> None:
    import ray

    prompts = [f"doomed {n}" for n in range(6)]
    manager, ids = await _spawn_held(engine, script, prompts)
    backend = engine.runtime.backend
    assert isinstance(backend, RayBackend) and backend.pool is not None
    shard = backend.pool.shards[0]
    on_it = [c for c in ids if backend._shard_of[c] == 0]
    assert len(on_it) == 3
    ray.kill(shard.actor, no_restart=True)
    for cid in on_it:
        with pytest.raises(ChildFailed) as failed:
            await manager.wait_child(cid, timeout=60)
        assert failed.value.error.startswith("worker lost: shard 0 on node ")
    for n, prompt in enumerate(prompts):
        if ids[n] not in on_it:
            script.answer(prompt, [f"done {n}"])
    assert [await manager.wait_child(c, timeout=60) for c in ids if c not in on_it] == [
        f"done {n}" for n in range(6) if ids[n] not in on_it]
    script.cancelled.clear()
