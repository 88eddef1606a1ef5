"""The real Codex CLI (0.169, npm) reads what budgets and follow-ups write: a child ended
`turn_aborted(budget_limited)` and a child with a follow-up turn (two turns, one file) are
listed, read and resumed with nothing dropped (DESIGN 3.5)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
from codex_judge import expected, judge_home
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import tool_outputs
from test_codex_judge import _prompt, codex

from subsessions import Engine, Profile, SessionConfig
from subsessions.models.openai_responses import OpenAIResponsesModel

__all__ = ["codex", "fake_openai"]  # the fixtures

WORKER = "You are a budgeted worker for the Codex judge."


def _script(request: Recorded) -> Reply:
    prompt = _prompt(request)
    if WORKER in str(request.body.get("instructions") or ""):
        if prompt == "spend":
            return calls(call("list_profiles", {}), text="spending").with_usage(30, 10)
        return text(f"done: {prompt}")
    done = tool_outputs(request)
    if not done:
        return calls(call("create_session", {"session_type": "worker", "prompt": "spend",
                                             "budget": {"max_tokens": 50, "max_turns": None,
                                                        "max_seconds": None}}),
                     call("create_session", {"session_type": "worker", "prompt": "first",
                                             "budget": None}))
    if len(done) == 2:
        return calls(*(call("wait_session", {"session_id": json.loads(o)["session_id"],
                                             "timeout_ms": 20_000}) for o in done))
    return text(f"parent answer: {prompt}")


def _home(tmp_path: Path, base_url: str) -> Path:
    home = tmp_path / "ours"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "judge-model"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\n', encoding="utf-8")
    return home


async def test_codex_reads_budget_endings_and_follow_ups(
    codex: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script = _script
    home = _home(tmp_path, fake_openai.base_url)
    client = OpenAIResponsesModel(openai.AsyncOpenAI(base_url=fake_openai.base_url,
                                                     api_key="t"), provider="loopback")
    worker = Profile(name="worker", developer_instructions=WORKER)
    try:
        async with Engine(home, model_client=client, model="judge-model") as engine:
            root = await engine.create_session(SessionConfig(custom_agents=(worker,)))
            assert (await root.send_and_wait("go")) == "parent answer: go"
            spent, first = (c.session_id for c in root.subsessions.children())
            assert await root.subsessions.send_message(first, "second") == "started"
            assert await root.subsessions.wait_child(first) == "done: second"
    finally:
        await client.aclose()
    samples = {s.id: s for s in (expected(p) for p in home.glob("sessions/*/*/*/*.jsonl"))}
    assert [t.status for t in samples[spent].turns] == ["interrupted"]  # Codex: aborted
    assert len(samples[first].turns) == 2

    verdict = await judge_home(codex, home, tmp_path / "judge")

    print(verdict.counts())
    assert verdict.dropped == {}, verdict.dropped
    assert (verdict.read, verdict.resumed) == (3, 3)
