"""SIGTERM to `subsessions mcp` (stdio): the tree is cancelled, every process the engine
started for tools is gone, the rollouts end with `turn_aborted`, and the exit code is 143.

Driven by the official MCP client; `subsessions mcp` runs under `sh`, which records its
exit code (the SDK's stdio client does not expose the process)."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_support import create, ending, eventually_ends, server_args
from openai_support import REPO, cli_env, tool_outputs

from subsessions.rollouts import find_rollout, read_rollout
from subsessions.rollouts.summary import spawn_of

__all__ = ["fake_openai"]

TOOL_SERVER = REPO / "tests" / "mcp_tool_server.py"


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server-stderr.log").open("w+") as log:
        yield log


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while alive(pid):  # noqa: ASYNC110 (another process's end: no event to await)
            await asyncio.sleep(0.02)


def exit_code(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def write_config(home: Path) -> None:
    """One MCP tool server, whose `hang` tool never answers."""
    home.mkdir()
    (home / "config.toml").write_text(
        f'[mcp_servers.tools]\ncommand = "{sys.executable}"\nargs = ["{TOOL_SERVER}"]\n'
        "tool_timeout_ms = 3600000\n", encoding="utf-8")


async def test_sigterm_stops_tool_processes_and_exits_143(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, errlog: TextIO
) -> None:
    write_config(home)
    hanging = asyncio.Event()
    tool_pid: list[int] = []

    def script(request: Recorded) -> Reply:
        done = tool_outputs(request)
        if not done:
            return calls(call("mcp__tools__pid", {}))
        tool_pid.append(int(done[0]))
        hanging.set()
        return calls(call("mcp__tools__hang", {}))

    fake_openai.script = script
    code_file = tmp_path / "exit-code"
    command = " ".join(shlex.quote(a) for a in (sys.executable, *server_args(home, fake_openai)))
    params = StdioServerParameters(
        command="sh", args=["-c", f'{command}; echo $? > {shlex.quote(str(code_file))}'],
        cwd=str(tmp_path), env=cli_env())
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        child = await create(session, "hang in a tool")
        async with asyncio.timeout(30):
            await hanging.wait()
        parent_id = spawn_of(read_rollout(find_rollout(home, child)).meta)["parent"]
        server_pid = read_rollout(find_rollout(home, parent_id)).meta["pid"]
        [tools] = tool_pid
        assert alive(tools)
        os.kill(server_pid, signal.SIGTERM)  # stdin stays open: the signal alone ends it
        await eventually_ends(home, child, "turn_aborted")
        await gone(server_pid)
        with pytest.raises(MCPError, match="Connection closed"):
            await session.call_tool("list_sessions", {})
    try:
        await gone(tools)
    finally:
        if alive(tools):
            os.kill(tools, signal.SIGKILL)
    assert exit_code(code_file) == 128 + signal.SIGTERM
    assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}
