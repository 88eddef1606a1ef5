"""Forked children (DESIGN 3.13): a child that starts from a copy of its parent's conversation
instead of a re-brief. Over the real `openai` SDK and the loopback server on both wire APIs:
what the child's first request holds (the parent's earlier items, every copied call with its
output, never the parent's instructions), what its rollout says, and what bad `fork_turns`
get; on the scripted model, the last N turns and the Python API."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import rollouts, tool_outputs
from scripting import WORKER, Script, first_prompt
from test_openai_models import PARENT_INSTRUCTIONS, Api, engine_on, is_worker
from test_openai_models import api as api  # the fixture

from subsessions import Engine, InvalidArguments, SessionConfig
from subsessions._core.spawning import forked_items

__all__ = ["fake_openai"]

SECRET = "The code word is marmalade."


def _parent(fork_turns: Any) -> Any:
    """Turn 1 tells the parent a secret; in turn 2 it lists profiles, then asks for a forked
    child and its sessions in one response, and waits for the child."""
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return text("the child read: " + ("marmalade" if "marmalade" in json.dumps(
                request.body) else "nothing"))
        done = tool_outputs(request)
        said = json.dumps(request.body)
        if "DELEGATE-NOW" not in said:
            return text("noted")
        if not done:
            return calls(call("list_profiles", {}))
        if len(done) == 1:
            return calls(call("create_session", {"session_type": "worker", "prompt": "recall",
                                                 "budget": None, "fork_turns": fork_turns}),
                         call("list_sessions", {}))
        if len(done) == 3:
            if done[1].startswith("invalid arguments"):
                return text("refused")
            child = json.loads(done[1])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        return text("parent got: " + done[-1])

    return script


def _calls_answered(request: Recorded) -> tuple[list[str], list[str]]:
    """The call ids a request shows, and the ids of the outputs it shows, in either API."""
    if request.api == "responses":
        items = request.body["input"]
        return ([i["call_id"] for i in items if i.get("type") == "function_call"],
                [i["call_id"] for i in items if i.get("type") == "function_call_output"])
    messages = request.body["messages"]
    return ([c["id"] for m in messages for c in m.get("tool_calls") or ()],
            [m["tool_call_id"] for m in messages if m["role"] == "tool"])


async def test_a_forked_child_starts_from_the_parents_conversation(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    fake_openai.script = _parent("all")
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(
            custom_agents=(WORKER,), instructions=PARENT_INSTRUCTIONS))
        assert await parent.send_and_wait(SECRET) == "noted"
        answer = await parent.send_and_wait("DELEGATE-NOW: the recall")
        assert answer is not None and "marmalade" in answer
        [child] = parent.subsessions.children()
    first = next(r for r in fake_openai.requests if is_worker(r))
    shown = json.dumps(first.body)
    assert SECRET in shown and PARENT_INSTRUCTIONS not in shown  # items, never instructions
    made, answered = _calls_answered(first)
    assert made and sorted(made) == sorted(answered)  # the list_profiles call and its output
    items = json.dumps(first.body.get("input") or first.body.get("messages"))
    assert "create_session" not in items and "list_sessions" not in items  # pending: dropped
    records = rollouts(home)[child.session_id]
    meta = records[0]["payload"]
    assert meta["forked_from_id"] == parent.session_id
    copied = [r["payload"] for r in records[1:] if r["type"] == "response_item"]
    assert json.dumps(copied[0]).count("marmalade") == 1  # the copy follows session_meta
    assert records[1]["type"] == "response_item"


@pytest.mark.parametrize("fork_turns", [0, -1, 1.5, True, "some", [1], {"n": 1}])
async def test_a_bad_fork_turns_is_refused_in_one_line(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, fork_turns: Any
) -> None:
    fake_openai.script = _parent(fork_turns)
    async with engine_on(fake_openai, "responses", home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        await parent.send_and_wait(SECRET)
        await parent.send_and_wait("DELEGATE-NOW")
        assert parent.subsessions.children() == []
    refused = next(r for r in fake_openai.requests if len(tool_outputs(r)) == 3)
    error = tool_outputs(refused)[1]
    assert error.startswith("invalid arguments for create_session: fork_turns: must be null, "
                            '"none", "all" or an integer >= 1'), error


def _items(*turns: tuple[str, str]) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for n, (ask, answer) in enumerate(turns):
        history += [{"type": "message", "role": "user", "content": ask},
                    {"type": "function_call", "call_id": f"c{n}", "name": "add",
                     "arguments": "{}"},
                    {"type": "function_call_output", "call_id": f"c{n}", "output": "2"},
                    {"type": "message", "role": "assistant", "content": answer}]
    return history


def test_the_last_n_turns_count_the_spawning_turn() -> None:
    history = [*_items(("one", "1"), ("two", "2")),
               {"type": "message", "role": "developer", "content": "a notice"},
               {"type": "message", "role": "user", "content": "three"},
               {"type": "function_call", "call_id": "spawn", "name": "create_session",
                "arguments": "{}"}]
    texts = [i.get("content") for i in forked_items(history, 2, "spawn") if i.get("content")]
    assert texts == ["two", "2", "three"]  # turn two and the spawning one; no notice
    assert [i.get("content") for i in forked_items(history, 1, "spawn")] == ["three"]
    assert len(forked_items(history, "all", "spawn")) == 9  # all but the notice and the call
    assert len(forked_items(history, 99, "spawn")) == 9  # more than there are: all


async def test_spawn_child_forks_from_python(tmp_path: Path, backend: Any) -> None:
    """On both backends: on Ray the copy travels to the shard with the child."""
    script = Script(route=first_prompt)
    async with Engine(tmp_path / "home", model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        await parent.send_and_wait(SECRET)
        forked = await parent.subsessions.spawn_child("worker", "recall", fork_turns="all")
        plain = await parent.subsessions.spawn_child("worker", "recall", fork_turns="none")
        await parent.subsessions.wait_all([forked, plain])
        with pytest.raises(InvalidArguments, match="fork_turns: must be null"):
            await parent.subsessions.spawn_child("worker", "recall", fork_turns=0)
    # routed by its first user message: the forked child's is the parent's (the secret)
    parents, forks = (json.dumps(r.items) for r in script.seen[SECRET])
    assert "recall" not in parents and "recall" in forks
    [plain_request] = script.seen["recall"]
    assert SECRET not in json.dumps(plain_request.items)


async def test_a_batch_of_forked_children_each_start_from_the_parents_conversation(
    tmp_path: Path
) -> None:
    """`run_batch(..., fork_turns="all")`: every item's child holds the parent's earlier
    items before its own prompt; the journal keeps the field for a resume; a bad value is
    refused before anything runs."""
    script = Script()  # routed by the latest user message: the item's prompt
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(3)))
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                           cwd=str(work)))
        await parent.send_and_wait(SECRET)
        result = await parent.subsessions.run_batch("worker", "in.jsonl", "recall {n}",
                                                    "out.jsonl", fork_turns="all")
        with pytest.raises(InvalidArguments, match="fork_turns: must be null"):
            await parent.subsessions.run_batch("worker", "in.jsonl", "x", "o.jsonl",
                                               fork_turns=-2)
    assert result.completed == 3
    for n in range(3):
        [request] = script.seen[f"recall {n}"]
        assert SECRET in json.dumps(request.items)
    assert _header(result.journal_path)["fork_turns"] == "all"
    assert "o.jsonl" not in os.listdir(work)


def _header(journal: str) -> Any:
    return json.loads(Path(journal).read_text().splitlines()[0])
