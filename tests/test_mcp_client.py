"""McpServers: MCP servers (real subprocesses, the official SDK on both sides) as tool sources."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai, text
from mcp_support import http_server

from subsessions import Engine, Profile, ScriptedModel, SessionConfig
from subsessions.config import Invocation, Tool
from subsessions.errors import ConfigError, SubsessionError
from subsessions.models.base import ModelRequest
from subsessions.tools.mcp.client import McpServers, McpToolError, tool_name
from subsessions.tools.mcp.config import McpServerConfig, parse_mcp_servers

__all__ = ["fake_openai"]

SERVER = str(Path(__file__).with_name("mcp_tool_server.py"))


def tool_server(*args: str, **options: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *args], **options}


@asynccontextmanager
async def servers(tables: Mapping[str, Any]) -> AsyncIterator[McpServers]:
    running = McpServers(tables, source="test.toml")
    try:
        yield running
    finally:
        await running.aclose()


async def call(tools: tuple[Tool, ...], name: str, **arguments: Any) -> Any:
    [tool] = [t for t in tools if t.name == name]
    assert tool.handler is not None
    return await tool.handler(arguments, Invocation("s", "call_1", name))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- configuration ------------------------------------------------------------------------


def test_server_tables_are_checked() -> None:
    parsed = parse_mcp_servers({
        "local": {"command": "npx", "args": ["-y", "pkg"], "env": {"A": "1"}, "cwd": "/tmp",
                  "tool_timeout_ms": 5},
        "remote": {"url": "http://127.0.0.1:9000/mcp", "startup_timeout_ms": 2000},
    })
    assert parsed == (
        McpServerConfig("local", command="npx", args=("-y", "pkg"), env={"A": "1"},
                        cwd="/tmp", tool_timeout_ms=5),
        McpServerConfig("remote", url="http://127.0.0.1:9000/mcp", startup_timeout_ms=2000),
    )
    assert parsed[1].tool_timeout_ms == 60_000 and parsed[0].startup_timeout_ms == 10_000


@pytest.mark.parametrize(("tables", "key", "problem"), [
    ({"s": "npx"}, "mcp_servers.s", "must be a table"),
    ({"a b": {"command": "x"}}, "mcp_servers.a b", "server names may use only"),
    ({"s": {"command": "x", "enabled": True}}, "mcp_servers.s.enabled", "unknown key"),
    ({"s": {"command": ["x"]}}, "mcp_servers.s.command", "must be a non-empty string"),
    ({"s": {"command": "x", "args": "-v"}}, "mcp_servers.s.args", "must be a list of strings"),
    ({"s": {"command": "x", "env": {"A": 1}}}, "mcp_servers.s.env", "must be a table of str"),
    ({"s": {"command": "x", "tool_timeout_ms": 0}}, "mcp_servers.s.tool_timeout_ms",
     "must be a positive integer"),
    ({"s": {"command": "x", "startup_timeout_ms": True}}, "mcp_servers.s.startup_timeout_ms",
     "must be a positive integer"),
    ({"s": {}}, "mcp_servers.s.command", "is required"),
    ({"s": {"command": "x", "url": "http://h/mcp"}}, "mcp_servers.s.url", "not both"),
    ({"s": {"url": "ftp://h"}}, "mcp_servers.s.url", "is not an http(s) URL"),
    ({"s": {"url": "http://h/mcp", "args": []}}, "mcp_servers.s.args", "only applies"),
])
def test_bad_server_tables_name_the_key(tables: Any, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        McpServers(tables, source="/home/me/.subsessions/config.toml")
    assert caught.value.source == "/home/me/.subsessions/config.toml"
    assert caught.value.key == key
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"/home/me/.subsessions/config.toml: {key}: ")


def test_tool_names_are_safe_function_names() -> None:
    assert tool_name("files", "read_file") == "mcp__files__read_file"
    assert tool_name("web", "search.query v2") == "mcp__web__search_query_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("mcp__server__xxx")
    assert long != tool_name("server", "x" * 99)


# -- running servers ----------------------------------------------------------------------


async def test_tools_are_offered_and_called() -> None:
    async with servers({"t": tool_server()}) as running:
        tools = await running.tools()
        names = {t.name: t for t in tools}
        assert set(names) == {"mcp__t__add", "mcp__t__render_chart", "mcp__t__crash",
                              "mcp__t__echo", "mcp__t__fail", "mcp__t__hang", "mcp__t__pid"}
        add = names["mcp__t__add"]
        assert add.description == "Add two integers."
        assert add.parameters["type"] == "object"
        assert set(add.parameters["properties"]) == {"a", "b"}
        assert await call(tools, "mcp__t__echo", text="hello") == "hello"
        assert await call(tools, "mcp__t__add", a=2, b=3) == "5"
        assert await call(tools, "mcp__t__render_chart") == (
            "chart of 3 points\n[image: image/png, about 8 bytes, not shown]")
        with pytest.raises(McpToolError, match=r"^MCP server t, tool fail: .*disk on fire"):
            await call(tools, "mcp__t__fail", reason="disk on fire")
        pid = int(await call(tools, "mcp__t__pid"))
        assert await running.tools() is tools  # started once
        assert int(await call(tools, "mcp__t__pid")) == pid
        assert running.errors == {}
    assert gone(pid)
    with pytest.raises(McpToolError, match="closed"):
        await call(tools, "mcp__t__echo", text="late")
    with pytest.raises(SubsessionError, match="closed"):
        await running.tools()


async def test_a_server_that_fails_to_start_is_skipped_with_its_reason() -> None:
    async with servers({
        "good": tool_server(),
        "refuses": tool_server("--fail"),
        "missing": {"command": "/nonexistent/mcp-server"},
        "silent": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"],
                   "startup_timeout_ms": 300},
    }) as running:
        tools = await running.tools()
        assert {t.name.split("__")[1] for t in tools} == {"good"}
        errors = running.errors
        assert set(errors) == {"refuses", "missing", "silent"}
        assert errors["refuses"] == ("failed to start: it closed the connection; its stderr: "
                                     "tool server: cannot start: TOKEN is not set")
        assert errors["missing"].startswith("failed to start: cannot run it: ")
        assert "/nonexistent/mcp-server" in errors["missing"]
        assert errors["silent"] == "did not start within 300ms"
        assert await call(tools, "mcp__good__echo", text="still fine") == "still fine"


async def test_a_crash_mid_call_is_one_clear_error_and_the_server_comes_back() -> None:
    async with servers({"a": tool_server(), "b": tool_server()}) as running:
        tools = await running.tools()
        first = int(await call(tools, "mcp__a__pid"))
        other = int(await call(tools, "mcp__b__pid"))
        with pytest.raises(McpToolError) as caught:
            await call(tools, "mcp__a__crash")
        assert str(caught.value) == (
            "MCP server a, tool crash: the server exited during the call; its stderr: "
            "tool server: crashing on purpose; it will be started again on the next call")
        assert gone(first)
        assert await call(tools, "mcp__b__echo", text="unaffected") == "unaffected"
        assert int(await call(tools, "mcp__b__pid")) == other
        again = int(await call(tools, "mcp__a__pid"))  # restarted for this call
        assert again != first
        assert await call(tools, "mcp__a__add", a=1, b=1) == "2"
    assert gone(again) and gone(other)


async def test_a_tool_that_does_not_answer_times_out_and_the_server_keeps_serving() -> None:
    async with servers({"slow": tool_server(tool_timeout_ms=300)}) as running:
        tools = await running.tools()
        pid = int(await call(tools, "mcp__slow__pid"))
        with pytest.raises(McpToolError, match=r"^MCP server slow, tool hang: no answer within "
                           r"300ms \(the call was cancelled; the server keeps running\)$"):
            await call(tools, "mcp__slow__hang")
        assert int(await call(tools, "mcp__slow__pid")) == pid
    assert gone(pid)


async def test_closing_while_starting_stops_everything() -> None:
    await McpServers({"t": tool_server()}).aclose()  # never started: nothing to stop
    running = McpServers({"t": tool_server()})
    waiting = asyncio.get_running_loop().create_task(running.tools())
    await asyncio.sleep(0)  # the servers are starting (a Python process takes a while)
    await running.aclose()
    with pytest.raises(SubsessionError, match="the MCP servers are closed"):
        await waiting
    assert running.errors == {}


async def test_a_streamable_http_server(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """`url` servers: here `subsessions mcp --http` itself, its children on the fake model."""
    fake_openai.reply_with(text("done over http"))
    async with http_server(home, fake_openai, tmp_path) as (url, proc):
        async with servers({"subs": {"url": url}}) as running:
            tools = await running.tools()
            assert {t.name for t in tools} == {
                "mcp__subs__create_session", "mcp__subs__wait_session",
                "mcp__subs__wait_sessions", "mcp__subs__cancel_session",
                "mcp__subs__run_session", "mcp__subs__run_sessions",
                "mcp__subs__list_sessions", "mcp__subs__send_message"}
            created = await call(tools, "mcp__subs__create_session",
                                 session_type="default", prompt="work")
            child = orjson.loads(created)["session_id"]
            assert orjson.loads(await call(tools, "mcp__subs__wait_session", session_id=child,
                                           timeout_ms=10_000)) == {"result": "done over http"}
            with pytest.raises(McpToolError, match=r"^MCP server subs, tool wait_session: "
                               r"unknown session nope$"):
                await call(tools, "mcp__subs__wait_session", session_id="nope", timeout_ms=1)
        proc.terminate()
        await proc.wait()


# -- through sessions ---------------------------------------------------------------------


def _add_script(request: ModelRequest) -> list[Any]:
    """Call mcp__t__add once, then report what it said; say what tools there were."""
    outputs = [i for i in request.items if i.get("type") == "function_call_output"]
    if outputs:
        return [f"tool said {outputs[-1]['output']!r} (success={outputs[-1]['success']})"]
    return [{"type": "function_call", "name": "mcp__t__add", "arguments": {"a": 2, "b": 3}}]


async def test_a_child_calls_an_mcp_tool_through_its_allowlist(home: Path) -> None:
    async with servers({"t": tool_server()}) as running:
        tools = await running.tools()
        adder = Profile(name="adder", description="adds", tools=["mcp__t__add"])
        plain = Profile(name="plain", description="no tools", tools=[])
        async with Engine(home, model_client=ScriptedModel(_add_script)) as engine:
            parent = await engine.create_session(SessionConfig(tools=tools,
                                                               custom_agents=(adder, plain)))
            allowed = await parent.subsessions.spawn_child("adder", "add 2 and 3")
            denied = await parent.subsessions.spawn_child("plain", "add 2 and 3")
            assert await parent.subsessions.wait_child(allowed, 30) == (
                "tool said '5' (success=True)")
            assert await parent.subsessions.wait_child(denied, 30) == (
                "tool said \"Tool 'mcp__t__add' is not supported by this client instance.\" "
                "(success=False)")


@pytest.mark.parametrize("where", ["engine", "session"])
async def test_the_engine_offers_mcp_tools_and_stops_the_servers_when_it_closes(
    home: Path, where: str
) -> None:
    tables = {"t": tool_server()}
    engine_tables = tables if where == "engine" else None
    config = SessionConfig(mcp_servers=tables if where == "session" else {},
                           custom_agents=(Profile(name="adder", tools=["mcp__t__add"]),))
    async with Engine(home, model_client=ScriptedModel(_add_script),
                      mcp_servers=engine_tables) as engine:
        first = await engine.create_session(config)
        second = await engine.create_session(config)
        child = await first.subsessions.spawn_child("adder", "add 2 and 3")
        assert await first.subsessions.wait_child(child, 30) == "tool said '5' (success=True)"
        tools = {spec["name"] for spec in second.tool_specs()}
        assert {"mcp__t__add", "mcp__t__pid"} <= tools
        [pid_tool] = [t for t in first.config.tools if t.name == "mcp__t__pid"]
        [same] = [t for t in second.config.tools if t.name == "mcp__t__pid"]
        assert pid_tool is same  # the same tables start their servers once per engine
        pid = int(await call((pid_tool,), "mcp__t__pid"))
    assert gone(pid)


async def test_a_server_that_cannot_start_is_named_in_the_rollout(home: Path) -> None:
    tables = {"broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"],
                         "startup_timeout_ms": 5000}}
    async with Engine(home, model_client=ScriptedModel(["fine"]), mcp_servers=tables) as engine:
        session = await engine.create_session()
        assert await session.send_and_wait("hi") == "fine"
    from subsessions.rollouts import find_rollout, read_rollout

    events = read_rollout(find_rollout(home, session.session_id)).events("background_event")
    assert any("MCP server broken is unavailable" in e["message"] for e in events)


async def test_resumed_and_forked_sessions_get_the_engines_mcp_tools(home: Path) -> None:
    """As a new session does: a session continued from its rollout calls them too."""
    tables = {"t": tool_server()}
    async with Engine(home, model_client=ScriptedModel(_add_script),
                      mcp_servers=tables) as engine:
        first = await engine.create_session()
        assert await first.send_and_wait("add") == "tool said '5' (success=True)"
        await engine.destroy_session(first.session_id)
        resumed = await engine.resume_session(first.session_id)
        forked = await engine.fork_session(first.session_id)
        for session in (resumed, forked):
            assert "mcp__t__add" in {spec["name"] for spec in session.tool_specs()}


async def test_two_callers_creating_one_session_id_at_once_get_one_session(home: Path) -> None:
    """Starting a session's MCP servers takes a while: a second caller naming the same id
    meanwhile is refused, not given a second session writing the same rollout; an id whose
    creation failed can be taken again."""
    from subsessions import SessionBusy, UnknownSessionType
    from subsessions.ids import new_session_id

    config = SessionConfig(mcp_servers={"slow": {
        "command": sys.executable, "args": ["-c", "raise SystemExit(3)"],
        "startup_timeout_ms": 5000}})
    session_id = new_session_id()
    async with Engine(home, model_client=ScriptedModel(["one"])) as engine:
        results = await asyncio.gather(
            engine.create_session(config, session_id=session_id),
            engine.create_session(config, session_id=session_id), return_exceptions=True)
        made = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, SessionBusy)]
        assert len(made) == 1 and len(refused) == 1, results
        assert "already exists; resume it instead" in str(refused[0])
        assert engine.get_session(session_id) is made[0]
        assert await made[0].send_and_wait("hi") == "one"

        other = new_session_id()
        with pytest.raises(UnknownSessionType):
            await engine.create_session(config, profile="no-such-profile", session_id=other)
        assert (await engine.create_session(session_id=other)).session_id == other
