"""Budgets, `list_sessions` and `send_message` through `subsessions mcp` (a subprocess), with
the official `mcp` SDK client, the same as through the model tools and the Python API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TextIO

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp_support import Children, connect, create, ending, error, ok
from test_mcp_server import children, errlog

__all__ = ["children", "errlog", "fake_openai"]  # the fixtures


def limited(kind: str, limit: float) -> dict[str, object]:
    return {"kind": kind, "max": limit}


async def test_budgets_over_mcp_stop_children_with_the_design_texts(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("slow")
    children.gate("slower")
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        bad = await session.call_tool("create_session", {
            "session_type": "default", "prompt": "x", "budget": {"max_tokens": 0}})
        assert error(bad) == "invalid arguments for create_session: budget.max_tokens must " \
            "be positive"
        bad = await session.call_tool("create_session", {
            "session_type": "default", "prompt": "x", "budget": "lots"})
        assert error(bad) == "invalid arguments for create_session: budget must be an " \
            "object or null"
        child = ok(await session.call_tool("create_session", {
            "session_type": "default", "prompt": "slow",
            "budget": {"max_seconds": 0.5, "max_turns": None}}))["session_id"]
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 20_000})
        assert error(waited) == (
            f"session {child} failed: budget exhausted: seconds limit 0.5 reached")
        [entry] = ok(await session.call_tool("list_sessions", {}))["sessions"]
        assert (entry["session_id"], entry["status"]) == (child, "failed")
        assert entry["error"] == "budget exhausted: seconds limit 0.5 reached"
        assert entry["seconds"] >= 0.5 and entry["usage"]["turns"] == 1
        run = await session.call_tool("run_session", {
            "session_type": "default", "prompt": "slower", "budget": {"max_seconds": 0.3}})
        assert error(run).endswith("failed: budget exhausted: seconds limit 0.3 reached")
        await asyncio.wait_for(children.abandonment("slow").wait(), 5)  # its call was cancelled
    assert ending(home, child)["reason"] == "budget_limited"
    assert ending(home, child)["limit"] == limited("seconds", 0.5)


async def test_send_message_over_mcp_queues_then_follows_up(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gate = children.gate("draft")
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "draft")
        await children.arrival("draft").wait()
        sent = await session.call_tool("send_message", {"session_id": child,
                                                        "message": "shorter please"})
        assert ok(sent) == {"delivered": "queued"}
        assert sent.structured_content == {"delivered": "queued"}
        gate.set()
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 20_000})
        assert ok(waited) == {"result": "answer to shorter please"}
        again = await session.call_tool("send_message", {"session_id": child,
                                                         "message": "and a title"})
        assert ok(again) == {"delivered": "started"}
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 20_000})
        assert ok(waited) == {"result": "answer to and a title"}
        [entry] = ok(await session.call_tool("list_sessions", {}))["sessions"]
        assert entry["status"] == "completed" and entry["usage"]["turns"] == 3
        assert entry["last_message"] == "answer to and a title"
        stranger = "01a1fe74-0553-7695-8454-1cc819fc49e4"
        for bad in (stranger, "../x"):
            refused = await session.call_tool("send_message", {"session_id": bad,
                                                               "message": "hi"})
            assert error(refused) == f"unknown session {bad}"
        empty = await session.call_tool("send_message", {"session_id": child, "message": ""})
        assert error(empty) == "invalid arguments for send_message: message must not be empty"
    assert ending(home, child) == {"type": "task_complete",
                                   "last_agent_message": "answer to and a title"}
