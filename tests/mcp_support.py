"""Helpers for the MCP tests: `subsessions mcp` launched with the official client, and a
fake model that answers each child by its prompt (at once, or once a gate opens)."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import orjson
from fake_openai import FakeOpenAI
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent
from openai_support import ByPrompt, cli_env

from subsessions.rollouts import find_rollout, read_rollout
from subsessions.testing import plain_ending


class Children(ByPrompt):
    """The fake model's script: `answer to {prompt}`, after the prompt's gate opens."""


def server_args(home: Path, fake: FakeOpenAI, *extra: str) -> list[str]:
    return ["-m", "subsessions", "mcp", "--home", str(home), "--base-url", fake.base_url,
            "--wire-api", "chat", "--model", "m", *extra]


@asynccontextmanager
async def http_server(
    home: Path, fake: FakeOpenAI, cwd: Path, *extra: str
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """`subsessions mcp --http 127.0.0.1:0 EXTRA` as a subprocess: its URL, and the process."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *server_args(home, fake, "--http", "127.0.0.1:0", *extra),
        cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        found = re.search(r"http://\S+/mcp", line)
        assert found, line
        yield found[0], proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def server_params(home: Path, fake: FakeOpenAI, cwd: Path) -> StdioServerParameters:
    """The server as the CLI tests run it: this checkout importable whether or not it is
    installed (the SDK's default environment would drop PYTHONPATH)."""
    return StdioServerParameters(command=sys.executable, args=server_args(home, fake),
                                 cwd=str(cwd), env=cli_env())


@asynccontextmanager
async def connect(
    home: Path, fake: FakeOpenAI, cwd: Path, errlog: TextIO
) -> AsyncIterator[ClientSession]:
    """`subsessions mcp` as a subprocess, an initialized `ClientSession` on its stdio."""
    async with (
        stdio_client(server_params(home, fake, cwd), errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def result_text(result: CallToolResult) -> str:
    parts = [c.text for c in result.content if isinstance(c, TextContent)]
    return "".join(parts)


def ok(result: CallToolResult) -> Any:
    """The JSON a successful tool call returned."""
    assert not result.is_error, result_text(result)
    return orjson.loads(result_text(result))


def error(result: CallToolResult) -> str:
    """The error text of a tool call that failed."""
    assert result.is_error, result_text(result)
    return result_text(result)


async def create(session: ClientSession, prompt: str, session_type: str = "default") -> str:
    result = await session.call_tool("create_session",
                                     {"session_type": session_type, "prompt": prompt})
    child_id: str = ok(result)["session_id"]
    return child_id


def ending(home: Path, session_id: str) -> dict[str, Any]:
    """The last event of a session's rollout as it is on disk."""
    rollout = read_rollout(find_rollout(home, session_id))
    events = [r["payload"] for r in rollout.records if r.get("type") == "event_msg"]
    return plain_ending(events[-1]) if events else {}


async def eventually_ends(home: Path, session_id: str, kind: str, timeout: float = 5.0) -> None:
    """Wait until the rollout's last event is `kind` (another process is writing it)."""
    async with asyncio.timeout(timeout):
        while ending(home, session_id).get("type") != kind:  # noqa: ASYNC110 (a file)
            await asyncio.sleep(0.02)
