"""MCP Tasks over streamable HTTP, on the wire revision the SDK serves tasks on (the
stateless 2026-07-28 one): `subsessions mcp --http` as a real subprocess, the official
SDK client pinned to that revision. There is no HTTP session on that wire, so the task
id is the capability: a task outlives the client that made it (a dropped stream, a
client gone), and lives as long as someone asks about it within the session idle
timeout (its lease); past that it is cancelled with its child and forgotten."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import Children, eventually_ends, http_server, result_text
from mcp_tasks_support import (
    Tasks,
    cancel,
    child_ids,
    get,
    listen,
    settled,
    start,
    start_tool,
)
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY, CallToolResult

from subsessions.mcp.server import MAX_SESSION_IDLE_TIMEOUT

__all__ = ["fake_openai"]

MODERN = "2026-07-28"
PROMPTLY = 10.0  # seconds: a one-second lease plus a loaded machine's slack


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


def tasks_client(url: str, tasks: Tasks | None = None) -> Client:
    return Client(url, mode=MODERN, extensions=[tasks or Tasks()])


async def test_a_task_over_http_runs_to_its_answer(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("slow")
    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                tasks_client(url) as client):
        assert client.protocol_version == MODERN
        handle = await start(client, "slow")
        assert handle.status == "working"
        assert handle.ttl_ms is not None and handle.ttl_ms >= 120_000  # the lease (120 s)
        await children.arrival("slow").wait()
        working = await get(client, handle.task_id)
        assert working.status == "working" and working.result is None
        assert re.fullmatch(r"running, 1 turns, \d+ tokens", working.status_message or "")
        gate.set()
        done = await settled(client, handle.task_id)
        result = CallToolResult.model_validate(done.result)
        assert done.status == "completed" and result_text(result) == "answer to slow"
        # the SDK's own call_tool resolves the task through the claim, transparently
        plain = await client.call_tool("run_session", {"session_type": "default",
                                                       "prompt": "again"})
        assert result_text(plain) == "answer to again"


async def test_a_task_outlives_the_client_that_made_it(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("long")
    async with http_server(home, fake_openai, tmp_path) as (url, _proc):
        async with tasks_client(url) as first:
            handle = await start(first, "long")
            await children.arrival("long").wait()
        # its client (and every stream of it) is gone; the id still reaches the task
        async with tasks_client(url) as second:
            assert (await get(second, handle.task_id)).status == "working"
            gate.set()
            done = await settled(second, handle.task_id)
        assert result_text(CallToolResult.model_validate(done.result)) == "answer to long"
        assert not children.abandonment("long").is_set()


async def test_a_task_nobody_asks_about_past_the_idle_timeout_is_cancelled(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    children.gate("forgotten")  # never opened
    async with http_server(home, fake_openai, tmp_path, "--session-idle-timeout", "1") as (
            url, _proc):
        async with tasks_client(url) as client:
            handle = await start(client, "forgotten")
            assert handle.ttl_ms is not None and 1000 <= handle.ttl_ms < 5000
            await children.arrival("forgotten").wait()
        await asyncio.wait_for(children.abandonment("forgotten").wait(), PROMPTLY)
        [child] = child_ids(home)
        await eventually_ends(home, child, "turn_aborted", PROMPTLY)
        async with tasks_client(url) as client:
            with pytest.raises(MCPError, match=f"unknown task {handle.task_id}"):
                await get(client, handle.task_id)


async def test_the_longest_idle_timeout_is_a_lease_tasks_can_be_given(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("lasting")
    longest = f"{MAX_SESSION_IDLE_TIMEOUT:.0f}"
    async with (http_server(home, fake_openai, tmp_path, "--session-idle-timeout", longest) as (
            url, _proc), tasks_client(url) as client):
        handle = await start(client, "lasting")
        assert handle.status == "working" and handle.ttl_ms is not None
        assert 0 <= handle.ttl_ms - MAX_SESSION_IDLE_TIMEOUT * 1000 < 60_000
        gate.set()
        done = await settled(client, handle.task_id)
        assert result_text(CallToolResult.model_validate(done.result)) == "answer to lasting"


async def test_a_client_that_keeps_asking_keeps_its_task(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("kept")
    async with (http_server(home, fake_openai, tmp_path, "--session-idle-timeout", "1") as (
            url, _proc), tasks_client(url) as client):
        handle = await start(client, "kept")
        for _ in range(8):  # 2 s of polls, twice the lease
            assert (await get(client, handle.task_id)).status == "working"
            await asyncio.sleep(0.25)
        gate.set()
        assert (await settled(client, handle.task_id)).status == "completed"


async def test_cancelling_a_task_over_http_cancels_its_child(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    children.gate("held")  # never opened
    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                tasks_client(url) as client):
        handle = await start(client, "held")
        await children.arrival("held").wait()
        await cancel(client, handle.task_id)
        assert (await settled(client, handle.task_id)).status == "cancelled"
        await asyncio.wait_for(children.abandonment("held").wait(), PROMPTLY)
        [child] = child_ids(home)
        await eventually_ends(home, child, "turn_aborted")


async def test_task_ids_are_never_listed_and_unknown_ids_get_unknown(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("mine")
    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                tasks_client(url) as owner, Client(url) as stateful):
        handle = await start(owner, "mine")
        await children.arrival("mine").wait()
        guessed = handle.task_id[:-1] + ("A" if handle.task_id[-1] != "A" else "B")
        for attempt in (get(owner, guessed), cancel(owner, guessed)):
            with pytest.raises(MCPError, match=f"unknown task {guessed}"):
                await attempt
        # a handshake (stateful) client sees none of it, and has no task methods
        listed = await stateful.call_tool("list_sessions", {})
        assert (listed.structured_content or {})["sessions"] == []
        assert (await stateful.list_resources()).resources == []
        with pytest.raises(MCPError, match="Method not found"):
            await get(stateful, handle.task_id)
        assert (await get(owner, handle.task_id)).status == "working"
        gate.set()
        assert (await settled(owner, handle.task_id)).status == "completed"


async def test_stateless_clients_without_the_extension_get_the_answer_itself(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                Client(url, mode=MODERN) as client):
        result = await client.session.call_tool(
            "run_session", {"session_type": "default", "prompt": "direct"}, allow_claimed=True)
        assert isinstance(result, CallToolResult) and result_text(result) == "answer to direct"
        ran = await client.call_tool("run_sessions", {
            "mode": "chain", "timeout_ms": 10_000, "tasks": [
                {"session_type": "default", "prompt": "one"},
                {"session_type": "default", "prompt": "after {previous}"}]},
            progress_callback=on_progress)
        steps = (ran.structured_content or {})["results"]
        assert [s["result"] for s in steps] == ["answer to one", "answer to after answer to one"]
        assert seen  # progress while the chain ran
        # tools that keep sub-sessions between calls need a connection
        with pytest.raises(MCPError, match="per connection"):
            await client.call_tool("create_session", {"session_type": "default", "prompt": "x"})
        with pytest.raises(MCPError) as caught:
            await get(client, "anything")
        assert caught.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_status_notifications_over_http_follow_a_slow_child(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("watched")
    tasks = Tasks()
    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                tasks_client(url, tasks) as client):
        handle = await start(client, "watched")
        await children.arrival("watched").wait()
        stream = asyncio.ensure_future(listen(client, [handle.task_id, "not-a-task"]))
        first = await asyncio.wait_for(tasks.notes.get(), PROMPTLY)
        assert first.taskId == handle.task_id and first.status == "working"
        assert re.fullmatch(r"running, 1 turns, \d+ tokens", first.statusMessage or "")
        gate.set()
        await asyncio.wait_for(stream, PROMPTLY)  # ended gracefully once the task ended
        notes = [first]
        while not tasks.notes.empty():
            notes.append(tasks.notes.get_nowait())
        last = notes[-1]
        assert last.status == "completed" and last.result is not None
        assert result_text(CallToolResult.model_validate(last.result)) == "answer to watched"
        assert all(n.meta for n in notes)  # each stamped with its subscription


async def test_a_run_is_one_task_over_http(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    async with (http_server(home, fake_openai, tmp_path) as (url, _proc),
                tasks_client(url) as client):
        handle = await start_tool(client, "run_sessions", {
            "mode": "parallel", "timeout_ms": 10_000, "tasks": [
                {"session_type": "default", "prompt": "left"},
                {"session_type": "default", "prompt": "right"}]})
        done = await settled(client, handle.task_id)
        assert done.status == "completed"
        assert re.fullmatch(r"2 of 2 steps ended, 2 turns, \d+ tokens", done.status_message or "")
        result = CallToolResult.model_validate(done.result)
        steps = (result.structured_content or {})["results"]
        assert [s["result"] for s in steps] == ["answer to left", "answer to right"]
