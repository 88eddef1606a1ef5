"""Usage a server reports is checked where it enters (issue 35, item 8): a count that is not a
whole number of tokens from 0 to 2**40 (negative, huge, text, a fraction, null) is
dropped for the estimate, marked `estimated`, with one warning per session; budgets
still hold, rollouts keep sane numbers, and a task that was answered is never failed by its
usage. Over the real `openai` SDK against the loopback server, on both wire APIs, streamed
and (Chat, after a stream that said nothing) not."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Any

import pytest
from fake_openai import Count, FakeOpenAI, Recorded, Reply, call, calls, fake_openai, raw, text
from test_model_options import token_records
from test_openai_models import ADD, WORKER, engine_on, is_worker

from subsessions import Budget, ChildFailed, SessionConfig
from subsessions.models.openai_common import MAX_COUNT
from subsessions.testing import rollout_of, terminals

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

WAYS = [("responses", "streamed"), ("chat", "streamed"), ("chat", "whole")]
# (A JSON `true` is not among them: the SDK's own validation makes it the count 1.)
UNUSABLE: list[Count] = [-999_600, 2**70, "50", 12.5, None]
CONFIG = SessionConfig(custom_agents=(WORKER,), tools=(ADD,))


def replying(how: str, reply: Any) -> Any:
    """A script answering `reply(request)`; `whole`: a stream is answered with an empty body
    first (as llama.cpp's server fails one), so the client asks again, not streamed."""

    def script(request: Recorded) -> Reply:
        if how == "whole" and request.stream:
            return raw()
        answer: Reply = reply(request)
        return answer

    return script


def warnings_about_usage(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "subsessions" and "token usage" in r.getMessage()]


def counts_of(home: Path, session_id: str) -> list[dict[str, Any]]:
    """Every count the session's rollout holds: each call's and the running totals."""
    found = []
    for info in token_records(home, session_id):
        found += [info["last_token_usage"], info["total_token_usage"]]
    return found  # type: ignore[return-value]


@pytest.mark.parametrize("way", WAYS, ids="-".join)
@pytest.mark.parametrize("count", UNUSABLE, ids=repr)
async def test_usage_that_is_not_counts_is_estimated_once_warned_and_the_budget_holds(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    way: tuple[str, str], count: Count
) -> None:
    api, how = way
    looping = calls(call("add", {"a": 1, "b": 2}), text="adding")
    fake_openai.script = replying(how, lambda request: (
        looping if is_worker(request) else text("fine")).with_usage(count, 5))
    caplog.set_level(logging.WARNING)
    async with engine_on(fake_openai, api, home, tmp_path) as engine:  # type: ignore[arg-type]
        parent = await engine.create_session(CONFIG)
        assert await parent.send_and_wait("hi") == "fine"  # answered, whatever its usage
        assert await parent.send_and_wait("again") == "fine"
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "sum", budget=Budget(max_tokens=200))
        with pytest.raises(ChildFailed, match="budget exhausted: tokens limit 200 reached"):
            await manager.wait_child(cid)
        usage = manager.info(cid).usage
        assert usage.turns == 1 and usage.estimated  # its first call's estimate is over 200
        assert parent.usage().estimated and parent.usage().turns == 2
    for session_id in (parent.session_id, cid):
        counted = counts_of(home, session_id)
        assert counted
        for counts in counted:
            assert counts.pop("estimated") is True
            assert all(type(n) is int and 0 <= n <= MAX_COUNT for n in counts.values()), counts
            assert counts["input_tokens"] > 0
    [ending] = terminals(rollout_of(home, cid))
    assert (ending["reason"], ending["limit"]) == ("budget_limited", {"kind": "tokens",
                                                                      "max": 200})
    warned = warnings_about_usage(caplog)
    assert len(warned) == 2, warned  # one per session, however many calls
    assert parent.session_id in warned[0] and cid in warned[1]
    assert f"at {fake_openai.base_url} reported token usage" in warned[0]
    gc.collect()  # a task whose exception nobody retrieved says so when it is collected
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


@pytest.mark.parametrize("way", WAYS, ids="-".join)
async def test_counts_up_to_the_cap_are_kept_as_reported_and_one_past_it_is_not(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    way: tuple[str, str]
) -> None:
    api, how = way
    answers = iter([text("big").with_usage(MAX_COUNT, 0, reasoning=None, cached=None),
                    text("bigger").with_usage(MAX_COUNT + 1, 0)])
    fake_openai.script = replying(how, lambda request: next(answers))
    caplog.set_level(logging.WARNING)
    async with engine_on(fake_openai, api, home, tmp_path) as engine:  # type: ignore[arg-type]
        session = await engine.create_session()
        assert await session.send_and_wait("big") == "big"
        assert not warnings_about_usage(caplog)
        assert await session.send_and_wait("bigger") == "bigger"
        assert len(warnings_about_usage(caplog)) == 1
    kept, _, last, total = counts_of(home, session.session_id)
    assert kept == {"input_tokens": MAX_COUNT, "cached_input_tokens": 0, "output_tokens": 0,
                    "reasoning_output_tokens": 0, "total_tokens": MAX_COUNT}
    assert last["estimated"] is True and 0 < last["input_tokens"] < 10_000
    assert total["estimated"] is True and total["input_tokens"] == MAX_COUNT + last["input_tokens"]
