"""`subsessions serve` against hosts that misbehave (issue 25, items 4 and 5): a malformed
answer to the runtime's own request, a signal with connections open, and a host that sends
and never reads."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from fake_openai import FakeOpenAI, fake_openai, text
from serve_raw import TIMEOUT, Runtimes, dial, end_of, runtimes

__all__ = ["fake_openai", "runtimes"]


async def test_a_host_error_with_a_text_code_fails_the_hook_not_the_runtime(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    fake_openai.script = lambda request: text("answered")
    proc, host = await runtimes.stdio(home, fake_openai, tmp_path)
    sid = str(uuid.uuid4())
    hooks: list[str] = []

    async def call(request_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Every hook the runtime asks meanwhile is answered with a malformed error."""
        host.send(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                "params": params}))
        while True:
            message = await host.recv()
            if message.get("method") == "hooks.invoke":
                hooks.append(message["params"]["hookType"])
                host.send(orjson.dumps({"jsonrpc": "2.0", "id": message["id"],
                                        "error": {"code": "boom", "message": "x"}}))
            elif message.get("id") == request_id:
                return message

    assert (await call("new", "session.create", {"sessionId": sid, "hooks": True}))["result"]
    message = await call("run", "session.sendAndWait", {"sessionId": sid, "prompt": "hi"})
    assert "userPromptSubmitted" in hooks
    assert message["result"]["response"]["data"]["content"] == "answered", message
    # The runtime is still serving this host.
    assert (await host.call("ping", {"message": "still"}))["result"]["message"] == "pong: still"
    code, err = await end_of(proc)
    assert code == 0, err
    assert "ValueError" not in err, err
    assert "x (the host's error code 'boom' is not an integer)" in err  # the hook's failure


@pytest.mark.parametrize("transport", ["tcp", "stdio"])
async def test_sigterm_with_connections_open_exits_143_without_a_traceback(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes, transport: str
) -> None:
    fake_openai.script = lambda request: text("never").stall_after(0)
    if transport == "tcp":
        proc, port = await runtimes.tcp(home, fake_openai, tmp_path)
        hosts = [await dial(port), await dial(port)]
        assert (await hosts[1].call("ping"))["result"]  # a second one, idle
    else:
        proc, host = await runtimes.stdio(home, fake_openai, tmp_path)
        hosts = [host]  # on the runtime's pipes: closed with them
    busy = hosts[0]
    sid = str(uuid.uuid4())
    assert (await busy.call("session.create", {"sessionId": sid}))["result"]
    busy.send(orjson.dumps({"jsonrpc": "2.0", "id": "run", "method": "session.sendAndWait",
                            "params": {"sessionId": sid, "prompt": "go"}}))
    await busy.event("assistant.turn_start")
    os.kill(proc.pid, signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), TIMEOUT)
    code, err = await end_of(proc, *(hosts if transport == "tcp" else ()))
    assert code == 128 + signal.SIGTERM
    assert "Traceback" not in err and "CancelledError" not in err, err


def memory(pid: int, field: str) -> int:
    """A `/proc/PID/status` figure in bytes (VmRSS: now; VmHWM: the peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


async def test_a_host_that_sends_and_never_reads_cannot_grow_the_runtime(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    proc, port = await runtimes.tcp(home, fake_openai, tmp_path, log_level="debug")
    assert proc.stderr is not None
    host = await dial(port)
    assert (await host.call("ping"))["result"]
    before = memory(proc.pid, "VmRSS")
    big = "x" * (1 << 20)  # each `ping` answers its 1 MB message back
    count = 200

    async def send() -> None:
        for n in range(count):
            host.send(orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "ping",
                                    "params": {"message": big}}))
            await host.writer.drain()

    async def paused() -> None:
        while b"reading paused" not in await proc.stderr.readline():
            pass

    sending = asyncio.ensure_future(send())
    waiting = asyncio.ensure_future(paused())
    # Either the runtime stops reading from us, or (without backpressure) it reads it all.
    await asyncio.wait((sending, waiting), timeout=60, return_when=asyncio.FIRST_COMPLETED)
    grown = memory(proc.pid, "VmHWM") - before
    waiting.cancel()
    answered = 0
    while answered < count:  # now we read: nothing was lost, the rest is served in turn
        message = await host.recv()
        assert message["result"]["message"] == "pong: " + big
        answered += 1
    await sending
    peak = memory(proc.pid, "VmHWM") - before
    print(f"runtime growth: {grown >> 20} MB unread, {peak >> 20} MB peak")
    os.kill(proc.pid, signal.SIGTERM)
    code, err = await end_of(proc, host)
    assert code == 128 + signal.SIGTERM, err
    assert grown < 40 << 20, f"the runtime grew {grown >> 20} MB while the host did not read"
    assert peak < 60 << 20, f"the runtime grew {peak >> 20} MB serving {count} MB"
