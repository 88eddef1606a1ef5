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
from fake_openai import FakeOpenAI, fake_openai, text
from serve_raw import TIMEOUT, dial, end_of, over_stdio, over_tcp

__all__ = ["fake_openai"]


async def test_a_host_error_with_a_text_code_fails_the_hook_not_the_runtime(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("answered")
    proc, host = await over_stdio(home, fake_openai, tmp_path)
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


async def test_sigterm_with_connections_open_exits_143_without_a_traceback(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("never").stall_after(0)
    proc, port = await over_tcp(home, fake_openai, tmp_path)
    busy, idle = await dial(port), await dial(port)
    sid = str(uuid.uuid4())
    assert (await busy.call("session.create", {"sessionId": sid}))["result"]
    assert (await idle.call("ping"))["result"]
    busy.send(orjson.dumps({"jsonrpc": "2.0", "id": "run", "method": "session.sendAndWait",
                            "params": {"sessionId": sid, "prompt": "go"}}))
    await busy.event("assistant.turn_start")
    os.kill(proc.pid, signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), TIMEOUT)
    code, err = await end_of(proc, busy, idle)
    assert code == 128 + signal.SIGTERM
    assert "Traceback" not in err and "CancelledError" not in err, err
