"""`subsessions mcp` driven by the official MCP client over stdio (and streamable HTTP),
as a real subprocess whose children are answered by the loopback fake OpenAI server."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client
from mcp.client.stdio import PROCESS_TERMINATION_TIMEOUT
from mcp.shared.exceptions import MCPError
from mcp_support import (
    Children,
    connect,
    create,
    ending,
    error,
    eventually_ends,
    http_server,
    ok,
    server_args,
    server_params,
)

from subsessions._core.tool_calls.subsessions import SCHEMAS, create_schema, run_schema
from subsessions.mcp.app import LIST_SCHEMA
from subsessions.mcp.server import (
    check_http_host,
    is_loopback_host,
    parse_http_address,
)
from subsessions.rollouts import find_rollout, read_rollout
from subsessions.rollouts.summary import spawn_of

__all__ = ["fake_openai"]

PROFILES = ["default", "linter_fixer", "mathematician", "tester"]  # the built-ins, sorted
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}")
PROGRESS = re.compile(r"(?P<id>[0-9a-f-]{36}): (?P<status>\w+), (?P<turns>\d+) turns")


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """The server's stderr, shown when a test fails."""
    path = tmp_path / "server-stderr.log"
    with path.open("w+") as log:
        yield log
    text = path.read_text()
    if text.strip():
        print(f"--- subsessions mcp stderr ---\n{text}")


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


def parse_progress(message: str | None) -> dict[str, tuple[str, int]]:
    return {m["id"]: (m["status"], int(m["turns"])) for m in PROGRESS.finditer(message or "")}


# -- tools --------------------------------------------------------------------------------


async def test_lists_the_five_tools_with_the_function_tool_schemas(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, errlog: TextIO
) -> None:
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        info = session.initialize_result
        assert info is not None and info.server_info.name == "subsessions"
        assert info.capabilities.tools is not None and info.capabilities.resources is not None
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert list(listed) == ["create_session", "wait_session", "wait_sessions",
                            "cancel_session", "run_session", "run_sessions", "list_sessions",
                            "send_message"]
    run = listed.pop("run_session").input_schema  # `budget` may be omitted (DESIGN 3.1)
    assert listed.pop("run_sessions").input_schema == run_schema(PROFILES)
    assert run["required"] == ["session_type", "prompt"] and "budget" in run["properties"]
    create = listed.pop("create_session")
    assert create.input_schema == {  # `budget` may be omitted
        **create_schema(PROFILES), "required": ["session_type", "prompt"]}
    assert listed["send_message"].input_schema == SCHEMAS["send_message"]
    for name in ("wait_session", "wait_sessions", "cancel_session"):
        assert listed[name].input_schema == SCHEMAS[name]
    assert listed["list_sessions"].input_schema == LIST_SCHEMA
    for tool in listed.values():
        schema = tool.input_schema
        assert schema["additionalProperties"] is False
        assert sorted(schema.get("required", [])) == sorted(schema["properties"])
        assert tool.description
    assert "- tester: " in (create.description or "")


async def test_create_then_wait(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        result = await session.call_tool("create_session",
                                         {"session_type": "tester", "prompt": "write tests"})
        child = ok(result)["session_id"]
        assert UUID.fullmatch(child)
        assert result.structured_content == {"session_id": child}
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 10_000})
        assert ok(waited) == {"result": "answer to write tests"}
        listed = ok(await session.call_tool("list_sessions", {}))
    [entry] = listed["sessions"]
    assert entry["session_id"] == child
    assert entry["session_type"] == "tester"
    assert entry["status"] == "completed" and entry["last_message"] == "answer to write tests"
    assert entry["usage"]["turns"] == 1 and entry["model"] == "m"
    assert entry["usage"]["total_tokens"] > 0 and entry["seconds"] >= 0
    assert entry["rollout"] == f"rollout://{child}"
    rollout = read_rollout(find_rollout(home, child))
    spawn = spawn_of(rollout.meta)
    assert rollout.meta["session_type"] == "tester" and spawn["depth"] == 1
    parent = read_rollout(find_rollout(home, spawn["parent"]))
    assert parent.meta["source"] == "mcp"
    assert ending(home, child) == {"type": "task_complete",
                                   "last_agent_message": "answer to write tests"}


async def test_the_2026_protocol_era_is_served_on_stdio(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    """The high-level client probes server/discover first and speaks 2026-07-28."""
    gate = children.gate("modern")
    async with Client(server_params(home, fake_openai, tmp_path)) as client:
        assert client.protocol_version == "2026-07-28"
        child = ok(await client.call_tool("create_session", {"session_type": "default",
                                                             "prompt": "modern"}))["session_id"]
        seen: list[str | None] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message)
            gate.set()

        waited = await client.call_tool("wait_session", {"session_id": child,
                                                         "timeout_ms": 10_000},
                                        progress_callback=on_progress)
        assert ok(waited) == {"result": "answer to modern"}
        assert parse_progress(seen[0])[child][0] == "running"
        assert ok(await client.call_tool("list_sessions", {}))["sessions"][0]["session_id"] == child


async def test_wait_sends_progress_with_status_and_turns(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gate = children.gate("slow")
    values: list[float] = []
    seen: list[dict[str, tuple[str, int]]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        values.append(progress)
        seen.append(parse_progress(message))
        if seen[-1].get(child) == ("running", 1):
            gate.set()  # the child is in its first model call: let it answer

    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "slow")
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 10_000},
                                         progress_callback=on_progress)
    assert ok(waited) == {"result": "answer to slow"}
    assert gate.is_set(), "no progress notification said the child was in its first turn"
    assert seen[0][child][0] == "running"
    assert values == sorted(set(values)), "progress must grow with every notification"


async def test_wait_sessions_any_then_all(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gates = {prompt: children.gate(prompt) for prompt in ("first", "second")}
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        first = await create(session, "first")
        second = await create(session, "second", "mathematician")
        seen: list[dict[str, tuple[str, int]]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(parse_progress(message))
            if seen[-1] == {first: ("running", 1), second: ("running", 1)}:
                gates["first"].set()  # both are in their first model call: one may end
            if seen[-1].get(first, ("",))[0] == "completed":
                gates["second"].set()

        anyone = ok(await session.call_tool("wait_sessions", {
            "session_ids": [first, second], "timeout_ms": 10_000, "mode": "any"},
            progress_callback=on_progress))
        assert anyone == {"results": {first: {"status": "completed", "result": "answer to first"},
                                      second: {"status": "running"}},
                          "timed_out": False}
        everyone = ok(await session.call_tool("wait_sessions", {
            "session_ids": [first, second], "timeout_ms": 10_000, "mode": "all"},
            progress_callback=on_progress))
    assert everyone == {"results": {first: {"status": "completed", "result": "answer to first"},
                                    second: {"status": "completed", "result": "answer to second"}},
                        "timed_out": False}
    assert {first: ("completed", 1), second: ("running", 1)} in seen


async def test_cancel(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("never")  # never opened: the child waits on its model until cancelled
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "never")
        await children.arrival("never").wait()
        assert ok(await session.call_tool("cancel_session", {"session_id": child})) == {
            "cancelled": True}
        assert ok(await session.call_tool("cancel_session", {"session_id": child})) == {
            "cancelled": False}
        waited = await session.call_tool("wait_session", {"session_id": child, "timeout_ms": 0})
        assert error(waited) == f"session {child} was cancelled"
        listed = ok(await session.call_tool("list_sessions", {}))["sessions"]
        assert listed[0]["status"] == "cancelled"
        assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}
    await asyncio.wait_for(children.abandonment("never").wait(), 5)


async def test_errors_are_tool_results_with_the_design_texts(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    stranger = "01a1fe74-0553-7695-8454-1cc819fc49e4"
    children.gate("held")
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        async def call(name: str, arguments: dict[str, Any]) -> str:
            return error(await session.call_tool(name, arguments))

        assert await call("wait_session", {"session_id": stranger, "timeout_ms": 10}) == (
            f"unknown session {stranger}")
        assert await call("cancel_session", {"session_id": "not-an-id"}) == (
            "unknown session not-an-id")
        assert await call("wait_session", {"session_id": "../etc", "timeout_ms": 1}) == (
            "unknown session ../etc")
        assert await call("wait_session", {"session_id": stranger}) == (
            "invalid arguments for wait_session: missing required field timeout_ms")
        assert await call("wait_session", {"session_id": stranger, "timeout_ms": "soon"}) == (
            "invalid arguments for wait_session: timeout_ms must be an integer, not string")
        assert await call("create_session", {"session_type": "poet", "prompt": "x"}) == (
            f"unknown session_type poet; expected one of: {', '.join(PROFILES)}")
        assert await call("create_session", {"session_type": "default", "prompt": " "}) == (
            "invalid arguments for create_session: prompt must not be empty")
        assert await call("list_sessions", {"all": True}) == (
            "invalid arguments for list_sessions: unexpected field all")
        assert await call("wait_sessions", {"session_ids": [], "timeout_ms": 1,
                                            "mode": "any"}) == (
            "invalid arguments for wait_sessions: session_ids must not be empty")
        held = await create(session, "held")
        assert await call("wait_session", {"session_id": held, "timeout_ms": 0}) == (
            f"session {held} has not completed")
        assert await call("wait_session", {"session_id": held, "timeout_ms": 30}) == (
            f"session {held} did not complete within 30ms")
        with pytest.raises(MCPError, match="Unknown tool: list_profiles"):
            await session.call_tool("list_profiles", {})
        # the connection and the child are fine after all that
        children.gate("held").set()
        assert ok(await session.call_tool("wait_session", {"session_id": held,
                                                           "timeout_ms": 10_000})) == {
            "result": "answer to held"}


async def test_a_cancelled_wait_stops_waiting_and_the_child_runs_on(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    gate = children.gate("patient")
    waiting = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        waiting.set()

    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "patient")
        wait = asyncio.create_task(session.call_tool(
            "wait_session", {"session_id": child, "timeout_ms": 600_000},
            progress_callback=on_progress))
        await waiting.wait()  # the server is inside the wait
        wait.cancel()  # the client sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await wait
        listed = ok(await session.call_tool("list_sessions", {}))["sessions"]
        assert listed[0]["status"] == "running"
        gate.set()
        assert ok(await session.call_tool("wait_session", {"session_id": child,
                                                           "timeout_ms": 10_000})) == {
            "result": "answer to patient"}


async def test_disconnecting_aborts_the_connections_children(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    for prompt in ("one", "two"):
        children.gate(prompt)
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        first = await create(session, "one")
        second = await create(session, "two")
        await children.arrival("one").wait()
        await children.arrival("two").wait()
        parent_id = spawn_of(read_rollout(find_rollout(home, first)).meta)["parent"]
        pid = read_rollout(find_rollout(home, parent_id)).meta["pid"]
        started = time.monotonic()
    # the client closed the server's stdin and waited for it to exit
    elapsed = time.monotonic() - started
    assert elapsed < PROCESS_TERMINATION_TIMEOUT, "the server had to be killed"
    for child in (first, second):
        assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}
    messages = [r["payload"].get("message") for r in read_rollout(find_rollout(home, parent_id))
                .records if r["payload"].get("type") == "background_event"]
    assert f"child session {first} cancelled" in messages
    assert f"child session {second} cancelled" in messages
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    for prompt in ("one", "two"):  # their model requests were aborted too
        await asyncio.wait_for(children.abandonment(prompt).wait(), 5)


async def test_sigterm_closes_the_engine_first(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    children.gate("interrupted")
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "interrupted")
        await children.arrival("interrupted").wait()
        parent_id = spawn_of(read_rollout(find_rollout(home, child)).meta)["parent"]
        pid = read_rollout(find_rollout(home, parent_id)).meta["pid"]
        os.kill(pid, signal.SIGTERM)  # stdin stays open: the signal alone ends the server
        await eventually_ends(home, child, "turn_aborted")
        await exited(pid)
        with pytest.raises(MCPError, match="Connection closed"):
            await session.call_tool("list_sessions", {})
    assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}


async def exited(pid: int, timeout: float = 5.0) -> None:
    """Wait until the process is gone (and reaped)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await asyncio.sleep(0.02)


# -- resources ----------------------------------------------------------------------------


async def test_rollouts_are_resources(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        assert (await session.list_resources()).resources == []
        child = await create(session, "tell a story", "mathematician")
        ok(await session.call_tool("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        listed = {str(r.uri): r for r in (await session.list_resources()).resources}
        assert f"rollout://{child}" in listed and len(listed) == 2  # the parent and the child
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["rollout://{session_id}"]
        read = await session.read_resource(f"rollout://{child}")
        [contents] = read.contents
        assert contents.mime_type == "text/plain"
        transcript = getattr(contents, "text", "")
        with pytest.raises(MCPError, match="unknown session"):
            await session.read_resource("rollout://01a1fe74-0553-7695-8454-1cc819fc49e4")
        with pytest.raises(MCPError):
            await session.read_resource("rollout://../../etc/passwd")
    assert transcript.startswith(f"session {child}\ntype: mathematician\n")
    assert "status: completed" in transcript
    assert "[user]\ntell a story\n[assistant]\nanswer to tell a story\n" in transcript
    assert transcript.rstrip().endswith("--- task complete ---")


# -- HTTP ---------------------------------------------------------------------------------


def test_http_address_parsing_and_the_loopback_rule() -> None:
    assert parse_http_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_http_address("[::1]:0") == ("::1", 0)
    assert parse_http_address("localhost:80") == ("localhost", 80)
    for bad in ("8765", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(Exception, match="is not HOST:PORT"):
            parse_http_address(bad)
    assert is_loopback_host("127.0.0.2") and is_loopback_host("::1")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("example.com")
    check_http_host("0.0.0.0", allow_remote=True)
    with pytest.raises(Exception, match=r"refusing to listen on 0\.0\.0\.0"):
        check_http_host("0.0.0.0", allow_remote=False)


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_http_refuses_a_non_loopback_host(home: Path, fake_openai: FakeOpenAI) -> None:
    code, err = await run_cli(*server_args(home, fake_openai, "--http", "0.0.0.0:0"))
    assert code == 1
    assert err.startswith("subsessions: command line: --http: refusing to listen on 0.0.0.0")
    assert "SUBSESSIONS_MCP_ALLOW_REMOTE" in err and err.count("\n") == 1
    code, err = await run_cli(*server_args(home, fake_openai, "--http", "nowhere"))
    assert code == 1 and "is not HOST:PORT" in err


async def test_the_printed_url_can_be_dialled_at_once(
    home: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """A host dials the URL the moment it reads it: the socket listens by then, even while the
    server is still starting (stopped here with SIGSTOP the moment the line is read, the
    kernel completes the handshake from the listen backlog; before, this was refused)."""
    async with http_server(home, fake_openai, tmp_path) as (url, proc):
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            found = re.search(r"//([^/]+):(\d+)/", url)
            assert found, url
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(found[1], int(found[2])), 10)
            writer.close()
            await writer.wait_closed()
        finally:
            os.kill(proc.pid, signal.SIGCONT)


async def test_streamable_http(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    async with http_server(home, fake_openai, tmp_path) as (url, proc):
        children.gate("held over http")
        # mode="auto" probes server/discover; over HTTP the server declines it, so the
        # client falls back to the (stateful) handshake and gets one MCP session
        async with Client(url) as client:
            assert client.protocol_version != "2026-07-28"
            done = ok(await client.call_tool("create_session", {
                "session_type": "default", "prompt": "quick"}))["session_id"]
            assert ok(await client.call_tool("wait_session", {
                "session_id": done, "timeout_ms": 10_000})) == {"result": "answer to quick"}
            held = ok(await client.call_tool("create_session", {
                "session_type": "default", "prompt": "held over http"}))["session_id"]
            await children.arrival("held over http").wait()
            async with Client(url) as other:  # another connection: other children
                assert ok(await other.call_tool("list_sessions", {})) == {"sessions": []}
                assert error(await other.call_tool("cancel_session", {"session_id": held})) == (
                    f"unknown session {held}")
        # the client ended its MCP session (DELETE): its running child is aborted
        await eventually_ends(home, held, "turn_aborted")
        async with Client(url, mode="2026-07-28") as stateless:
            with pytest.raises(MCPError, match="keeps sub-sessions per connection"):
                await stateless.call_tool("list_sessions", {})
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 128 + signal.SIGTERM
