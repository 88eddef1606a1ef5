"""`subsessions serve` at the wire: framing, malformed and hostile requests, the handshake,
TCP with a connection token, and shutdown with a tree running (DESIGN 3.10)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, call, calls, fake_openai, text
from openai_support import cli_env, rollouts, tool_outputs
from serve_raw import TIMEOUT, Runtimes, dial, end_of, runtimes
from serve_support import CHECKER

from subsessions.serve.framing import FramingError, frame, read_frame

__all__ = ["fake_openai", "runtimes"]


async def test_bad_requests_get_json_rpc_errors_and_the_server_goes_on(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    fake_openai.reply_with(text("still here"))
    proc, host = await runtimes.stdio(home, fake_openai, tmp_path)
    host.send(b"{not json")
    assert (await host.answer(None))["error"]["code"] == -32700
    host.send(b"[1, 2]")
    assert (await host.answer(None))["error"]["code"] == -32600
    unknown = await host.call("no.such.method")
    assert unknown["error"] == {"code": -32601, "message": "Unhandled method no.such.method"}
    assert (await host.call("session.send", {"sessionId": "x", "prompt": "hi"})
            )["error"]["message"] == "unknown session x"
    bad: list[tuple[str, Any]] = [
        ("session.create", {"sessionId": "../../etc"}),
        ("session.create", {"sessionId": str(uuid.uuid4()), "tools": "lookup"}),
        ("session.create", {"sessionId": str(uuid.uuid4()), "tools": [{"name": "create_session",
                                                                        "description": ""}]}),
        ("session.create", {"sessionId": str(uuid.uuid4()),
                            "customAgents": [{"name": "no spaces", "prompt": "p"}]}),
        ("session.create", []),
        ("session.tools.handlePendingToolCall", {"sessionId": "x", "requestId": "r"}),
    ]
    for method, params in bad:
        answer = await host.call(method, params)
        assert answer["error"]["code"] == -32602, (method, params, answer)
    sid = str(uuid.uuid4())
    assert (await host.call("session.create", {"sessionId": sid}))["result"]["sessionId"] == sid
    for prompt in ("", "   ", None, 7):
        answer = await host.call("session.sendAndWait", {"sessionId": sid, "prompt": prompt})
        assert answer["error"]["code"] == -32602
    # Nothing was lost: the session still answers, and the events are the SDKs' shapes.
    done = await host.call("session.sendAndWait", {"sessionId": sid, "prompt": "hi"})
    assert done["result"]["response"]["data"]["content"] == "still here"
    assert done["result"]["aborted"] is False
    assert done["result"]["completionEventId"] == host.events[-1]["id"]
    assert [e["type"] for e in host.events] == [
        "session.start", "user.message", "assistant.turn_start", "assistant.message",
        "assistant.turn_end", "session.idle"]
    copilot_events = pytest.importorskip("copilot.generated.session_events",
                                          reason="pip install 'subsessions[test]'")
    for event in host.events:
        copilot_events.session_event_from_dict(event)  # the SDK's own parser accepts each
    assert [e["parentId"] for e in host.events[1:]] == [e["id"] for e in host.events[:-1]]
    ping = await host.call("ping", {"message": "x"})
    assert ping["result"]["message"] == "pong: x" and ping["result"]["protocolVersion"] == 3
    assert (await host.call("connect", {}))["result"]["protocolVersion"] == 3
    code, err = await end_of(proc)
    assert code == 0, err
    assert rollouts(home)[sid][-1]["payload"]["type"] == "task_complete"


async def test_a_broken_frame_ends_the_connection_with_a_clear_line(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    proc, host = await runtimes.stdio(home, fake_openai, tmp_path)
    assert "result" in await host.call("ping", {})
    host.writer.write(b"Content-Length: lots\r\n\r\n{}")
    code, err = await end_of(proc)
    assert code == 0
    assert "malformed frame: Content-Length is not a number: 'lots'" in err


def _stall_the_child(request: Any) -> Any:
    if CHECKER in str(request.body.get("instructions", "")):
        return text("never").stall_after(0)
    outs = tool_outputs(request)
    if not outs:
        return calls(call("create_session", {"session_type": "checker", "prompt": "p"}))
    child = json.loads(outs[0])["session_id"]
    return calls(call("wait_session", {"session_id": child, "timeout_ms": 60_000}))


async def test_runtime_shutdown_cancels_the_running_tree_and_exits(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    fake_openai.script = _stall_the_child
    proc, host = await runtimes.stdio(home, fake_openai, tmp_path)
    sid = str(uuid.uuid4())
    await host.call("session.create", {"sessionId": sid, "customAgents": [
        {"name": "checker", "prompt": CHECKER, "tools": []}]})
    assert "messageId" in (await host.call("session.send", {"sessionId": sid,
                                                            "prompt": "go"}))["result"]
    started = await host.event("subagent.started")
    assert started["data"]["agentName"] == "checker"
    assert (await host.call("runtime.shutdown"))["result"] == {}
    await asyncio.wait_for(proc.wait(), TIMEOUT)  # it exits by itself, stdin still open
    code, err = await end_of(proc)
    assert code == 0, err
    found = rollouts(home)
    assert len(found) == 2
    for records in found.values():
        assert records[-1]["payload"]["type"] == "turn_aborted"


async def test_tcp_on_loopback_checks_the_connection_token(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    env = {**cli_env(), "COPILOT_CONNECTION_TOKEN": "s3cret"}
    proc, port = await runtimes.tcp(home, fake_openai, tmp_path, env)
    host = await dial(port)
    early = await host.call("session.create", {"sessionId": str(uuid.uuid4())})
    assert early["error"]["message"] == "call connect with the connection token first"
    assert "error" in await host.call("connect", {"token": "guess"})
    assert (await host.call("connect", {"token": "s3cret"}))["result"]["ok"] is True
    sid = str(uuid.uuid4())
    assert (await host.call("session.create", {"sessionId": sid}))["result"]["sessionId"] == sid
    listed = await host.call("session.list")
    assert [s["sessionId"] for s in listed["result"]["sessions"]] == [sid]
    await host.close()
    os.kill(proc.pid, signal.SIGTERM)
    code, _ = await end_of(proc)
    assert code == 128 + signal.SIGTERM


async def test_read_frame_takes_extra_headers_and_refuses_what_cannot_be_a_frame() -> None:
    async def parse(data: bytes) -> bytes | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader)

    assert await parse(b"") is None
    assert await parse(frame(b'{"a":1}')) == b'{"a":1}'
    assert await parse(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
                       b"Content-Length: 2\r\n\r\n{}") == b"{}"
    for broken in (b"Content-Length: 5\r\n\r\n{}", b"Content-Length: 2\r\n", b"junk\r\n\r\n",
                   b"Content-Type: x\r\n\r\n{}", b"Content-Length: -1\r\n\r\n",
                   b"Content-Length: 99999999999\r\n\r\n"):
        with pytest.raises(FramingError):
            await parse(broken)


async def test_command_line_mistakes_are_one_line(tmp_path: Path) -> None:
    from openai_support import run

    code, out, err = await run("serve", "--home", str(tmp_path / "h"), "--port", "70000",
                               "--base-url", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert (code, out) == (1, "")
    assert err == "subsessions: command line: --port: must be 0..65535, not 70000\n"
    code, _, err = await run("serve", "--stdio", "--port", "1", cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1
