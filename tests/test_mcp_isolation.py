"""Isolation between MCP clients (DESIGN 4): a connection sees, waits for, cancels and
reads (`rollout://`) only its own sessions, and no error names anyone else's.

Two connections of the official MCP client, over streamable HTTP (one server) and over
stdio (two servers on one home), each with a child held in its first model call."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import Children, connect, create, error, http_server, ok

from subsessions.rollouts import find_rollout, read_rollout
from subsessions.rollouts.summary import spawn_of

__all__ = ["fake_openai"]

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
Connect = Callable[[], AbstractAsyncContextManager[Any]]


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server-stderr.log").open("w+") as log:
        yield log


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


@asynccontextmanager
async def over_http(home: Path, fake: FakeOpenAI, cwd: Path) -> AsyncIterator[Connect]:
    async with http_server(home, fake, cwd) as (url, _):
        yield lambda: Client(url)


@asynccontextmanager
async def over_stdio(
    home: Path, fake: FakeOpenAI, cwd: Path, errlog: TextIO
) -> AsyncIterator[Connect]:
    yield lambda: connect(home, fake, cwd, errlog)  # a server process per connection


def parent_of(home: Path, child: str) -> str:
    parent: str = spawn_of(read_rollout(find_rollout(home, child)).meta)["parent"]
    return parent


async def read_error(client: Any, uri: str) -> str:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri)
    return str(caught.value)


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_connection_reaches_only_its_own_sessions(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO,
    transport: str,
) -> None:
    for prompt in ("alice's job", "bob's job"):
        children.gate(prompt)
    serving = (over_http(home, fake_openai, tmp_path) if transport == "http"
               else over_stdio(home, fake_openai, tmp_path, errlog))
    async with serving as open_connection, open_connection() as alice, \
            open_connection() as bob:
        theirs = await create(alice, "alice's job")
        mine = await create(bob, "bob's job")
        await children.arrival("alice's job").wait()
        await children.arrival("bob's job").wait()
        alices = {theirs, parent_of(home, theirs)}
        bobs = {mine, parent_of(home, mine)}

        # tools: Bob's list, waits and cancels do not reach Alice's child
        assert [s["session_id"] for s in ok(await bob.call_tool("list_sessions", {}))[
            "sessions"]] == [mine]
        assert error(await bob.call_tool("wait_session", {
            "session_id": theirs, "timeout_ms": 10})) == f"unknown session {theirs}"
        many = ok(await bob.call_tool("wait_sessions", {
            "session_ids": [mine, theirs], "timeout_ms": 10, "mode": "any"}))
        assert many["results"][theirs] == {"status": "unknown",
                                           "error": f"unknown session {theirs}"}
        assert error(await bob.call_tool("cancel_session", {"session_id": theirs})) == (
            f"unknown session {theirs}")

        # resources: Bob lists and reads his own sessions only
        listed = {str(r.uri) for r in (await bob.list_resources()).resources}
        assert listed == {f"rollout://{s}" for s in bobs}
        for session_id in bobs:
            assert (await bob.read_resource(f"rollout://{session_id}")).contents
        for session_id in alices:
            text = await read_error(bob, f"rollout://{session_id}")
            assert text == f"unknown session {session_id}"
        # prefixes and paths confirm nothing and name no session, however many they would
        # match, even Bob's own (the wires' one rule: full canonical ids only)
        for prefix in ("0", theirs[:8], theirs[:20], theirs[:-1], mine[:8], f"../{mine}",
                       f"sessions/{mine}"):
            text = await read_error(bob, f"rollout://{prefix}")
            assert text == f"unknown session {prefix}", text
            assert UUID.findall(text) == UUID.findall(prefix)  # none but what was sent

        # Alice's child ran on untouched, and she still reads it
        [entry] = ok(await alice.call_tool("list_sessions", {}))["sessions"]
        assert (entry["session_id"], entry["status"]) == (theirs, "running")
        transcript = (await alice.read_resource(f"rollout://{theirs}")).contents[0]
        assert getattr(transcript, "text", "").startswith(f"session {theirs}\n")
        assert "rollout://" + mine not in {
            str(r.uri) for r in (await alice.list_resources()).resources}


async def test_a_symlink_named_like_a_rollout_is_no_resource(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children, errlog: TextIO
) -> None:
    """Links planted in the home, named like rollouts, to the connection's own child's
    rollout and to another file: neither listed nor read, and left as they were."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not a rollout\n")
    async with connect(home, fake_openai, tmp_path, errlog) as session:
        child = await create(session, "a job")
        ok(await session.call_tool("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        own = find_rollout(home, child)
        links = {}
        for target in (own, secret):
            planted = str(uuid.uuid4())
            links[planted] = own.parent / f"rollout-2026-01-01T00-00-00-{planted}.jsonl"
            links[planted].symlink_to(target)
        before = {path: path.read_bytes() for path in (own, secret)}
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert listed == {f"rollout://{child}", f"rollout://{parent_of(home, child)}"}
        for planted in links:
            text = await read_error(session, f"rollout://{planted}")
            assert text == f"unknown session {planted}"
    assert all(link.is_symlink() and link.readlink() in before for link in links.values())
    assert {path: path.read_bytes() for path in before} == before
