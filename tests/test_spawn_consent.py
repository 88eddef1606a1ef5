"""Consent before spawning: the top-level session's `Hooks(on_spawn=...)` (DESIGN 3.11)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import FOREVER_MS, WORKER, Script, call, first_prompt, outputs

from subsessions import (
    Budget,
    Engine,
    Hooks,
    ModelRequest,
    Session,
    SessionConfig,
    SpawnDenied,
    SubsessionError,
)

KEYS = {"session_id", "session_type", "prompt", "budget", "depth", "running", "queued"}


@pytest.fixture
def script() -> Script:
    return Script(route=first_prompt)


@pytest.fixture
async def engine(home: Path, script: Script, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model, model="engine-model",
                      backend=backend) as engine:
        yield engine


def _top(engine: Engine, hook: Callable[[dict[str, Any]], Any], **kw: Any) -> Any:
    return engine.create_session(SessionConfig(
        custom_agents=(WORKER,), hooks=Hooks(on_spawn=hook), **kw))


def _deny_prompt(answer: Any) -> Callable[[dict[str, Any]], Any]:
    """A hook that denies a spawn whose prompt says "secret", recording every payload."""
    seen: list[dict[str, Any]] = []

    def hook(data: dict[str, Any]) -> Any:
        seen.append(dict(data))
        return answer if "secret" in data["prompt"] else None

    hook.seen = seen  # type: ignore[attr-defined]
    return hook


def _left_behind(top: Session, home: Path) -> None:
    """Nothing admitted, no slot held, no rollout written."""
    assert top.subsessions.children() == []
    assert top.subsessions.running() == []
    assert top.tree.running == 0
    assert sorted(home.rglob("*.jsonl")) == []


async def test_a_hook_that_allows_lets_the_child_run(engine: Engine, script: Script) -> None:
    answers = [None, {"decision": "allow"}, "deny", {"decision": "later"}]
    asked: list[str] = []

    def hook(data: dict[str, Any]) -> Any:
        asked.append(data["prompt"])
        return answers[len(asked) - 1]

    top = await _top(engine, hook)
    for prompt in ("a", "b", "c", "d"):
        cid = await top.subsessions.spawn_child("worker", prompt)
        assert await top.subsessions.wait_child(cid) == f"answer to {prompt}"
    assert asked == ["a", "b", "c", "d"]  # asked once per spawn


async def test_a_denied_spawn_raises_and_leaves_nothing(
    engine: Engine, script: Script, home: Path
) -> None:
    hook = _deny_prompt({"decision": "deny", "reason": "too costly"})
    top = await _top(engine, hook)
    with pytest.raises(SpawnDenied) as caught:
        await top.subsessions.spawn_child("worker", "a secret task")
    assert isinstance(caught.value, SubsessionError)
    assert str(caught.value) == "spawn denied: too costly"
    assert script.seen["a secret task"] == []
    _left_behind(top, home)
    # the slot was never held: a child may still use the only one
    one = await _top(engine, hook, max_children=1)
    with pytest.raises(SpawnDenied):
        await one.subsessions.spawn_child("worker", "secret again")
    cid = await one.subsessions.spawn_child("worker", "open")
    assert await one.subsessions.wait_child(cid) == "answer to open"


async def test_the_payload_the_hook_receives(engine: Engine, script: Script) -> None:
    hook = _deny_prompt(None)
    top = await _top(engine, hook)
    script.hold("first")
    first = await top.subsessions.spawn_child("worker", "first")
    second = await top.subsessions.spawn_child(
        "worker", "second", budget=Budget(max_turns=3))
    script.answer("first", ["first done"])
    assert await top.subsessions.wait_child(first) == "first done"
    assert await top.subsessions.wait_child(second) == "answer to second"
    assert hook.seen == [  # type: ignore[attr-defined]
        {"session_id": top.session_id, "session_type": "worker", "prompt": "first",
         "budget": None, "depth": 1, "running": 0, "queued": 0},
        {"session_id": top.session_id, "session_type": "worker", "prompt": "second",
         "budget": {"max_turns": 3, "max_tokens": None, "max_seconds": None},
         "depth": 1, "running": 1, "queued": 0},
    ]


def _child_spawning(prompt: str) -> Callable[[ModelRequest], Any]:
    """A child's script: spawn a grandchild, wait for it, say what each step answered."""

    def respond(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:
            return [call("create_session", session_type="worker", prompt=prompt)]
        if len(done) == 1 and done[0]["success"]:
            grandchild = orjson.loads(done[0]["output"])["session_id"]
            return [call("wait_session", session_id=grandchild, timeout_ms=FOREVER_MS)]
        return [f"{done[-1]['success']}|{done[-1]['output']}"]

    return respond


async def test_the_root_hook_decides_for_a_grandchild(
    engine: Engine, script: Script, backend: Any
) -> None:
    hook = _deny_prompt({"decision": "deny", "reason": "no grandchildren"})
    script.handlers["child"] = _child_spawning("grandchild")
    script.handlers["child 2"] = _child_spawning("secret grandchild")
    top = await _top(engine, hook, max_depth=2)
    cid = await top.subsessions.spawn_child("worker", "child")
    assert await top.subsessions.wait_child(cid) == 'True|{"result":"answer to grandchild"}'
    [_, payload] = hook.seen  # type: ignore[attr-defined]
    assert set(payload) == KEYS
    assert payload["session_id"] == cid  # the spawner: the child
    assert (payload["session_type"], payload["prompt"], payload["depth"]) == (
        "worker", "grandchild", 2)
    assert (payload["budget"], payload["queued"]) == (None, 0)
    if backend is None:  # on Ray, counted by the shard that spawns it
        assert payload["running"] == 1

    denied = await top.subsessions.spawn_child("worker", "child 2")
    assert await top.subsessions.wait_child(denied) == "False|spawn denied: no grandchildren"
    assert script.seen["secret grandchild"] == []


async def test_a_denied_create_session_is_a_tool_error(
    engine: Engine, script: Script, home: Path
) -> None:
    def parent(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:
            return [call("create_session", session_type="worker", prompt="secret work")]
        return [f"{done[0]['success']}|{done[0]['output']}"]

    script.handlers["parent task"] = parent
    top = await _top(engine, _deny_prompt({"decision": "deny", "reason": "ask first"}))
    assert await top.send_and_wait("parent task") == "False|spawn denied: ask first"
    assert script.seen["secret work"] == []
    assert top.subsessions.children() == []
    assert top.tree.running == 0


async def test_run_sessions_spawns_through_the_hook(engine: Engine, script: Script) -> None:
    def parent(request: ModelRequest) -> Any:
        done = outputs(request)
        if not done:
            return [call("run_sessions", tasks=[
                {"session_type": "worker", "prompt": "open"},
                {"session_type": "worker", "prompt": "secret"},
            ], mode="parallel", timeout_ms=FOREVER_MS)]
        return [done[0]["output"]]

    script.handlers["parent task"] = parent
    top = await _top(engine, _deny_prompt({"decision": "deny", "reason": "not this one"}))
    answer = await top.send_and_wait("parent task")
    assert answer is not None and "spawn denied: not this one" in answer
    assert script.seen["secret"] == []


async def test_a_hook_that_raises_denies_with_its_text(
    engine: Engine, script: Script, home: Path
) -> None:
    def hook(data: dict[str, Any]) -> Any:
        raise RuntimeError("consent service down")

    top = await _top(engine, hook)
    with pytest.raises(SpawnDenied) as caught:
        await top.subsessions.spawn_child("worker", "anything")
    assert str(caught.value) == "spawn denied: consent service down"
    assert script.seen["anything"] == []
    _left_behind(top, home)


async def test_an_async_hook_is_awaited(engine: Engine, script: Script, home: Path) -> None:
    async def hook(data: dict[str, Any]) -> Any:
        return {"decision": "deny", "reason": f"{data['session_type']} at {data['depth']}"}

    top = await _top(engine, hook)
    with pytest.raises(SpawnDenied, match=r"^spawn denied: worker at 1$"):
        await top.subsessions.spawn_child("worker", "x")
    _left_behind(top, home)
