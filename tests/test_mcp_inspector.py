"""The MCP Inspector CLI (`@modelcontextprotocol/inspector`, npm), a client nobody here
wrote, calling `subsessions mcp` over stdio: `run_session` on the 2026-07-28 wire (where
the Inspector declares MCP Tasks and settles the task our server returns) and
`run_sessions` on the handshake wire (the blocking tool). Installed with npm into
~/.cache/subsessions-tests/mcp-inspector once (`SUBSESSIONS_INSPECTOR_CACHE` moves it);
skipped with the reason when npm is absent or the install fails (offline)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp_support import Children, server_args
from npm_cache import cache_root, installed

__all__ = ["fake_openai"]

VERSION = "2.12.0"
PACKAGE = f"@modelcontextprotocol/inspector@{VERSION}"
CACHE_ENV = "SUBSESSIONS_INSPECTOR_CACHE"


def _installed(prefix: Path) -> Path | None:
    manifest = prefix / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return binary if version == VERSION and binary.exists() else None


@pytest.fixture(scope="module")
def inspector() -> Path:
    """The pinned Inspector's launcher, installed with npm into the cache on first use."""
    named = os.environ.get(CACHE_ENV)
    prefix = Path(named) if named else cache_root() / "mcp-inspector"
    return installed(PACKAGE, prefix, _installed)


async def inspect(inspector: Path, home: Path, fake: FakeOpenAI, cwd: Path,
                  *options: str) -> dict[str, Any]:
    """One Inspector CLI call against `subsessions mcp` (stdio); its JSON output."""
    proc = await asyncio.create_subprocess_exec(
        str(inspector), "--cli", "--format", "json", *options,
        "--", sys.executable, *server_args(home, fake),
        cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "HOME": str(cwd)})
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    found: dict[str, Any] = orjson.loads(out)
    return found


async def test_the_inspector_cli_runs_sub_sessions_through_our_server(
    inspector: Path, home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Children()
    modern = await inspect(
        inspector, home, fake_openai, tmp_path, "--protocol-era", "modern",
        "--method", "tools/call", "--tool-name", "run_session",
        "--tool-args-json", '{"session_type": "default", "prompt": "from the inspector"}')
    result = modern["result"]
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "answer to from the inspector"}]
    legacy = await inspect(
        inspector, home, fake_openai, tmp_path, "--method", "tools/call",
        "--tool-name", "run_sessions", "--tool-args-json", json.dumps({
            "mode": "chain", "timeout_ms": 30_000, "tasks": [
                {"session_type": "default", "prompt": "one"},
                {"session_type": "default", "prompt": "then {previous}"}]}))
    steps = legacy["result"]["structuredContent"]["results"]
    assert [s["result"] for s in steps] == ["answer to one", "answer to then answer to one"]
