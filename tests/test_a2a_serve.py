"""`subsessions a2a` driven by the official `a2a-sdk` client over loopback (DESIGN 3.15):
the card, send and stream, a follow-up in the same context, input-required, a cancel that
reaches the children, the access rule between callers, and the bearer token."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from a2a_support import (
    QUESTION,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Model,
    TaskNotFoundError,
    a2a_client,
    a2a_server,
    ending,
    eventually_ends,
    final,
    get_artifact_text,
    message,
    send,
    state,
    status_texts,
)
from fake_openai import FakeOpenAI, fake_openai
from openai_support import rollouts

from subsessions.rollouts import find_rollout, read_rollout

__all__ = ["fake_openai"]


async def test_the_card_lists_the_profiles_and_send_completes_a_task(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served:
        async with httpx.AsyncClient(timeout=10) as http:
            card = (await http.get(served.url + ".well-known/agent-card.json")).json()
        assert {s["id"] for s in card["skills"]} >= {"default", "tester", "mathematician"}
        assert card["capabilities"]["streaming"] is True
        async with a2a_client(served.url, streaming=False) as client:
            events = await send(client, message("hello"))
            assert len(events) == 1 and events[0].HasField("task")
            task = events[0].task
            done, said, task_id, context_id = final(events)
            assert done == state("completed")
            assert said == "hello: answered (1 user messages seen)"
            assert [get_artifact_text(a) for a in task.artifacts] == [said]
            got = await client.get_task(GetTaskRequest(id=task_id))
            assert got.status.state == state("completed") and got.context_id == context_id
            listed = await client.list_tasks(ListTasksRequest())
            assert [t.id for t in listed.tasks] == [task_id]
    assert list(rollouts(home)) == [context_id]  # the context is the session
    assert ending(home, context_id)["type"] == "task_complete"


async def test_a_stream_shows_usage_and_each_child_and_a_follow_up_keeps_the_history(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url) as client:
        events = await send(client, message("fan out"))
        done, said, _task, context_id = final(events)
        assert (done, said) == (state("completed"), "parent saw: child work: answered "
                                "(1 user messages seen)")
        assert events[0].HasField("task")
        assert events[0].task.status.state == state("submitted")
        states = [e.status_update.status.state for e in events if e.HasField("status_update")]
        assert states[0] == state("working") and states[-1] == state("completed")
        texts = status_texts(events)
        child_lines = [t for t in texts if t.startswith("subagent.")]
        assert [line.split()[0] for line in child_lines] == ["subagent.started",
                                                             "subagent.completed"]
        child = child_lines[0].split()[-1]
        usages = [e.status_update.metadata["usage"] for e in events
                  if e.HasField("status_update") and "usage" in e.status_update.metadata]
        # the parent's three calls and its child's one, 15 tokens each
        assert usages and usages[-1]["total_tokens"] == 60
        assert any(e.HasField("artifact_update") for e in events)

        again = await send(client, message("again", context_id=context_id))
        done, said, _task, same = final(again)
        assert (done, same) == (state("completed"), context_id)
        assert said == "again: answered (2 user messages seen)"  # the same history
    assert set(rollouts(home)) == {context_id, child}


async def test_a_context_closed_while_idle_is_resumed_by_its_follow_up(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path, "--keep-open", "0") as served, \
            a2a_client(served.url, streaming=False) as client:
        _, said, _, context_id = final(await send(client, message("hello")))
        assert said == "hello: answered (1 user messages seen)"
        for n in (2, 3):
            other = final(await send(client, message("elsewhere")))  # closes the idle one
            assert other[3] != context_id
            again = final(await send(client, message(f"turn {n}", context_id=context_id)))
            assert again[1:4:2] == (f"turn {n}: answered ({n} user messages seen)", context_id)
    records = read_rollout(find_rollout(home, context_id)).records
    notes = [r["payload"]["message"] for r in records
             if r["payload"].get("type") == "background_event"]
    assert sum(note.startswith(f"resumed {context_id}") for note in notes) == 2, notes


async def test_input_required_is_the_sessions_question_and_the_next_message_answers_it(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url, streaming=False) as client:
        asked = await send(client, message("ask"))
        waiting, question, task_id, context_id = final(asked)
        assert (waiting, question) == (state("input-required"), QUESTION)
        answered = await send(client, message("blue", task_id=task_id, context_id=context_id))
        done, said, same, _ = final(answered)
        assert (done, said, same) == (state("completed"), "colour is blue", task_id)


async def test_cancel_ends_the_task_and_its_children_as_cancels(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    model = Model()
    model.gate("child work")  # the child's model call waits: the tree is running
    fake_openai.script = model
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url) as client:
        seen: list[object] = []
        started = asyncio.Event()

        async def stream() -> None:
            async for event in client.send_message(message("fan out")):
                seen.append(event)
                if "subagent.started" in " ".join(status_texts([event])):
                    started.set()

        streaming = asyncio.create_task(stream())
        try:
            async with asyncio.timeout(30):
                await started.wait()
                await model.arrival("child work").wait()
            _, _, task_id, context_id = final(seen[:1])  # type: ignore[arg-type]
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert cancelled.status.state == state("canceled")
            async with asyncio.timeout(30):
                await streaming
        finally:
            streaming.cancel()
    assert final(seen)[0] == state("canceled")  # type: ignore[arg-type]
    child = status_texts(seen)[0].split()[-1]  # type: ignore[arg-type]
    await eventually_ends(home, context_id, "turn_aborted")
    await eventually_ends(home, child, "turn_aborted")
    assert ending(home, context_id)["cancelled_by"] == "host"
    assert ending(home, child)["cancelled_by"] == "parent"


async def test_another_callers_task_and_context_are_not_found(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url, "alice-token", streaming=False) as alice, \
            a2a_client(served.url, "bob-token", streaming=False) as bob:
        _, _, task_id, context_id = final(await send(alice, message("hello")))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):
            await send(bob, message("mine now", context_id=context_id))
        with pytest.raises(TaskNotFoundError):  # a context nobody created is no different
            await send(bob, message("hi", context_id="0190a000-0000-7000-8000-000000000000"))
        assert list((await bob.list_tasks(ListTasksRequest())).tasks) == []
        assert [t.id for t in (await alice.list_tasks(ListTasksRequest())).tasks] == [task_id]
        again = await send(alice, message("again", context_id=context_id))
        assert final(again)[0] == state("completed")


async def test_with_a_token_a_request_without_it_is_401(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    env = {"A2A_TOKEN": "s3cret"}
    async with a2a_server(home, fake_openai, tmp_path, "--auth-token-env", "A2A_TOKEN",
                          env=env) as served:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        async with httpx.AsyncClient(timeout=10) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                refused = await http.post(served.url, json=body, headers=headers)
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
            card = (await http.get(served.url + ".well-known/agent-card.json")).json()
        assert "bearer" in card["securitySchemes"]
        async with a2a_client(served.url, streaming=False) as anonymous:
            with pytest.raises(Exception, match="401"):
                await send(anonymous, message("hello"))
        async with a2a_client(served.url, "s3cret", streaming=False) as client:
            assert final(await send(client, message("hello")))[0] == state("completed")
