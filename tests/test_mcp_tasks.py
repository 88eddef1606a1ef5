"""`run_session` and MCP Tasks (SEP-2663) on `subsessions mcp`, driven by the official SDK
client (its extension interface: a `resultType: "task"` claim) over stdio, and the
blocking tool over streamable HTTP; children answered by the loopback fake model."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, Recorded, Reply, fake_openai, model_not_found
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import (
    Children,
    connect,
    error,
    eventually_ends,
    http_server,
    result_text,
    server_params,
)
from mcp_tasks_support import TASKS, Tasks, cancel, get, settled, start
from mcp_types import CallToolResult
from openai_support import prompt_of

__all__ = ["fake_openai"]


async def child_id(client: Client) -> str:
    listed = await client.call_tool("list_sessions", {})
    sessions = (listed.structured_content or {})["sessions"]
    assert len(sessions) == 1, sessions
    found: str = sessions[0]["session_id"]
    return found


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    path = tmp_path / "server-stderr.log"
    with path.open("w+") as log:
        yield log
    if text := path.read_text().strip():
        print(f"--- subsessions mcp stderr ---\n{text}")


class Script(Children):
    """`answer to {prompt}` (after its gate), but the prompt `doomed` makes the model fail."""

    async def __call__(self, request: Recorded) -> Reply:
        if prompt_of(request) == "doomed":
            return model_not_found("m")
        return await super().__call__(request)


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Script()
    fake_openai.script = script
    return script


def tasks_client(home: Path, fake: FakeOpenAI, cwd: Path, errlog: TextIO) -> Client:
    return Client(server_params(home, fake, cwd), extensions=[Tasks()])


# -- the task lifecycle -------------------------------------------------------------------


async def test_a_task_runs_the_child_and_carries_its_answer(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gate = children.gate("slow")
    async with tasks_client(home, fake_openai, tmp_path, errlog) as client:
        assert client.protocol_version == "2026-07-28"
        caps = client.session.server_capabilities
        assert caps is not None and TASKS in (caps.extensions or {})
        handle = await start(client, "slow")  # returns while the child is held
        assert handle.status == "working" and handle.ttl_ms is None
        await children.arrival("slow").wait()
        working = await get(client, handle.task_id)
        assert working.status == "working" and working.result is None
        assert re.fullmatch(r"running, 1 turns, \d+ tokens", working.status_message or "")
        gate.set()
        done = await settled(client, handle.task_id)
        assert done.status == "completed"
        result = CallToolResult.model_validate(done.result)
        assert not result.is_error and result_text(result) == "answer to slow"
        assert re.fullmatch(r"completed, 1 turns, \d+ tokens", done.status_message or "")
        # the SDK's own call_tool resolves the task through the claim, transparently
        plain = await client.call_tool("run_session", {"session_type": "default",
                                                       "prompt": "again"})
        assert result_text(plain) == "answer to again"


async def test_a_failed_child_is_a_completed_task_with_an_error_result(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    async with tasks_client(home, fake_openai, tmp_path, errlog) as client:
        handle = await start(client, "doomed")
        done = await settled(client, handle.task_id)
        child = await child_id(client)
    assert done.status == "completed" and done.error is None
    result = CallToolResult.model_validate(done.result)
    assert result.is_error
    assert result_text(result).startswith(f"session {child} failed: ")


async def test_bad_arguments_are_an_error_result_not_a_task(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    async with tasks_client(home, fake_openai, tmp_path, errlog) as client:
        bad = await client.session.call_tool(
            "run_session", {"session_type": "nope", "prompt": "x"}, allow_claimed=True)
        assert isinstance(bad, CallToolResult) and bad.is_error
        assert result_text(bad).startswith("unknown session_type nope; expected one of:")
        budget = await client.session.call_tool(
            "run_session", {"session_type": "default", "prompt": "x",
                            "budget": {"max_turns": 0}}, allow_claimed=True)
        assert isinstance(budget, CallToolResult)
        assert error(budget) == ("invalid arguments for run_session: "
                                 "budget.max_turns must be positive")
        # a well-formed budget is accepted (and enforced: tests/test_steer_mcp.py)
        fine = await start(client, "budgeted", budget={"max_turns": 3, "max_tokens": None})
        assert (await settled(client, fine.task_id)).status == "completed"


async def test_cancelling_a_task_cancels_its_child(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("held")  # never opened
    async with tasks_client(home, fake_openai, tmp_path, errlog) as client:
        handle = await start(client, "held")
        await children.arrival("held").wait()
        child = await child_id(client)
        await cancel(client, handle.task_id)
        done = await settled(client, handle.task_id)
        assert done.status == "cancelled" and done.result is None
        await asyncio.wait_for(children.abandonment("held").wait(), 10)
        await eventually_ends(home, child, "turn_aborted")


# -- isolation, disconnects ----------------------------------------------------------------


async def test_another_connection_cannot_see_or_cancel_a_task(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gate = children.gate("mine")
    async with (tasks_client(home, fake_openai, tmp_path, errlog) as owner,
                tasks_client(home, fake_openai, tmp_path, errlog) as other):
        handle = await start(owner, "mine")
        for attempt in (get(other, handle.task_id), cancel(other, handle.task_id)):
            with pytest.raises(MCPError) as caught:
                await attempt
            assert caught.value.error.message == f"unknown task {handle.task_id}"
        assert (await get(owner, handle.task_id)).status == "working"
        gate.set()
        assert (await settled(owner, handle.task_id)).status == "completed"


async def test_a_client_that_disconnects_mid_task_has_its_child_cancelled(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("orphan")  # never opened
    async with tasks_client(home, fake_openai, tmp_path, errlog) as client:
        await start(client, "orphan")
        await children.arrival("orphan").wait()
        child = await child_id(client)
    await asyncio.wait_for(children.abandonment("orphan").wait(), 10)
    await eventually_ends(home, child, "turn_aborted")


# -- without tasks: blocking, with progress -----------------------------------------------


async def test_without_tasks_run_session_blocks_and_reports_progress(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    """The 2025-11-25 handshake client (no tasks there): progress, then the answer."""
    gate = children.gate("slow")
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        gate.set()

    async with connect(home, fake_openai, tmp_path, errlog) as session:
        assert session.initialize_result is not None
        assert session.initialize_result.protocol_version != "2026-07-28"
        result = await session.call_tool("run_session", {"session_type": "default",
                                                         "prompt": "slow"},
                                         progress_callback=on_progress)
    assert result_text(result) == "answer to slow" and not result.is_error
    assert seen and re.fullmatch(r"[0-9a-f-]{36}: running, [01] turns", seen[0] or "")


async def test_a_2026_client_without_the_extension_gets_the_answer_itself(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    async with Client(server_params(home, fake_openai, tmp_path)) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.session.call_tool(
            "run_session", {"session_type": "default", "prompt": "direct"}, allow_claimed=True)
    assert isinstance(result, CallToolResult) and result_text(result) == "answer to direct"


async def test_over_http_run_session_blocks_and_ends_with_the_session(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("held")  # never opened
    async with http_server(home, fake_openai, tmp_path) as (url, _proc):
        async with Client(url) as client:
            done = await client.call_tool("run_session", {"session_type": "default",
                                                          "prompt": "quick"})
            assert result_text(done) == "answer to quick"
            call = asyncio.ensure_future(client.call_tool(
                "run_session", {"session_type": "default", "prompt": "held"}))
            await children.arrival("held").wait()
            listed = (await client.call_tool("list_sessions", {})).structured_content or {}
            held = [s["session_id"] for s in listed["sessions"] if s["status"] == "running"]
            call.cancel()  # the client gives up on the call, then ends its session (DELETE)
            with pytest.raises(asyncio.CancelledError):
                await call
        await asyncio.wait_for(children.abandonment("held").wait(), 10)
        await eventually_ends(home, held[0], "turn_aborted")
