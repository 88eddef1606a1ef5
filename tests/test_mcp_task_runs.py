"""`run_sessions` on MCP (one task for the whole run) and task status notifications over
stdio: `subsessions mcp` launched by the official SDK client, children answered by the
loopback fake model."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import Children, error, eventually_ends, result_text, server_params
from mcp_tasks_support import (
    Listen,
    ListenParams,
    Tasks,
    cancel,
    child_ids,
    get,
    listen,
    settled,
    start,
    start_tool,
)
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    SubscriptionsListenResult,
)

__all__ = ["fake_openai"]


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


def steps(*prompts: str) -> list[dict[str, str]]:
    return [{"session_type": "default", "prompt": p} for p in prompts]


def run_args(mode: str, *prompts: str) -> dict[str, Any]:
    return {"mode": mode, "timeout_ms": 30_000, "tasks": steps(*prompts)}


async def test_a_parallel_run_is_one_task_reporting_its_steps(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("slow")
    async with Client(server_params(home, fake_openai, tmp_path), extensions=[Tasks()]) as client:
        handle = await start_tool(client, "run_sessions", run_args("parallel", "quick", "slow"))
        await children.arrival("slow").wait()
        async with asyncio.timeout(10):
            while not ((await get(client, handle.task_id)).status_message or "").startswith(  # noqa: ASYNC110 (polling is the protocol)
                    "1 of 2 steps ended"):
                await asyncio.sleep(0.05)
        assert (await get(client, handle.task_id)).status == "working"
        gate.set()
        done = await settled(client, handle.task_id)
    assert done.status == "completed"
    assert re.fullmatch(r"2 of 2 steps ended, 2 turns, \d+ tokens", done.status_message or "")
    body = CallToolResult.model_validate(done.result).structured_content or {}
    assert body["mode"] == "parallel" and body["timed_out"] is False
    assert [s["result"] for s in body["results"]] == ["answer to quick", "answer to slow"]


async def test_cancelling_a_chain_cancels_the_running_step_and_starts_no_other(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    children.gate("first")  # never opened
    async with Client(server_params(home, fake_openai, tmp_path), extensions=[Tasks()]) as client:
        handle = await start_tool(client, "run_sessions", run_args("chain", "first", "second"))
        await children.arrival("first").wait()
        await cancel(client, handle.task_id)
        done = await settled(client, handle.task_id)
        assert done.status == "cancelled" and done.result is None
        await asyncio.wait_for(children.abandonment("first").wait(), 10)
        [child] = child_ids(home)  # the second step never started
        await eventually_ends(home, child, "turn_aborted")
        await cancel(client, handle.task_id)  # again: nothing changes
        assert (await get(client, handle.task_id)).status == "cancelled"
    assert not children.arrival("second").is_set()


async def test_bad_run_arguments_are_an_error_result_not_a_task(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    async with Client(server_params(home, fake_openai, tmp_path), extensions=[Tasks()]) as client:
        async def call(arguments: dict[str, Any]) -> str:
            result = await client.session.call_tool("run_sessions", arguments,
                                                    allow_claimed=True)
            assert isinstance(result, CallToolResult), result
            return error(result)

        assert await call({**run_args("parallel"), "tasks": []}) == (
            "invalid arguments for run_sessions: tasks must not be empty")
        assert (await call(run_args("parallel", "   "))) == (
            "invalid arguments for run_sessions: every prompt must be non-empty")
        assert (await call({**run_args("chain", "x"), "mode": "sideways"})).startswith(
            "invalid arguments for run_sessions: ")
        unknown = {**run_args("chain", "x"), "tasks": [{"session_type": "nope", "prompt": "x"}]}
        assert (await call(unknown)).startswith("unknown session_type nope; expected one of:")
        assert child_ids(home) == []  # nothing started


async def test_blocking_run_sessions_for_a_handshake_client_reports_progress(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("b")
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        gate.set()

    async with Client(server_params(home, fake_openai, tmp_path), mode="legacy") as client:
        result = await client.call_tool("run_sessions", run_args("parallel", "a", "b"),
                                        progress_callback=on_progress)
    body = result.structured_content or {}
    assert [s["result"] for s in body["results"]] == ["answer to a", "answer to b"]
    assert seen and all(m and re.search(r"[0-9a-f-]{36}: \w+, \d turns", m) for m in seen)


async def test_status_notifications_go_to_a_listening_client(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    gate = children.gate("watched")
    tasks = Tasks()
    async with (Client(server_params(home, fake_openai, tmp_path), extensions=[tasks]) as client,
                Client(server_params(home, fake_openai, tmp_path), extensions=[Tasks()]) as other):
        handle = await start(client, "watched")
        await children.arrival("watched").wait()
        # another connection naming the task is honored nothing, and its stream just ends
        await asyncio.wait_for(listen(other, [handle.task_id]), 10)
        stream = asyncio.ensure_future(listen(client, [handle.task_id]))
        first = await asyncio.wait_for(tasks.notes.get(), 10)
        assert (first.taskId, first.status) == (handle.task_id, "working")
        gate.set()
        await asyncio.wait_for(stream, 10)
        last = first
        while not tasks.notes.empty():
            last = tasks.notes.get_nowait()
        assert last.status == "completed" and last.result is not None
        assert result_text(CallToolResult.model_validate(last.result)) == "answer to watched"


async def test_task_methods_need_the_extension_declared(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    async with Client(server_params(home, fake_openai, tmp_path)) as plain:
        for attempt in (get(plain, "x"), cancel(plain, "x"), listen(plain, ["x"])):
            with pytest.raises(MCPError) as caught:
                await attempt
            assert caught.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    async with Client(server_params(home, fake_openai, tmp_path), extensions=[Tasks()]) as client:
        for hostile in ({"taskIds": "x"}, {"taskIds": [1, 2]}):
            with pytest.raises(MCPError) as caught:
                await client.session.send_request(
                    Listen(params=ListenParams(notifications=hostile)),
                    SubscriptionsListenResult)
            assert caught.value.error.code == INVALID_PARAMS
        # a listen for no task (or only core kinds) is acknowledged and ends at once
        await asyncio.wait_for(listen(client, []), 10)
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed is None
