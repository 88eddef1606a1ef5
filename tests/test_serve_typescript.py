"""`subsessions serve` driven by the official TypeScript Copilot SDK (`@github/copilot-sdk`,
installed with npm into ~/.cache/subsessions-tests; skipped where npm is absent): the same
scenario as tests/test_serve_sdk.py, from a Node host."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, fake_openai
from npm_cache import library
from openai_support import cli_env, rollouts
from serve_support import NOT_SUPPORTED, scenario, serve_args

__all__ = ["fake_openai"]
SDK = "@github/copilot-sdk@1.0.14"
HOST = Path(__file__).with_name("serve_ts_host.mjs")


@pytest.fixture(scope="module")
def ts_sdk() -> Path:
    """A directory where `import "@github/copilot-sdk"` resolves (installed once, cached)."""
    return library(SDK, "copilot-sdk-1.0.14", "@github/copilot-sdk")


async def test_the_typescript_sdk_runs_the_scenario(
    ts_sdk: Path, home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = scenario
    host = ts_sdk / HOST.name
    host.write_text(HOST.read_text())
    env = {k: v for k, v in cli_env().items() if not k.startswith("NODE_")}
    proc = await asyncio.create_subprocess_exec(
        "node", str(host), json.dumps([sys.executable, *serve_args(home, fake_openai)]),
        cwd=ts_sdk, env={**env, "PWD": os.fspath(ts_sdk)}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    parent = seen["sessionId"]
    assert seen["content"] == f"parent saw: value of k1 | {NOT_SUPPORTED} | blue"
    assert seen["ran"] == [{"tool": "lookup", "sessionId": parent}]
    requested = [e for e in seen["events"] if e["type"] == "external_tool.requested"]
    child = requested[0]["agentId"]
    assert [(e["toolName"], e["agentId"]) for e in requested] == [("lookup", child)]
    assert child not in (None, parent)
    assert seen["permissions"] == [{"kind": "custom-tool", "toolName": "lookup"}]
    assert seen["questions"] == [{"question": "which colour?", "sessionId": parent}]
    assert {"toolName": "lookup", "sessionId": child} in seen["hooks"]
    types = [e["type"] for e in seen["events"]]
    assert "subagent.started" in types and "subagent.completed" in types
    assert types[-1] == "session.idle" and seen["stopErrors"] == []
    assert set(rollouts(home)) == {parent, child}
