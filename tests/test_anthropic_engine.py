"""A real Engine on the `anthropic` wire (DESIGN 3.14): usage with cache reads and writes in
rollouts and `list_sessions`, a budget that trips on cached input, cancel closing the stream,
and a tree whose Claude parent has children on Claude and on an OpenAI-compatible provider.
The real `anthropic` and `openai` SDKs against the loopback fakes; nothing is monkeypatched."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic", reason="pip install 'subsessions[anthropic]'")

from fake_anthropic import FakeAnthropic, Recorded, Turn  # noqa: E402
from fake_openai import FakeOpenAI, fake_openai, settle_sdk_generators, text  # noqa: E402
from openai_support import UNSET, rollouts  # noqa: E402
from test_model_options import token_records, write_config  # noqa: E402

from subsessions import (  # noqa: E402
    Budget,
    ChildCancelled,
    ChildFailed,
    ChildStatus,
    Engine,
    Profile,
    SessionConfig,
    Tool,
)
from subsessions.models.anthropic_wire import AnthropicModel  # noqa: E402
from subsessions.models.factory import build_model_client  # noqa: E402
from subsessions.models.openai_common import RetryPolicy  # noqa: E402
from subsessions.settings import load_settings  # noqa: E402
from subsessions.testing import rollout_of, terminals  # noqa: E402

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

WORKER = Profile(name="worker", description="does work",
                 developer_instructions="You are a worker.")
LOCAL = Profile(name="local_worker", description="works on the local server",
                developer_instructions="You are a local worker.", model="local:qwen3:8b")
ADD = Tool(name="add", description="Adds.", handler=lambda arguments, invocation: 3,
           parameters={"type": "object", "properties": {}})
CONFIG = SessionConfig(instructions="You are the parent.", custom_agents=(WORKER, LOCAL),
                       tools=(ADD,))
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server
    assert not server.script_errors


@asynccontextmanager
async def engine_on(fake: FakeAnthropic, home: Path, tmp_path: Path) -> AsyncIterator[Engine]:
    client = AnthropicModel(
        anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="t", max_retries=0),
        provider="claude", retry=RetryPolicy(max_retries=2, base_delay=0.001),
        stream_idle_timeout=10.0)
    try:
        async with Engine(home, model_client=client, model="claude-test",
                          project_dir=tmp_path) as engine:
            yield engine
    finally:
        await client.aclose()
        await settle_sdk_generators()


def system_of(request: Recorded) -> str:
    return "".join(block["text"] for block in request.body.get("system") or ())


def is_worker(request: Recorded) -> bool:
    return "You are a worker." in system_of(request)


def results(request: Recorded) -> list[str]:
    return [str(block.get("content", "")) for block in request.tool_results()]


def create(profile: str, budget: dict[str, Any] | None = None) -> Turn:
    return Turn(calls=(("create_session", {"session_type": profile, "prompt": "work",
                                           "budget": budget}),))


def child_of(request: Recorded, index: int = 0) -> str:
    return str(json.loads(results(request)[index])["session_id"])


async def test_usage_with_cache_is_in_rollouts_list_sessions_and_roll_ups(
    fake: FakeAnthropic, home: Path, tmp_path: Path
) -> None:
    listed: list[Any] = []

    def script(request: Recorded) -> Turn:
        if is_worker(request):
            return Turn(text="42", input_tokens=10, cache_read=1000, cache_write=200,
                        output_tokens=5)
        done = results(request)
        if not done:
            return create("worker")
        if len(done) == 1:
            return Turn(calls=(("wait_session", {"session_id": child_of(request),
                                                 "timeout_ms": 10_000}),))
        if len(done) == 2:
            return Turn(calls=(("list_sessions", {}),))
        listed.append(json.loads(done[2]))
        return Turn(text="done", input_tokens=50, cache_read=3000, output_tokens=2)

    fake.script = script
    async with engine_on(fake, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        assert await parent.send_and_wait("delegate") == "done"
        [child] = parent.subsessions.children()
        assert (child.usage.input_tokens, child.usage.output_tokens) == (1210, 5)
    [entry] = listed[0]["sessions"]
    assert entry["usage"] == {"input_tokens": 1210, "output_tokens": 5, "total_tokens": 1215,
                              "turns": 1, "tool_calls": 0}
    [info] = token_records(home, child.session_id)
    assert info["last_token_usage"] == {  # type: ignore[index]
        "input_tokens": 1210, "cached_input_tokens": 1000, "output_tokens": 5,
        "reasoning_output_tokens": 0, "total_tokens": 1215}
    last = token_records(home, parent.session_id)[-1]["total_token_usage"]  # type: ignore[index]
    assert last["cached_input_tokens"] == 3000 and last["input_tokens"] == 3 * 10 + 50 + 3000
    # every turn marks the same prefix (system, tools) and its newest block for the cache
    for request in fake.requests:
        assert request.body["system"][-1]["cache_control"] == EPHEMERAL
        assert request.body["tools"][-1]["cache_control"] == EPHEMERAL
        assert request.body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
        assert json.dumps(request.body).count('"cache_control"') == 3


async def test_a_token_budget_trips_on_cached_input(
    fake: FakeAnthropic, home: Path, tmp_path: Path
) -> None:
    def script(request: Recorded) -> Turn:
        if is_worker(request):  # 15 tokens a turn uncached; 515 with the cache read
            return Turn(calls=(("add", {}),), input_tokens=10, cache_read=500,
                        output_tokens=5)
        return Turn(text="unused")

    fake.script = script
    async with engine_on(fake, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "loop", budget=Budget(max_tokens=1000))
        with pytest.raises(ChildFailed, match="budget exhausted: tokens limit 1000 reached"):
            await manager.wait_child(cid)
        assert manager.info(cid).usage.input_tokens == 1020
    [ending] = terminals(rollout_of(home, cid))
    assert ending["reason"] == "budget_limited"


async def test_cancel_closes_the_stream(fake: FakeAnthropic, home: Path,
                                        tmp_path: Path) -> None:
    streaming = asyncio.Event()

    def script(request: Recorded) -> Turn:
        if is_worker(request):
            streaming.set()
            return Turn(text="never finished", fault="stall", after=4)
        return Turn(text="unused")

    fake.script = script
    async with engine_on(fake, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        manager = parent.subsessions
        cid = await manager.spawn_child("worker", "work")
        await streaming.wait()
        await manager.cancel_child(cid)
        await fake.wait_for_disconnects(1)
        with pytest.raises(ChildCancelled):
            await manager.wait_child(cid)
        assert manager.info(cid).status is ChildStatus.CANCELLED
    [ending] = terminals(rollout_of(home, cid))
    assert ending["type"] == "turn_aborted"


async def test_a_claude_parent_has_children_on_claude_and_on_an_openai_compatible_server(
    fake: FakeAnthropic, fake_openai: FakeOpenAI, home: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    write_config(
        home,
        f'model = "claude-test"\nmodel_provider = "claude"\n'
        f'[model_providers.claude]\nbase_url = "{fake.base_url}"\nwire_api = "anthropic"\n'
        f'env_key = "{UNSET}"\n'
        f'[model_providers.local]\nbase_url = "{fake_openai.base_url}"\nwire_api = "chat"\n'
        f'env_key = "{UNSET}"\n')
    fake_openai.reply_with(text("from the local server"))

    def script(request: Recorded) -> Turn:
        if is_worker(request):
            return Turn(text="from claude")
        done = results(request)
        if not done:
            return Turn(calls=(("create_session", {"session_type": "worker", "prompt": "a"}),
                               ("create_session", {"session_type": "local_worker",
                                                   "prompt": "b"})))
        if len(done) == 2:
            ids = [child_of(request, 0), child_of(request, 1)]
            return Turn(calls=tuple(("wait_session", {"session_id": i, "timeout_ms": 10_000})
                                    for i in ids))
        return Turn(text=" | ".join(done[2:]))

    fake.script = script
    client = build_model_client(load_settings(home))
    try:
        async with Engine(home, model_client=client, model="claude-test",
                          project_dir=tmp_path) as engine:
            parent = await engine.create_session(CONFIG)
            answer = await parent.send_and_wait("delegate")
            claude, local = parent.subsessions.children()
    finally:
        await client.aclose()
        await settle_sdk_generators()
    assert "from claude" in answer and "from the local server" in answer
    assert (claude.status, local.status) == (ChildStatus.DONE, ChildStatus.DONE)
    [asked] = fake_openai.requests
    assert asked.api == "chat" and asked.body["model"] == "qwen3:8b"
    assert asked.body["messages"][0] == {"role": "system", "content": "You are a local worker."}
    assert {r.body["model"] for r in fake.requests} == {"claude-test"}
    metas = {sid: records[0]["payload"] for sid, records in rollouts(home).items()}
    # each rollout names the provider its session talked to
    assert (metas[local.session_id]["model"], metas[local.session_id]["model_provider"]) == (
        "local:qwen3:8b", "local")
    assert (metas[claude.session_id]["model"], metas[claude.session_id]["model_provider"]) == (
        "claude-test", "claude")
    assert metas[parent.session_id]["model_provider"] == "claude"


def without_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


async def test_a_forked_child_sends_the_parents_conversation_as_its_prefix(
    fake: FakeAnthropic, home: Path, tmp_path: Path
) -> None:
    thought = {"type": "thinking", "thinking": "First add.", "signature": "sig-" + "x" * 40}

    def script(request: Recorded) -> Turn:
        if is_worker(request):
            return Turn(text="forked done", input_tokens=5, cache_read=900)
        done = results(request)
        if not done:
            return Turn(calls=(("add", {}),), thinking=(thought,))
        if len(done) == 1:
            return Turn(calls=(("create_session", {"session_type": "worker", "prompt": "go on",
                                                   "fork_turns": "all"}),))
        if len(done) == 2:
            return Turn(calls=(("wait_session", {"session_id": child_of(request, 1),
                                                 "timeout_ms": 10_000}),))
        return Turn(text="parent done")

    fake.script = script
    async with engine_on(fake, home, tmp_path) as engine:
        parent = await engine.create_session(CONFIG)
        assert await parent.send_and_wait("delegate") == "parent done"
        [child] = parent.subsessions.children()
        assert child.usage.input_tokens == 905
    [forked] = [r for r in fake.requests if is_worker(r)]
    second = fake.requests[1].body["messages"]  # the parent's, after its add
    sent = forked.body["messages"]
    # the parent's conversation up to the spawning call, its thinking signature unchanged
    assert [m["role"] for m in sent[:3]] == ["user", "assistant", "user"]
    assert sent[1]["content"][0] == thought
    for mine, theirs in zip(sent[:2], second[:2], strict=True):
        assert without_marks(mine["content"]) == without_marks(theirs["content"])
    assert sent[-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert "go on" in json.dumps(sent[-1])
    # Its instructions are its own (never the parent's), so the parent's cache is not its
    # to read; a breakpoint at the end of the copy lets its forked siblings read that.
    assert sent[2]["content"][0]["type"] == "tool_result"  # the copy's last block: the add
    assert sent[2]["content"][0]["cache_control"] == EPHEMERAL
    marks = json.dumps(forked.body).count('"cache_control"')
    assert marks == 4  # the last tool, the system block, the copy's end, the newest block


async def test_a_ray_shard_builds_its_anthropic_client_from_settings(
    fake: FakeAnthropic, ray_cluster: Any, home: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child run on a shard talks to the provider from `config.toml` on the `anthropic`
    wire, and its usage with cache reads lands in its parent's figures."""
    from ray_support import SHARD_OPTIONS

    from subsessions import RayBackend

    monkeypatch.delenv(UNSET, raising=False)
    write_config(home, f'model = "claude-test"\nmodel_provider = "claude"\n'
                       f'[model_providers.claude]\nbase_url = "{fake.base_url}"\n'
                       f'wire_api = "anthropic"\nenv_key = "{UNSET}"\n')
    fake.script = lambda request: Turn(text="from a shard", input_tokens=7, cache_read=300)
    backend = RayBackend(shards=1, model_settings=load_settings(home),
                         actor_options=SHARD_OPTIONS)
    client = build_model_client(load_settings(home))
    try:
        async with Engine(home, model_client=client, model="claude-test", backend=backend,
                          project_dir=tmp_path) as engine:
            parent = await engine.create_session(CONFIG)
            child = await parent.subsessions.spawn_child("worker", "work")
            assert await parent.subsessions.wait_child(child, timeout=120) == "from a shard"
            [info] = parent.subsessions.children()
    finally:
        await client.aclose()
        await settle_sdk_generators()
    assert info.usage.input_tokens == 307
    counted = [r["payload"]["info"]["total_token_usage"] for r in rollouts(home)[child]
               if r["type"] == "event_msg" and r["payload"]["type"] == "token_count"]
    assert counted[-1]["cached_input_tokens"] == 300
    [request] = fake.requests
    assert is_worker(request) and request.body["model"] == "claude-test"
