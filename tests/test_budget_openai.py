"""Budgets and steering over the real `openai` SDK against the loopback server, on both wire
APIs: the tokens counted are the usage the server streams (Chat's usage chunk, Responses'
`response.completed`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import tool_outputs
from test_openai_models import ADD, WORKER, Api, engine_on, is_worker, user_texts
from test_openai_models import api as api  # the fixture

from subsessions import Budget, BudgetExhausted, ChildStatus, SessionConfig
from subsessions.testing import rollout_of, terminals

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

CONFIG = SessionConfig(custom_agents=(WORKER,), tools=(ADD,))


def adds() -> Reply:
    return calls(call("add", {"a": 1, "b": 2}), text="adding").with_usage(30, 10)


async def test_a_childs_token_budget_counts_the_usage_the_server_reports(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return adds()  # 40 tokens a turn, never done
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "sum",
                                                 "budget": {"max_tokens": 100,
                                                            "max_turns": None,
                                                            "max_seconds": None}}))
        if len(done) == 1:
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        return text("parent saw: " + done[1])

    fake_openai.script = script
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        answer = await parent.send_and_wait("delegate")
        [child] = parent.subsessions.children()
        assert answer == (f"parent saw: session {child.session_id} failed: "
                          "budget exhausted: tokens limit 100 reached")
        assert (child.usage.input_tokens, child.usage.output_tokens) == (90, 30)
        assert child.usage.turns == 3 and child.usage.tool_calls == 2
        assert child.result == "adding"
    [ending] = terminals(rollout_of(home, child.session_id))
    assert (ending["reason"], ending["limit"]) == ("budget_limited", {"kind": "tokens",
                                                                      "max": 100})


async def test_a_spent_tree_ends_the_roots_task_and_cancels_a_childs_streaming_call(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    stalled = asyncio.Event()

    async def script(request: Recorded) -> Reply:
        if is_worker(request) and user_texts(request) == ["slow"]:
            stalled.set()
            await asyncio.Event().wait()  # never answers: only a cancel ends this call
        if is_worker(request):
            return text("fast done").with_usage(400, 200)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "slow"}),
                         call("create_session", {"session_type": "worker", "prompt": "fast"}))
        await stalled.wait()
        ids = [json.loads(d)["session_id"] for d in done[:2]]
        return calls(call("wait_sessions", {"session_ids": ids, "mode": "all",
                                            "timeout_ms": 10_000}))

    fake_openai.script = script
    async with engine_on(fake_openai, api, home, tmp_path, idle_timeout=30) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                         budget=Budget(max_tokens=500)))
        with pytest.raises(BudgetExhausted, match="tokens limit 500 reached"):
            await root.send_and_wait("fan out")
        children = root.subsessions.children()
        assert [c.status for c in children] == [ChildStatus.FAILED, ChildStatus.FAILED]
    for session_id in (root.session_id, *(c.session_id for c in children)):
        assert terminals(rollout_of(home, session_id))[-1]["reason"] == "budget_limited"


async def test_a_message_reaches_a_child_between_its_calls_on_the_wire(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    first_call = asyncio.Event()
    go = asyncio.Event()

    async def script(request: Recorded) -> Reply:
        said = user_texts(request)
        if said == ["sum"]:
            first_call.set()
            await go.wait()
            return adds()
        return text(f"heard: {said[-1]}")

    fake_openai.script = script
    async with engine_on(fake_openai, api, home, tmp_path, idle_timeout=30) as engine:
        parent = await engine.create_session(CONFIG)
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "sum")
        await first_call.wait()
        assert await manager.send_message(cid, "use base 10") == "queued"
        go.set()
        assert await manager.wait_child(cid) == "heard: use base 10"
        assert await manager.send_message(cid, "and base 2?") == "started"
        assert await manager.wait_child(cid) == "heard: and base 2?"
        last = fake_openai.requests[-1]
        assert user_texts(last) == ["sum", "use base 10", "and base 2?"]


@pytest.mark.parametrize("seed", range(3))
async def test_a_budget_and_a_cancel_racing_over_the_wire_give_one_ending_each(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path, seed: int
) -> None:
    """Children whose streamed usage spends their budget while the parent cancels them a
    varying moment later: every child ends once, and its status is its rollout's ending."""
    n = 8

    def script(request: Recorded) -> Reply:
        return adds()  # 40 tokens: over each child's budget of 10 at its first answer

    fake_openai.script = script
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        manager = parent.subsessions
        ids = [await manager.spawn_child("worker", f"job {i}", budget=Budget(max_tokens=10))
               for i in range(n)]

        async def cancel_later(i: int, cid: str) -> bool:
            await asyncio.sleep(((i * 7 + seed * 3) % 10) * 0.006)
            return await manager.cancel_child(cid)

        cancelled = await asyncio.gather(*(cancel_later(i, c) for i, c in enumerate(ids)))
        for cid, was_cancelled in zip(ids, cancelled, strict=True):
            endings = terminals(rollout_of(home, cid))
            assert len(endings) == 1, endings
            status = manager.status(cid)
            if was_cancelled:
                assert status is ChildStatus.CANCELLED and endings[0]["reason"] == "cancelled"
            else:
                assert status is ChildStatus.FAILED
                assert endings[0]["reason"] == "budget_limited"
