"""An HTTP client that goes away has its children cancelled promptly (DESIGN 4): it ended
its MCP session (DELETE, see test_mcp_server::test_streamable_http), it vanished in the
middle of a wait, or it went silent with no request in flight and no open stream for
`--session-idle-timeout` seconds. A client that is connected but thinking keeps them.

`subsessions mcp --http` is a real subprocess; the clients are the official MCP SDK's
(a vanishing one in a process of its own, SIGKILLed)."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_support import Children, create, ending, eventually_ends, http_server, ok
from openai_support import cli_env

from subsessions.mcp.server import MAX_SESSION_IDLE_TIMEOUT

__all__ = ["fake_openai"]

IDLE = "1"  # --session-idle-timeout, seconds
PROMPTLY = 10.0  # seconds: the idle timeout plus a loaded machine's slack

VANISHING_CLIENT = textwrap.dedent("""
    import asyncio, sys
    from mcp import Client

    async def main(url: str) -> None:
        async with Client(url) as client:
            made = await client.call_tool("create_session", {
                "session_type": "default", "prompt": "orphaned"})
            child = made.structured_content["session_id"]
            print(child, flush=True)

            async def on_progress(progress, total, message):
                print("waiting", flush=True)

            await client.call_tool("wait_session", {
                "session_id": child, "timeout_ms": 3_600_000}, progress_callback=on_progress)

    asyncio.run(main(sys.argv[1]))
""")


@pytest.fixture
def children(fake_openai: FakeOpenAI) -> Children:
    script = Children()
    fake_openai.script = script
    return script


async def test_a_client_that_vanishes_mid_wait_has_its_children_cancelled(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    children.gate("orphaned")  # never opened: only a cancel ends the child
    async with http_server(home, fake_openai, tmp_path,
                           "--session-idle-timeout", IDLE) as (url, _):
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", VANISHING_CLIENT, url, env=cli_env(),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
        try:
            assert client.stdout is not None
            async with asyncio.timeout(30):
                child = (await client.stdout.readline()).decode().strip()
                assert (await client.stdout.readline()).decode() == "waiting\n"
                await children.arrival("orphaned").wait()
        finally:
            client.send_signal(signal.SIGKILL)  # no DELETE, no notifications/cancelled
            await client.wait()
        vanished = time.monotonic()
        await eventually_ends(home, child, "turn_aborted", timeout=PROMPTLY)
        elapsed = time.monotonic() - vanished
        await asyncio.wait_for(children.abandonment("orphaned").wait(), PROMPTLY)
    assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}
    print(f"child cancelled {elapsed:.2f}s after its client vanished (idle timeout {IDLE}s)")


async def test_a_silent_client_with_no_open_stream_has_its_children_cancelled(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    """The client keeps its HTTP connection but ends its streams and never says goodbye."""
    children.gate("forgotten")
    async with (
        http_server(home, fake_openai, tmp_path, "--session-idle-timeout", IDLE) as (url, _),
        httpx2.AsyncClient() as http,  # outlives the MCP session: its connection stays open
    ):
        async with (
            streamable_http_client(url, http_client=http, terminate_on_close=False) as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
            child = await create(session, "forgotten")
            await children.arrival("forgotten").wait()
        silent = time.monotonic()
        await eventually_ends(home, child, "turn_aborted", timeout=PROMPTLY)
        elapsed = time.monotonic() - silent
    assert ending(home, child) == {"type": "turn_aborted", "reason": "cancelled"}
    print(f"child cancelled {elapsed:.2f}s after its client fell silent (idle timeout {IDLE}s)")


async def test_a_connected_client_keeps_its_children_past_the_idle_timeout(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, children: Children
) -> None:
    """The SDK client holds a GET stream open, so a pause between calls is not idleness."""
    gate = children.gate("patient")
    async with (
        http_server(home, fake_openai, tmp_path, "--session-idle-timeout", IDLE) as (url, _),
        Client(url) as client,
    ):
        child = ok(await client.call_tool("create_session", {
            "session_type": "default", "prompt": "patient"}))["session_id"]
        await children.arrival("patient").wait()
        await asyncio.sleep(3 * float(IDLE))  # the host thinks for a while: time is the test
        [entry] = ok(await client.call_tool("list_sessions", {}))["sessions"]
        assert entry["status"] == "running"
        gate.set()
        assert ok(await client.call_tool("wait_session", {
            "session_id": child, "timeout_ms": 10_000})) == {"result": "answer to patient"}


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", "1e306",
                                   str(MAX_SESSION_IDLE_TIMEOUT + 1)])
async def test_a_bad_idle_timeout_is_one_line(
    home: Path, fake_openai: FakeOpenAI, value: str
) -> None:
    """Refused while parsing the command line (exit 2), before anything is served: 1e306
    seconds used to be taken, and then every task failed after its child had started."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", "mcp", "--home", str(home), "--base-url",
        fake_openai.base_url, "--http", "127.0.0.1:0", f"--session-idle-timeout={value}",
        env=cli_env(), stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:  # it took the value and is serving
            proc.kill()
            await proc.wait()
    [line] = err.decode().splitlines()
    assert proc.returncode == 2, line
    assert line.startswith("subsessions mcp: argument --session-idle-timeout: "), line
    assert "at most 2592000 seconds" in line or "not a number" in line, line
