"""Model options. Usage a server does not report (llama.cpp's server streams none) is
estimated, marked `estimated`, and counts like reported usage: live usage, roll-ups, budgets.
And `tool_choice` on both wire APIs, back to `auto` once a tool has been called; the output
cap (`model_max_output_tokens`)."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import (
    FakeOpenAI,
    Recorded,
    Reply,
    call,
    calls,
    fake_openai,
    text,
)
from openai_support import rollouts, tool_outputs
from test_openai_models import ADD, WORKER, Api, engine_on, is_worker
from test_openai_models import api as api  # the fixture

from subsessions import ConfigError, Profile, SessionConfig
from subsessions.settings import load_settings
from subsessions.testing import rollout_of, terminals

__all__ = ["fake_openai"]

ANSWER = "The sum is three."  # 17 characters: 5 tokens at four characters a token


def delegate(budget: dict[str, int | None] | None = None) -> Reply:
    return calls(call("create_session", {"session_type": "worker", "prompt": "sum",
                                         "budget": budget}))


def parent_script(child_reply: Reply, budget: dict[str, int | None] | None = None):  # type: ignore[no-untyped-def]
    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return child_reply
        done = tool_outputs(request)
        if not done:
            return delegate(budget)
        if len(done) == 1:
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        return text("parent saw: " + done[1])

    return script


def token_records(home: Path, session_id: str) -> list[dict[str, object]]:
    return [r["payload"]["info"] for r in rollouts(home)[session_id]
            if r["type"] == "event_msg" and r["payload"]["type"] == "token_count"]


async def test_usage_the_server_omits_is_estimated_marked_and_rolled_up(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    fake_openai.script = parent_script(text(ANSWER).without_usage())
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        assert ANSWER in (await parent.send_and_wait("delegate") or "")
        [child] = parent.subsessions.children()
        listed = child.listing()["usage"]
        assert listed["estimated"] is True and listed["output_tokens"] == 5
        assert listed["input_tokens"] > 0
        whole = parent.usage(include_children=True)
        assert whole.estimated  # the parent's own were reported, its child's estimated
        assert not parent.usage().estimated
    [info] = token_records(home, child.session_id)
    last, total = info["last_token_usage"], info["total_token_usage"]
    assert last == total and isinstance(last, dict)
    assert last["estimated"] is True and last["output_tokens"] == 5
    sent = next(r for r in fake_openai.requests if is_worker(r)).body
    shown = sent.get("messages") or sent.get("input")
    assert last["input_tokens"] >= len(json.dumps(shown)) // 5  # the request's own text
    for info in token_records(home, parent.session_id):  # reported figures stay unmarked
        assert "estimated" not in info["last_token_usage"]  # type: ignore[operator]


async def test_a_token_budget_trips_on_estimated_usage(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    budget = {"max_tokens": 40, "max_turns": None, "max_seconds": None}
    looping = calls(call("add", {"a": 1, "b": 2}), text="adding").without_usage()
    fake_openai.script = parent_script(looping, budget)
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                           tools=(ADD,)))
        answer = await parent.send_and_wait("delegate")
        [child] = parent.subsessions.children()
    assert answer == (f"parent saw: session {child.session_id} failed: "
                      "budget exhausted: tokens limit 40 reached")
    assert child.usage.turns == 1  # the first call's estimate is over the limit
    [ending] = terminals(rollout_of(home, child.session_id))
    assert ending["reason"] == "budget_limited"


def choice_of(request: Recorded) -> object:
    return request.body.get("tool_choice")


async def test_tool_choice_forces_a_tool_then_goes_back_to_auto(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(calls(call("add", {"a": 1, "b": 2})), text("3"),
                           calls(call("add", {"a": 2, "b": 2})), text("4"))
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(tools=(ADD,), tool_choice="add",
                                                            max_depth=0))
        assert await session.send_and_wait("1+2") == "3"
        assert await session.send_and_wait("2+2") == "4"  # a new task forces it again
    named = ({"type": "function", "name": "add"} if api == "responses"
             else {"type": "function", "function": {"name": "add"}})
    assert [choice_of(r) for r in fake_openai.requests] == [named, "auto", named, "auto"]
    assert tool_outputs(fake_openai.requests[1]) == ["3"]


async def test_a_profiles_tool_choice_reaches_its_childs_calls(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    worker = Profile(name="worker", developer_instructions=WORKER.developer_instructions,
                     tool_choice="required")
    fake_openai.script = parent_script(text(ANSWER))
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(worker,),
                                                           tools=(ADD,), tool_choice="none"))
        await parent.send_and_wait("delegate")
    requests = fake_openai.requests
    assert [choice_of(r) for r in requests if is_worker(r)] == ["required"]
    assert [choice_of(r) for r in requests if not is_worker(r)] == ["none", "auto", "auto"]


def test_tool_choice_must_be_a_word_or_a_name() -> None:
    for bad in ("", "  ", 3):
        try:
            SessionConfig(tool_choice=bad)  # type: ignore[arg-type]
        except ValueError as exc:
            assert "tool_choice must be auto, required, none or a tool's name" in str(exc)
        else:
            raise AssertionError(f"tool_choice={bad!r} was accepted")


def write_config(home: Path, text: str) -> None:
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(text)


def test_an_output_cap_below_one_is_refused_naming_the_key(home: Path) -> None:
    write_config(home, "model_max_output_tokens = 0\n")
    try:
        load_settings(home)
    except ConfigError as exc:
        assert "model_max_output_tokens" in str(exc) and "at least 1" in str(exc)
    else:
        raise AssertionError("model_max_output_tokens = 0 was accepted")


async def test_a_resumed_session_keeps_its_usage_marked_estimated(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(text(ANSWER).without_usage(), text("again").with_usage(5, 1))
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        session = await engine.create_session(SessionConfig(max_depth=0))
        await session.send_and_wait("first")
        session_id = session.session_id
        await engine.destroy_session(session_id)
        resumed = await engine.resume_session(session_id)
        assert resumed.usage().estimated and resumed.usage().output_tokens == 5
        await resumed.send_and_wait("second")  # reported figures added to an estimate
        assert resumed.usage().estimated and resumed.usage().output_tokens == 6
