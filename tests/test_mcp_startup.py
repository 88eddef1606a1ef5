"""`subsessions mcp` answers the handshake and `tools/list` before it builds its engine (see
`subsessions.mcp.front`), and what a host sees is the same as if it had waited: the same
capabilities and instructions, a complete tool list right after `initialize` (even while the
engine's imports are held), tools that work, and a one-line error (exit 1) when the engine
cannot be built. How fast it answers is `bench/mcp_startup.py`'s and
`bench/mcp_tools_list.py`'s figure, not a timed assertion."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

import orjson
from fake_openai import FakeOpenAI, fake_openai
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import Children, connect, ok, result_text, server_args, server_params
from openai_support import cli_env

from subsessions import Engine, ScriptedModel
from subsessions.mcp.app import SubsessionsMcp
from subsessions.mcp.catalog import TOOL_NAMES, Catalog
from subsessions.mcp.front import BUILD_GRACE, FORWARDED, Deferred, front_server
from subsessions.settings import Settings

__all__ = ["fake_openai"]

HELD = str(Path(__file__).with_name("held_imports.py"))

# Every request method of the spec's that a server may serve (beyond the handshake's own).
METHODS = (*FORWARDED, "tools/list", "ping", "prompts/list", "prompts/get", "resources/subscribe",
           "resources/unsubscribe", "logging/setLevel", "completion/complete",
           "server/discover")


async def test_the_front_answers_the_handshake_exactly_as_the_app_would(home: Path) -> None:
    async with Engine(home, model_client=ScriptedModel(lambda request: ["ok"])) as engine:
        app = SubsessionsMcp(engine, Settings(), http=False)

        async def build() -> SubsessionsMcp:
            return app

        front = front_server(Deferred(build), Catalog(home).tools)
        assert (front.create_initialization_options().model_dump()
                == app.server.create_initialization_options().model_dump())
        assert (Catalog(home).tools().tools == app.tool_definitions())
        for method in METHODS:
            ours, theirs = front.get_request_handler(method), app.server.get_request_handler(method)
            assert (ours is None) == (theirs is None), method
            if ours is not None and theirs is not None and method != "ping":
                assert ours.params_type is theirs.params_type, method
        assert app.stdio_client is not None
        await app.stdio_client.close()


async def _building(home: Path) -> tuple[Deferred[Any], asyncio.Event]:
    """A front whose build says when it starts, then never ends (stopped at the test's end)."""
    started = asyncio.Event()

    async def build() -> SubsessionsMcp:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return Deferred(build), started


async def test_the_engine_is_built_once_the_tool_list_is_answered_not_beside_it(
    home: Path
) -> None:
    """Its imports would hold the GIL while `tools/list` is answered: on a loaded machine
    that answer then missed the Codex CLI's one-second grace."""
    deferred, started = await _building(home)
    try:
        async with Client(front_server(deferred, Catalog(home).tools), mode="legacy") as client:
            with pytest.raises(MCPError, match="not found"):  # a round trip after the
                await client.list_prompts()  # `notifications/initialized` (prompts: none)
            assert not started.is_set()
            assert [tool.name for tool in (await client.list_tools()).tools] == list(TOOL_NAMES)
            async with asyncio.timeout(10):
                await started.wait()
    finally:
        await deferred.stop()


async def test_a_host_that_lists_no_tools_gets_the_engine_built_all_the_same(
    home: Path
) -> None:
    deferred, started = await _building(home)
    try:
        async with Client(front_server(deferred, Catalog(home).tools), mode="legacy"):
            async with asyncio.timeout(10 + BUILD_GRACE):
                await started.wait()
    finally:
        await deferred.stop()


def test_starting_the_mcp_command_imports_neither_engine_nor_model_client() -> None:
    """What runs before `initialize` is answered: the CLI, the front, the SDK; the rest
    (the engine, the openai SDK, Ray, the tools) is imported once the host has its answer."""
    probe = ("import sys, subsessions.cli, subsessions.mcp.front, subsessions.mcp.server\n"
             "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    heavy = ("subsessions.engine.facade", "subsessions._core.session", "subsessions.mcp.app",
             "subsessions.tools", "subsessions.rollouts.reader", "openai", "ray")
    assert not [name for name in heavy if name in loaded]


def test_the_docs_name_exactly_the_tools_served() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "guides" / "mcp.md"
    section = page.read_text(encoding="utf-8").split("\n## Serve\n", 1)[1]
    sentence = section.split("to any MCP host", 1)[0]
    assert sentence.startswith("\n`subsessions mcp` serves ")
    assert re.findall(r"`(\w+)`", sentence) == list(TOOL_NAMES)


def test_listing_the_tools_imports_neither_engine_nor_model_client(home: Path) -> None:
    """What `tools/list` is answered from: the profiles and the tool schemas."""
    probe = ("import sys\nfrom pathlib import Path\nfrom subsessions.mcp.catalog import Catalog\n"
             f"assert len(Catalog(Path({str(home)!r})).tools().tools) == 8\n"
             "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    heavy = ("subsessions.engine.facade", "subsessions._core.session", "subsessions.mcp.app",
             "subsessions.models.openai_chat", "openai", "ray")
    assert not [name for name in heavy if name in loaded]


async def test_the_tools_are_listed_while_the_engine_is_still_being_built(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """`initialize`, `initialized` and `tools/list` written at once, as a host does, while
    the process's import of the openai SDK (which its engine needs) is held: the tool list
    is complete all the same. Let go, the engine is built and a tool works."""
    fake_openai.script = Children()
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, HELD, str(fifo), "openai,ray", *server_args(home, fake_openai),
        cwd=tmp_path, env=cli_env(), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def answer(wanted: int) -> dict[str, Any]:
        assert proc.stdout is not None
        while True:
            message = orjson.loads(await proc.stdout.readline())
            if message.get("id") == wanted:
                return dict(message)

    try:
        proc.stdin.write(b"".join(orjson.dumps(r) + b"\n" for r in _burst()))
        await proc.stdin.drain()
        async with asyncio.timeout(30):
            listed = await answer(2)
            tools = listed["result"]["tools"]
            assert [tool["name"] for tool in tools] == list(TOOL_NAMES)
            run = next(tool for tool in tools if tool["name"] == "run_session")
            assert {"default", "tester"} <= set(
                run["inputSchema"]["properties"]["session_type"]["enum"])
            while not (await proc.stderr.readline()).startswith(b"held: openai"):
                pass  # the build is under way, and stuck there until let go
            await asyncio.to_thread(fifo.write_bytes, b"")
            proc.stdin.write(orjson.dumps({
                "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                    "name": "run_session",
                    "arguments": {"session_type": "default", "prompt": "first"}}}) + b"\n")
            await proc.stdin.drain()
            called = await answer(3)
            assert called["result"]["content"][0]["text"] == "answer to first", called
            proc.stdin.close()
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.communicate()  # every pipe closed


def _burst() -> list[dict[str, Any]]:
    """What a host writes as it starts its server, all at once here."""
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]


async def test_right_after_initialize_the_tool_list_is_complete_and_a_tool_works(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Children()
    with tempfile.TemporaryFile("w+") as errlog:
        async with connect(home, fake_openai, tmp_path, errlog) as session:
            tools = (await session.list_tools()).tools  # sent at once, the engine still cold
            assert [tool.name for tool in tools] == sorted(TOOL_NAMES, key=TOOL_NAMES.index)
            run = next(tool for tool in tools if tool.name == "run_session")
            profiles = run.input_schema["properties"]["session_type"]["enum"]
            assert {"default", "tester", "mathematician"} <= set(profiles)
            answer = await session.call_tool("run_session", {
                "session_type": "default", "prompt": "first"})
            assert result_text(answer) == "answer to first"
            listed = ok(await session.call_tool("list_sessions", {}))
            assert [entry["status"] for entry in listed["sessions"]] == ["completed"]


async def test_an_engine_that_cannot_be_built_is_told_to_the_host_and_exits_1(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Here the home is writable by everyone: refused, as before the handshake came first,
    but now after it: each request is told why, stderr has it in one line, and the process
    ends with 1 when the host closes stdin."""
    os.mkdir(home, 0o700)
    os.chmod(home, 0o777)
    params = server_params(home, fake_openai, tmp_path)
    proc = await asyncio.create_subprocess_exec(
        params.command, *params.args, cwd=params.cwd, env=cli_env(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    requests = [
        *_burst(),
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "list_sessions", "arguments": {}}},
    ]
    proc.stdin.write(b"".join(orjson.dumps(r) + b"\n" for r in requests))
    await proc.stdin.drain()
    answers = {}
    async with asyncio.timeout(60):
        while len(answers) < 3:
            message = orjson.loads(await proc.stdout.readline())
            answers[message["id"]] = message
        proc.stdin.close()
        _, err = await proc.communicate()
    assert answers[1]["result"]["serverInfo"]["name"] == "subsessions"
    for number in (2, 3):
        assert "could not start" in answers[number]["error"]["message"], answers[number]
        assert "writable by other users" in answers[number]["error"]["message"]
    [line] = err.decode().splitlines()
    assert line.startswith("subsessions: ") and "writable by other users" in line, line
    assert proc.returncode == 1
