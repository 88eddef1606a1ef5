"""Claude Code (2.1, npm) as the MCP host of `subsessions mcp`, its model a loopback fake of
the Messages API (tests/fake_anthropic.py) and the children's model the loopback OpenAI fake.

First turn included: Claude Code's first Messages request lists our tools (as
`mcp__subsessions__*`); the model calls one and the tool's result reaches its next request.
And Claude Code, which subscribes to resource list changes, is told of a child's
`rollout://` transcript once the child is there.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from claude_code import claude_binary, run_claude
from fake_anthropic import FakeAnthropic, Recorded, Turn
from fake_openai import FakeOpenAI, fake_openai
from mcp_support import Children, server_args
from openai_support import cli_env

from subsessions.mcp.catalog import TOOL_NAMES

__all__ = ["fake_openai"]  # the fixture

OURS = [f"mcp__subsessions__{name}" for name in TOOL_NAMES]
TAP = Path(__file__).resolve().parents[1] / "stdio_tap.py"


@pytest.fixture(scope="module")
def claude() -> Path:
    """The Claude Code binary (npm-installed into the cache on first use; skipped without npm)."""
    return claude_binary()


def _servers(home: Path, fake: FakeOpenAI) -> dict[str, Any]:
    """`subsessions mcp` as any user's `.mcp.json` names it (the repository importable)."""
    return {"subsessions": {"command": sys.executable, "args": server_args(home, fake),
                            "env": {"PYTHONPATH": cli_env()["PYTHONPATH"]}}}


async def _told(wire: Path, timeout: float = 30.0) -> None:
    """Until the recording has the server's `notifications/resources/list_changed` (another
    process is writing it)."""
    async with asyncio.timeout(timeout):
        while not _notified(wire):  # noqa: ASYNC110 (a file another process writes)
            await asyncio.sleep(0.02)


def _notified(wire: Path) -> bool:
    return wire.exists() and "notifications/resources/list_changed" in wire.read_text(
        encoding="utf-8")


def _result(request: Recorded) -> str:
    """The text of the first call's result in a request."""
    result = request.tool_results()[0]
    content = result.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content)


async def test_claude_code_lists_and_calls_our_tools_from_its_first_turn(
    claude: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script = Children()

    def model(request: Recorded) -> Turn:
        if not request.tool_results():
            return Turn(calls=(("mcp__subsessions__run_session",
                                {"session_type": "default", "prompt": "count to three"}),))
        return Turn(text=f"the child said: {json.loads(_result(request))['result']}")

    async with FakeAnthropic(model) as fake:
        status, result, err = await run_claude(
            claude, tmp_path / "claude", fake.base_url, _servers(tmp_path / "ours", fake_openai),
            "Ask a sub-session to count to three.", allowed="mcp__subsessions",
            cwd=tmp_path)
    assert status == 0, (result, err)
    assert not fake.script_errors and not fake.unknown
    first, second = fake.turns
    assert set(OURS) <= set(first.tool_names)
    assert json.loads(_result(second))["result"] == "answer to count to three"
    assert result["result"] == "the child said: answer to count to three"


async def test_claude_code_is_told_when_a_childs_rollout_appears(
    claude: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Claude Code opens a 2026-07-28 `subscriptions/listen` stream asking for
    `resourcesListChanged`: it is honored, and once the model's `create_session` has started
    a child, `notifications/resources/list_changed` comes on that stream (the official SDK
    client then lists the child's `rollout://`: tests/test_mcp_list_changed.py). What passes
    between the two is recorded by tests/stdio_tap.py: Claude Code 2.1.332 run with `-p`
    shows none of it (its print mode does not refetch resources on the notification)."""
    fake_openai.script = Children()
    wire = tmp_path / "wire.jsonl"
    servers = _servers(tmp_path / "ours", fake_openai)
    ours = servers["subsessions"]
    ours["args"] = [str(TAP), str(wire), "--", ours["command"], *ours["args"]]
    ours["command"] = sys.executable

    async def model(request: Recorded) -> Turn:
        if not request.tool_results():
            return Turn(calls=(("mcp__subsessions__create_session",
                                {"session_type": "default", "prompt": "work"}),))
        await _told(wire)  # the turn ends (and Claude Code with it) once it has been told
        return Turn(text="started")

    async with FakeAnthropic(model) as fake:
        status, result, err = await run_claude(
            claude, tmp_path / "claude", fake.base_url, servers, "Start a sub-session.",
            allowed="mcp__subsessions", cwd=tmp_path)
    assert status == 0, (result, err)
    assert not fake.script_errors and not fake.unknown
    lines = [json.loads(record) for record in wire.read_text(encoding="utf-8").splitlines()]
    said = [(line["from"], json.loads(line["line"])) for line in lines]
    [listen] = [m for side, m in said if side == "host" and m.get("method") ==
                "subscriptions/listen" and m["params"]["notifications"].get(
                    "resourcesListChanged")]
    stream = {"io.modelcontextprotocol/subscriptionId": listen["id"]}
    [ack] = [m for side, m in said if m.get("method") ==
             "notifications/subscriptions/acknowledged" and m["params"]["_meta"] == stream]
    assert ack["params"]["notifications"] == {"resourcesListChanged": True}
    [created] = [index for index, (side, m) in enumerate(said) if side == "server"
                 and "session_id" in str(m.get("result", {}).get("structuredContent"))]
    told = [m for side, m in said[created:] if m.get("method") ==
            "notifications/resources/list_changed"]
    assert told and told[0]["params"]["_meta"] == stream
