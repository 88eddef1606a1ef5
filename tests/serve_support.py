"""Helpers for the tests of `subsessions serve` driven by the official Copilot SDKs.

The runtime is this repository's `python -m subsessions serve`, launched by the SDK itself
(`RuntimeConnection.for_stdio`), with the model behind the loopback FakeOpenAI server.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, text
from openai_support import cli_env, tool_outputs

copilot = pytest.importorskip("copilot", reason="pip install 'subsessions[test]'")

CHECKER = "You are CHECKER: look keys up and report."
NOT_SUPPORTED = "Tool 'secret' is not supported by this client instance."


def serve_args(home: Path, fake: FakeOpenAI, *extra: str) -> list[str]:
    return ["-m", "subsessions", "serve", "--home", str(home), "--base-url", fake.base_url,
            "--model", "test-model", *extra]


@contextlib.asynccontextmanager
async def python_client(
    home: Path, fake: FakeOpenAI, cwd: Path, *extra: str, tcp: bool = False,
    cap_ms: int | None = None,
) -> AsyncIterator[Any]:
    """A started CopilotClient that launched our runtime (stdio, or TCP on a free port);
    with `cap_ms`, every wait in it is clamped to that instead of an hour (capped_wait.py)."""
    args = serve_args(home, fake, *extra)
    if cap_ms is not None:
        args = [str(Path(__file__).with_name("capped_wait.py")), str(cap_ms), *args[2:]]
    connection = (copilot.RuntimeConnection.for_tcp(path=sys.executable, args=args) if tcp
                  else copilot.RuntimeConnection.for_stdio(path=sys.executable, args=args))
    client = copilot.CopilotClient(connection=connection, working_directory=str(cwd),
                                   env=cli_env(), log_level="warning")
    await client.start()
    process = client._cli_process  # the runtime it launched
    try:
        yield client
    finally:
        await client.stop()
        PROCESSES.append(process)
        for pipe in (process.stdout, process.stderr):  # the SDK leaves them to the GC
            if pipe is not None:
                pipe.close()


PROCESSES: list[Any] = []  # every runtime a client launched, for tests of their end


def scenario(request: Recorded) -> Reply:
    """The parent spawns `checker` and waits; the checker calls its allowed tool and a tool
    its allowlist denies, asks the user, and reports everything it saw."""
    outs = tool_outputs(request)
    if CHECKER in str(request.body.get("instructions", "")):
        if not outs:
            return calls(call("lookup", {"key": "k1"}), call("secret", {}))
        if len(outs) == 2:
            return calls(call("ask_user", {"question": "which colour?"}))
        return text(" | ".join(outs))
    if not outs:
        return calls(call("create_session", {"session_type": "checker", "prompt": "check k1"}))
    if len(outs) == 1:
        child = json.loads(outs[0])["session_id"]
        return calls(call("wait_session", {"session_id": child, "timeout_ms": 30_000}))
    return text("parent saw: " + json.loads(outs[1])["result"])


def checker_agent(tools: list[str] | None) -> dict[str, Any]:
    return {"name": "checker", "display_name": "Checker", "description": "Checks keys",
            "prompt": CHECKER, "tools": tools}
